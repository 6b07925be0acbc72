/**
 * Permit granting: what RateBudget decides on a request's locked bucket rows beyond the windows'
 * own arithmetic (`Windows.decide`) — permits spaced near a ceiling, paced across the window while
 * a learned ceiling holds, even shares of a bucket
 * several connections draw on, bulk permits taken a few at a time — and what this process holds
 * between transactions: permits taken ahead and the 429 blocks it has seen (`LocalPermits`). No
 * I/O: times come in as arguments, the database's for the rows and this process's for its own.
 */
import * as Effect from "effect/Effect"
import * as Semaphore from "effect/Semaphore"
import {
  type BucketScope,
  type BucketSpec,
  decide,
  type Decision,
  effectiveMargin,
  grantable,
  type Policy,
  type Priority,
  type WaitReason,
  type WindowState
} from "./Windows.ts"

/** What a permit is decided on, of a bucket's locked row besides its window state. */
export interface LockedRow {
  readonly bucket: string
  readonly scope: BucketScope
  readonly window_ms: number
  /** The level the last 429 set, while its learned ceiling holds. */
  readonly learned_base: number | null
  /** The row's last grant, epoch milliseconds. */
  readonly updated_ms: number
  /** Permits granted in the current window, by connection (its token bucket). */
  readonly shares: Readonly<Record<string, number>>
  /** How many connections drew on the bucket in the window before. */
  readonly prev_consumers: number
  /** The database's time when the row was read. */
  readonly now_ms: number
}

const NEAR_SHARE = 0.1
/**
 * Near a ceiling (this share of the limit left, at least 2 requests), permits are spaced by
 * NEAR_SPACING_MS across every process (the row's last grant), so that about one request is in
 * flight when an unknown limit is met: a co-tenant's share, or a probe that went too far, costs
 * the one request rather than a burst.
 */
const NEAR_SPACING_MS = 250
/** The spacing in a window of `windowMs`: 250 ms, less in windows shortened for tests (a 400th). */
const spacingFor = (windowMs: number) => Math.min(NEAR_SPACING_MS, Math.floor(windowMs / 400))

/**
 * Near the ceiling: within a tenth of it (at least 2 requests), or anywhere above the level the
 * last 429 set (`learned_base`), which probing has raised the ceiling past.
 */
const nearCeiling = (row: LockedRow, state: WindowState, now: number) => {
  const live = state.windowStart !== null && now < state.windowStart + state.windowMs
  const used = live ? state.used : 0
  const base = row.learned_base === null ? state.limit : Math.min(state.limit, row.learned_base)
  return base - used <= Math.max(2, Math.floor(base * NEAR_SHARE))
}

/** The share of a window after which a shared bucket's even shares no longer bind. */
const FREE_AT = 0.85

/**
 * The fair-share wait of a grant of `taken` permits to `consumer` on a shared bucket, or undefined.
 * A bucket several connections draw on — one egress address for a partner serving many firms, one
 * app's company bucket — is shared evenly: each connection (known by its token bucket) takes at
 * most `limit / n` of a window, `n` the connections that drew on it in this window or the one
 * before, until `FREE_AT` of the window has passed; what the others left is then free to whoever
 * wants it (max-min fair, roughly: a connection that wants less than its share leaves the rest to
 * those that want more). Each connection's own buckets still hold.
 */
const fairShareWait = (row: LockedRow, state: WindowState, consumer: string, taken: number, now: number) => {
  const live = state.windowStart !== null && now < state.windowStart + state.windowMs
  if (!live) return undefined
  const shares = row.shares
  const n = Math.max(row.prev_consumers, Object.keys(shares).length + (consumer in shares ? 0 : 1))
  if (n <= 1) return undefined
  const freeAt = state.windowStart! + Math.floor(state.windowMs * FREE_AT)
  if (now >= freeAt) return undefined
  const mine = shares[consumer] ?? 0
  // An even share of what is granted freely: the last tenth is spaced (near the ceiling) and goes
  // to whoever asks once the shares no longer bind.
  return mine + taken > Math.max(1, Math.floor((state.limit * (1 - NEAR_SHARE)) / n)) ? freeAt : undefined
}

/** The most bulk permits one transaction takes (see `LocalPermits`). */
const BULK_AHEAD_MAX = 32
/**
 * Bulk permits one transaction takes: one per 100 the windows still have room for, between 1 and
 * `BULK_AHEAD_MAX`. What lapses unused is then at most 1% of what was left: under the spec's
 * limits (500 or 1,000 requests an hour per token) a handful, and 32 only where the windows hold
 * thousands.
 */
export const bulkAhead = (room: number) => Math.min(BULK_AHEAD_MAX, Math.max(1, Math.floor(room / 100)))
/** How long bulk permits taken ahead may wait for their request before they lapse. */
const BULK_HOLD_MS = 1_000

/** The connection a request's shared buckets (ip, company) answer to: its token bucket. */
export const consumerOf = (rows: ReadonlyArray<LockedRow>) => rows.find((row) => row.scope === "token")?.bucket

/** The longest of some buckets' waits as a decision (naming the first), or undefined if none. */
const longestWait = (waits: ReadonlyArray<{ bucket: string; until: number }>, reason: WaitReason) =>
  waits.length === 0
    ? undefined
    : ({
        kind: "wait",
        until: Math.max(...waits.map((wait) => wait.until)),
        bucket: waits[0]!.bucket,
        reason
      } satisfies Decision)

/** Near a ceiling, one permit per NEAR_SPACING_MS: the wait for the rows spaced, if any. */
const spacedWait = (rows: ReadonlyArray<LockedRow>, states: ReadonlyArray<WindowState>, now: number) =>
  longestWait(
    rows
      .filter(
        (row, index) =>
          nearCeiling(row, states[index]!, now) && now - row.updated_ms < spacingFor(states[index]!.windowMs)
      )
      .map((row) => ({ bucket: row.bucket, until: row.updated_ms + spacingFor(row.window_ms) })),
    "full"
  )

/** Whether a bucket's permits are paced: while its learned ceiling holds, or always (`budget.pacing`). */
const isPaced = (row: LockedRow, policy: Policy) => policy.pacing === "always" || row.learned_base !== null

/**
 * While a learned ceiling holds (a 429 below the limit showed that others draw on the bucket),
 * permits are paced evenly across the window's usable part instead of granted as fast as asked:
 * the k-th permit of a window not before (k - 1) / ceiling of it has passed. Taking the ceiling
 * early would take requests the others make later in the window, and they would meet the 429s:
 * with a co-tenant that spends evenly, crm-sync took 113–145% of what it left (the budget
 * benchmark's fourth run). Paced, crm-sync meets the limit only when the two together reach it,
 * and a 429 then teaches a ceiling closer to what the others leave. With `budget.pacing: always`,
 * the configured limit is paced too: a co-tenant that spends late in the window is then met (a 429
 * to learn from) instead of left to meet the limit crm-sync reached first.
 */
const pacedUntil = (row: LockedRow, state: WindowState, taken: number, now: number, policy: Policy) => {
  if (!isPaced(row, policy) || state.limit <= 0) return undefined
  const live = state.windowStart !== null && now < state.windowStart + state.windowMs
  const start = live ? state.windowStart! : now
  const due = (live ? state.used : 0) + taken - 1
  if (due <= 0) return undefined
  const span = state.windowMs - effectiveMargin(state.windowMs, policy)
  const until = start + Math.ceil((due * span) / state.limit)
  return until > now ? until : undefined
}

/** The wait for the rows whose permits are paced (`pacedUntil`), if any. */
const pacedWait = (
  rows: ReadonlyArray<LockedRow>,
  states: ReadonlyArray<WindowState>,
  taken: number,
  now: number,
  policy: Policy
) => {
  const paced = rows.flatMap((row, index) => {
    const until = pacedUntil(row, states[index]!, taken, now, policy)
    return until === undefined ? [] : [{ bucket: row.bucket, until }]
  })
  return longestWait(paced, "full")
}

/** A shared bucket (ip, company) answers to the connection's token bucket: the wait for its fair share, if any. */
const unfairWait = (rows: ReadonlyArray<LockedRow>, states: ReadonlyArray<WindowState>, taken: number, now: number) => {
  const consumer = consumerOf(rows)
  if (consumer === undefined) return undefined
  const unfair = rows.flatMap((row, index) => {
    if (row.scope === "token") return []
    const until = fairShareWait(row, states[index]!, consumer, taken, now)
    return until === undefined ? [] : [{ bucket: row.bucket, until }]
  })
  return longestWait(unfair, "reserve")
}

/** The decision of one attempt, at the database's time, and how many permits it takes if granted. */
export interface Granting {
  readonly decision: Decision
  readonly now: number
  readonly taken: number
}

/**
 * The decision on the locked rows (`states` their window states, in the same order). With
 * `ahead`, takes up to `bulkAhead` of the room every bucket has and at most `aheadCap` (at least
 * `permits`), unless a bucket is near its ceiling. Interactive work is neither spaced nor held to fair shares.
 */
export const grantOrWait = (
  rows: ReadonlyArray<LockedRow>,
  states: ReadonlyArray<WindowState>,
  permits: number,
  priority: Priority,
  policy: Policy,
  ahead: boolean,
  aheadCap: number = BULK_AHEAD_MAX
): Granting => {
  // Whole milliseconds: a window's start is written from it and read back rounded, and a start
  // that differs by a fraction would look like a new window (its shares and ceiling reset).
  const now = Math.round(Math.max(...rows.map((row) => row.now_ms)))
  const room = Math.min(...states.map((state) => grantable(state, now, priority, policy)))
  // Neither near a ceiling nor paced are permits taken ahead.
  const near = rows.some((row, index) => isPaced(row, policy) || nearCeiling(row, states[index]!, now))
  const taken = ahead && !near ? Math.max(permits, Math.min(room, bulkAhead(room), aheadCap)) : permits
  const decided = decide(states, now, taken, priority, policy)
  if (decided.kind !== "grant" || priority === "interactive") return { decision: decided, now, taken }
  const waits = spacedWait(rows, states, now) ?? pacedWait(rows, states, taken, now, policy)
  if (waits !== undefined) return { decision: waits, now, taken }
  const unfair = unfairWait(rows, states, taken, now)
  if (unfair === undefined) return { decision: decided, now, taken }
  // A fair share with room for the permits asked for, but not for those taken ahead: take only
  // those. Many connections on one address leave each a share of tens an hour, which permits
  // taken ahead would spend, and the crawl would then wait for the window's end in its worker.
  if (taken > permits && unfairWait(rows, states, permits, now) === undefined) {
    return { decision: decide(states, now, permits, priority, policy), now, taken: permits }
  }
  return { decision: unfair, now, taken }
}

/** Waking a little after the computed moment spreads processes that were waiting for the same one. */
export const wakeJitterMs = (waitMs: number) => Math.min(25, Math.ceil(waitMs * 0.02))

/** The key of a set of buckets (in key order) for the permits held for it. */
export const reservoirKey = (sorted: ReadonlyArray<BucketSpec>) => sorted.map((bucket) => bucket.key).join("\n")

/** Bulk permits taken ahead for one set of buckets, and when they lapse (this process's clock). */
interface Reservoir {
  count: number
  until: number
}

/** Why a request waits before asking the database: a 429 this process saw. */
export interface LocalWait {
  readonly waitMs: number
  readonly bucket: string
  readonly reason: WaitReason
}

/**
 * What this process holds between transactions, on its own clock. Bulk permits are taken a few at
 * a time (`bulkAhead`): a crawl asks for one permit per page, and one transaction per page was most
 * of what the budget cost a fast crawl. The extra permits are counted in the shared windows when
 * taken, like any other, and held here for at most `BULK_HOLD_MS` and never past the window's close
 * (after which a request could reach the server in its next window uncounted); a 429 drops them.
 * One fiber at a time refills them while the others wait for it. What a finished crawl leaves
 * unused (at most 1% of the room, 31 at most, per bucket set) is counted but never sent:
 * conservative, never over the limit.
 */
export class LocalPermits {
  readonly #reservoirs = new Map<string, Reservoir>()
  /** Per bucket set: the size of its last refill and when it was taken (`refillSize`). */
  readonly #refillSizes = new Map<string, { readonly size: number; readonly at: number }>()
  /** Per bucket set: the acquirers asking for a permit now (one refill takes enough for them). */
  readonly #asking = new Map<string, number>()
  /**
   * Blocks this process learned from a 429, by bucket, until when: set the moment the 429 is seen,
   * before the block is written to the database, so that no other fiber of this process sends
   * while that write waits for its row locks (a loaded database can take hundreds of
   * milliseconds). Other processes learn the block from the database.
   */
  readonly #blocks = new Map<string, number>()
  /**
   * One refill at a time per bucket set in this process: acquirers that find the reservoir empty
   * while another refills it wait for that refill instead of queueing on the same three row locks
   * (each in a transaction of its own), and most then find a permit it took ahead.
   */
  readonly #refills = new Map<string, Semaphore.Semaphore>()

  /** The longest block of these buckets still in force at `local`, if any. */
  blocked(buckets: ReadonlyArray<BucketSpec>, local: number): LocalWait | undefined {
    let until = local
    let bucket: string | undefined
    for (const { key } of buckets) {
      const blockedUntil = this.#blocks.get(key)
      if (blockedUntil !== undefined && blockedUntil > until) {
        until = blockedUntil
        bucket = key
      }
    }
    return bucket === undefined ? undefined : { waitMs: until - local, bucket, reason: "blocked" }
  }

  /**
   * How many permits the next refill of the bucket set `key` takes (with the one asked for), on a
   * slow start: 1 at first, doubled (up to BULK_AHEAD_MAX) when the consumer emptied its last
   * refill and asks again within BULK_HOLD_MS, halved when permits lapsed unused or it asked
   * after a pause. A connection whose job sends a request or two (a one-page crawl, a poll) then
   * takes only what it sends: permits taken ahead and left to lapse are counted in the shared
   * windows, and with hundreds of connections on one address they spent each connection's fair
   * share of it before its jobs were done. A long crawl reaches 32 a refill within five refills.
   */
  refillSize(key: string, local: number): number {
    const last = this.#refillSizes.get(key)
    const held = this.#reservoirs.get(key)
    const lapsedUnused = held !== undefined && held.count > 0
    const size =
      last === undefined
        ? 1
        : lapsedUnused || local - last.at > BULK_HOLD_MS
          ? Math.max(1, Math.floor(last.size / 2))
          : Math.min(BULK_AHEAD_MAX, last.size * 2)
    this.#refillSizes.set(key, { size, at: local })
    // Acquirers already waiting for this refill will spend what it takes for them.
    return Math.min(BULK_AHEAD_MAX, Math.max(size, this.#asking.get(key) ?? 0))
  }

  /** Counts an acquirer of the bucket set `key` while `effect` runs (see `refillSize`). */
  asking<A, E, R>(key: string, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> {
    const asking = this.#asking
    return Effect.acquireUseRelease(
      Effect.sync(() => asking.set(key, (asking.get(key) ?? 0) + 1)),
      () => effect,
      () =>
        Effect.sync(() => {
          const left = (asking.get(key) ?? 1) - 1
          if (left === 0) asking.delete(key)
          else asking.set(key, left)
        })
    )
  }

  /** Takes a permit held ahead for the bucket set `key`, if one is still good at `local`. */
  takeHeld(key: string, local: number): boolean {
    const held = this.#reservoirs.get(key)
    if (held === undefined || held.count === 0 || local >= held.until) return false
    held.count--
    return true
  }

  /**
   * Holds `count` permits taken ahead by a grant of `windows` at the database's `now`: until
   * `BULK_HOLD_MS` from `local`, and never past the first of the windows to close.
   */
  hold(key: string, count: number, windows: ReadonlyArray<WindowState>, policy: Policy, now: number, local: number) {
    const closes = Math.min(
      ...windows.map((window) => window.windowStart! + window.windowMs - effectiveMargin(window.windowMs, policy))
    )
    const until = local + Math.min(BULK_HOLD_MS, closes - now)
    const held = this.#reservoirs.get(key)
    if (held !== undefined && held.count > 0 && local < held.until) {
      held.count += count
      held.until = Math.min(held.until, until)
    } else this.#reservoirs.set(key, { count, until })
  }

  /** A 429 on `keys`: they are blocked until `until`, and the permits held for any set with one of them lapse. */
  block(keys: ReadonlySet<string>, until: number) {
    for (const key of keys) this.#blocks.set(key, Math.max(this.#blocks.get(key) ?? 0, until))
    for (const key of this.#reservoirs.keys()) {
      if (key.split("\n").some((bucket) => keys.has(bucket))) this.#reservoirs.delete(key)
    }
  }

  /** The lock a refill of the bucket set `key` holds. */
  refillLock(key: string): Semaphore.Semaphore {
    let lock = this.#refills.get(key)
    if (lock === undefined) {
      lock = Semaphore.makeUnsafe(1)
      this.#refills.set(key, lock)
    }
    return lock
  }
}
