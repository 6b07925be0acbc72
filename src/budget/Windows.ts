/**
 * The arithmetic of spec §8's fixed windows, with no I/O: given the stored state of a request's
 * buckets and the current time, may `permits` more requests start now, and if not, from when?
 * RateBudget runs it inside a transaction that holds the buckets' row locks; the backfill's ETA
 * runs it forward in time (`timeUntil`). Windows are anchored to events, not to wall-clock hours,
 * so clock skew with the CRM does not matter: a window begins at its first permit and lasts
 * `windowMs` ("a fixed one-hour window that begins at its first request").
 */

export type Priority = "interactive" | "incremental" | "bulk"
export const priorities: ReadonlyArray<Priority> = ["interactive", "incremental", "bulk"]

export type BucketScope = "token" | "company" | "ip"

/** A bucket as configured: its key in `crm_sync.rate_windows`, its kind, its limit per window. */
export interface BucketSpec {
  readonly key: string
  readonly scope: BucketScope
  readonly limit: number
  readonly windowMs: number
}

/** A bucket as stored. Times are epoch milliseconds on the database's clock. */
export interface WindowState extends BucketSpec {
  readonly windowStart: number | null
  readonly used: number
  readonly blockedUntil: number | null
}

export interface Policy {
  /** Share of each window that neither incremental nor bulk work may take (0..1). */
  readonly reserveInteractive: number
  /** Share of each window that bulk work may not take, on top of `reserveInteractive` (0..1). */
  readonly reserveIncremental: number
  readonly marginMs: number
  /** Permits paced across the window only while a learned ceiling holds, or always. */
  readonly pacing: "learned" | "always"
}

export type WaitReason = "blocked" | "closing" | "full" | "reserve"

export type Decision =
  | { readonly kind: "grant"; readonly windows: ReadonlyArray<WindowState> }
  | { readonly kind: "wait"; readonly until: number; readonly bucket: string; readonly reason: WaitReason }

/**
 * The margin actually applied to a window: the configured one, but never more than a tenth of the
 * window, so a shortened test window (seconds) still leaves most of itself usable.
 *
 * Two margins protect against the gap between our permit and the server's count of the request
 * (network latency, a slow event loop): no permit is granted in the last `marginMs` of a window
 * ("closing"), so a request permitted late still reaches the server inside the server's window;
 * and a new window does not start until a margin after the old one ended (`openingMargin`),
 * because the server's window began when our first request *arrived*, after our first permit, and
 * so ends after ours. Half the margin at the grant's time was tried: each boundary lost 0.5 s
 * instead of 1 s, but on a loaded machine requests sent early in a window were counted by the
 * server in the last one (the gap between a permit and its send had grown past the half margin);
 * so the window's start now moves to its first request's departure instead.
 */
export const effectiveMargin = (windowMs: number, policy: Policy): number =>
  Math.max(0, Math.min(policy.marginMs, Math.floor(windowMs / 10)))

/** The most a new window waits after the last one's end, once windows start at a departure. */
const OPENING_MARGIN_MAX_MS = 500

/**
 * How long after a window's end the next may start: the margin, but at most 500 ms. A window's
 * start is moved to when its first request actually left (RateBudget's `anchor`, called by the
 * client as it sends), so the server's window begins at most that request's way to the server
 * later than ours: what a permit held ahead or a busy event loop added before the send no longer
 * needs a margin of its own. A window opened by a caller that does not anchor keeps the grant's
 * time, as before; the margins of windows shortened for tests (a tenth) stay whole below 5 s.
 */
export const openingMargin = (windowMs: number, policy: Policy): number =>
  Math.min(effectiveMargin(windowMs, policy), OPENING_MARGIN_MAX_MS)

const reserveShare = (priority: Priority, policy: Policy): number =>
  priority === "interactive"
    ? 0
    : priority === "incremental"
      ? policy.reserveInteractive
      : Math.min(1, policy.reserveInteractive + policy.reserveIncremental)

/** The window `state` is in at `now`: its own, or a fresh one if it has ended (plus the opening margin). */
const current = (state: WindowState, now: number, opening: number): { start: number; used: number } =>
  state.windowStart === null || now >= state.windowStart + state.windowMs + opening
    ? { start: now, used: 0 }
    : { start: state.windowStart, used: state.used }

/**
 * Permits that must stay unused at `now` for a priority: the reserve, decaying to zero at the
 * close. Priorities share a window through reserves: bulk work must leave `reserveInteractive +
 * reserveIncremental` of the limit unused, incremental work `reserveInteractive`. An unused reserve
 * is not wasted: it shrinks linearly to nothing over the window, so by the window's close bulk work
 * may take everything the others did not.
 */
const reserveAt = (start: number, closeAt: number, now: number, share: number, limit: number): number => {
  if (share <= 0 || closeAt <= start) return 0
  const decay = Math.min(1, Math.max(0, (closeAt - now) / (closeAt - start)))
  // Rounded: the full reserve at the window's start, nothing left shortly before its close.
  return Math.round(share * limit * decay)
}

/**
 * The earliest time at or after `now` when `permits` more requests fit in this bucket for this
 * priority, assuming nobody else takes any meanwhile. `reason` says what the wait is for.
 */
export const earliest = (
  state: WindowState,
  now: number,
  permits: number,
  priority: Priority,
  policy: Policy
): { readonly at: number; readonly reason: WaitReason | undefined } => {
  const margin = effectiveMargin(state.windowMs, policy)
  const opening = openingMargin(state.windowMs, policy)
  const share = reserveShare(priority, policy)
  let at = now
  let reason: WaitReason | undefined = undefined
  if (state.blockedUntil !== null && at < state.blockedUntil) {
    at = state.blockedUntil
    reason = "blocked"
  }
  let { start, used } = current(state, at, opening)
  // At most three steps: this window, its close, then a fresh window (where permits ≤ limit fits).
  for (let step = 0; step < 3; step++) {
    const closeAt = start + state.windowMs - margin
    const nextStart = start + state.windowMs + opening
    if (at >= closeAt) {
      at = nextStart
      reason ??= "closing"
      start = at
      used = 0
      continue
    }
    const free = state.limit - used - permits
    if (free < 0) {
      at = nextStart
      reason ??= "full"
      start = at
      used = 0
      continue
    }
    if (reserveAt(start, closeAt, at, share, state.limit) <= free) return { at, reason }
    // round(share·limit·decay(t)) ≤ free  ⟺  decay(t) < (free + ½) / (share·limit)
    const t = closeAt - ((closeAt - start) * (free + 0.5)) / (share * state.limit)
    reason ??= "reserve"
    const next = Math.max(at, Math.ceil(t) + 1)
    if (next < closeAt) return { at: next, reason }
    at = closeAt
  }
  return { at, reason }
}

/**
 * Decides a request for `permits` permits on all of `states` at once (spec §8: "every request is
 * checked against all three buckets"): either every bucket grants and the new states are returned,
 * or none does and the caller learns the earliest moment worth asking again.
 */
export const decide = (
  states: ReadonlyArray<WindowState>,
  now: number,
  permits: number,
  priority: Priority,
  policy: Policy
): Decision => {
  let wait: { until: number; bucket: string; reason: WaitReason } | undefined
  for (const state of states) {
    const { at, reason } = earliest(state, now, permits, priority, policy)
    if (at > now && (wait === undefined || at > wait.until)) {
      wait = { until: at, bucket: state.key, reason: reason ?? "full" }
    }
  }
  if (wait !== undefined) return { kind: "wait", ...wait }
  return {
    kind: "grant",
    windows: states.map((state) => {
      const { start, used } = current(state, now, openingMargin(state.windowMs, policy))
      return { ...state, windowStart: start, used: used + permits }
    })
  }
}

/**
 * Milliseconds until `permits` more requests could all have been sent from these buckets by one
 * consumer of this priority, if nobody else used them: the backfill's ETA. Runs `decide` forward,
 * taking as many permits as fit at each step.
 */
export const timeUntil = (
  states: ReadonlyArray<WindowState>,
  now: number,
  permits: number,
  priority: Priority,
  policy: Policy
): number => {
  let remaining = permits
  let at = now
  let windows = states
  // Each step either grants at least one permit or moves time forward; the guard only protects
  // against a misconfigured policy looping forever.
  for (let step = 0; remaining > 0 && step < 1_000_000; step++) {
    const room = Math.min(remaining, ...windows.map((state) => grantable(state, at, priority, policy)))
    if (room > 0) {
      const decision = decide(windows, at, room, priority, policy)
      if (decision.kind === "grant") {
        windows = decision.windows
        remaining -= room
        continue
      }
    }
    at = Math.max(...windows.map((state) => earliest(state, at, 1, priority, policy).at))
  }
  return at - now
}

/** How many permits this bucket alone would grant at `now` for a priority. */
export const grantable = (state: WindowState, now: number, priority: Priority, policy: Policy): number => {
  if (state.blockedUntil !== null && now < state.blockedUntil) return 0
  const margin = effectiveMargin(state.windowMs, policy)
  const { start, used } = current(state, now, openingMargin(state.windowMs, policy))
  const closeAt = start + state.windowMs - margin
  if (now >= closeAt) return 0
  const reserve = reserveAt(start, closeAt, now, reserveShare(priority, policy), state.limit)
  return Math.max(0, state.limit - used - reserve)
}
