/**
 * RateBudget: the one scheduler every CRM request goes through (spec §8). A request takes a
 * permit from its three buckets — token/user, company/app, IP — at once, or from none of them;
 * the buckets live in `crm_sync.rate_windows`, so every process on the database draws on the same
 * windows and a backfill beside a running daemon never exceeds a limit together with it.
 *
 * One acquire is one short transaction: an upsert of the three rows (which locks them, always in
 * key order, so two acquirers cannot deadlock), the decision of `Windows.decide` on the locked
 * state with the database's clock, and, if granted, the update. A denied acquirer learns the
 * earliest moment worth asking again (its window's reset, a 429's `blocked_until`, the reserve's
 * decay) and sleeps until then: waiting costs no queries. Time is the database's
 * (`clock_timestamp()`): one clock for all processes, whatever their hosts' clocks say.
 *
 * Bulk permits are taken a few at a time (`BULK_AHEAD`): a crawl asks for one permit per page, and
 * one transaction per page was most of what the budget cost a fast crawl. The extra permits are
 * counted in the shared windows when taken, like any other, and held in this process for at most
 * `BULK_HOLD_MS` and never past the window's close (after which a request could reach the server in
 * its next window uncounted); a 429 drops them. How many one transaction takes grows with the room
 * left (`bulkAhead`: 1 per 100, at most 32), and one fiber at a time refills them while the others
 * wait for it. What a finished crawl leaves unused (at most 1% of the room, 31 at most, per bucket
 * set) is counted but never sent: conservative, never over the limit.
 *
 * Learned ceilings. The token, app and address are shared with whatever else talks to the CRM, and
 * no header says how much of a bucket is left (spec §8). A 429 that comes while crm-sync's own
 * count in the window is below the configured limit means the others spent the difference: the
 * bucket's `learned_limit` becomes what crm-sync had sent (its count less the refused request), and
 * every further 429 of the same block (requests that were already in flight) lowers it by one
 * more, so it ends at what the CRM actually accepted. Later windows budget to it; each window that
 * passes without a 429 raises it a step (`probe_step` of the limit) until the configured limit is
 * back; it is forgotten after `learned_ceiling_ttl`. It never drops below a tenth of the limit, so
 * a 429 no bucket caused (a storm, a CRM fault) cannot starve the connection for long.
 *
 * Fair shares. A bucket several connections draw on — one egress address for a partner serving
 * many firms, one app's company bucket — is shared evenly: each connection (known by its token
 * bucket) takes at most `limit / n` of a window, `n` the connections that drew on it in this
 * window or the one before, until `FREE_AT` of the window has passed; what the others left is then
 * free to whoever wants it (max-min fair, roughly: a connection that wants less than its share
 * leaves the rest to those that want more). Each connection's own buckets still hold.
 *
 * Why not `effect/persistence/RateLimiter`: its "fixed-window" store grows a per-key TTL by
 * `window / limit` per token, a smoothed limit rather than spec §8's window that begins at its
 * first request and resets all at once; it consumes one key per call, so three buckets cannot be
 * taken atomically (a permit from two buckets and a refusal from the third would leak); it has no
 * priorities and no externally imposed block (a 429's `Retry-After`); and its stores are memory
 * and Redis, where ours must be the PostgreSQL the processes already share.
 */
import { Clock, Context, DateTime, Duration, Effect, Layer, Random, Schedule, Schema, Semaphore } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql/SqlError"
import { AppConfig } from "../config/AppConfig.ts"
import { clampRetryAfter, jitterRetryAfter } from "./RetryAfter.ts"
import {
  type BucketScope,
  type BucketSpec,
  decide,
  type Decision,
  effectiveMargin,
  grantable,
  type Policy,
  type Priority,
  timeUntil as windowsTimeUntil,
  type WaitReason,
  type WindowState
} from "./Windows.ts"

export type { BucketScope, BucketSpec, Policy, Priority, WaitReason } from "./Windows.ts"

export class BudgetError extends Schema.TaggedError<BudgetError>()("BudgetError", {
  message: Schema.String,
  cause: Schema.optional(Schema.Defect())
}) {}

/** A bucket as `status` reports it (and `crm-sync status --json` prints it). */
export interface BucketStatus {
  readonly bucket: string
  readonly scope: BucketScope
  readonly limit: number
  /** Requests counted in the current window (0 once it has ended). */
  readonly used: number
  readonly window: Duration.Duration
  /** Start of the current window, if one is running. */
  readonly windowStart: DateTime.Utc | undefined
  /** When the current window ends and a fresh one may begin (plus the safety margin). */
  readonly resetsAt: DateTime.Utc | undefined
  /** Set by a 429: no request is sent on this bucket before then. */
  readonly blockedUntil: DateTime.Utc | undefined
  /** The ceiling learned from 429s below `limit` (other consumers' use), while it holds. */
  readonly learnedLimit: number | undefined
}

/** The JSON shape of a bucket's status (snake_case, as `status --json` prints it). */
export const bucketStatusJson = (status: BucketStatus) => ({
  bucket: status.bucket,
  scope: status.scope,
  limit: status.limit,
  used: status.used,
  window_seconds: Duration.toSeconds(status.window),
  window_start: status.windowStart === undefined ? null : DateTime.formatIso(status.windowStart),
  resets_at: status.resetsAt === undefined ? null : DateTime.formatIso(status.resetsAt),
  blocked_until: status.blockedUntil === undefined ? null : DateTime.formatIso(status.blockedUntil),
  learned_limit: status.learnedLimit ?? null
})

/** The answer of `tryAcquire`. */
export type TryAcquire =
  | { readonly granted: true }
  | {
      readonly granted: false
      readonly retryIn: Duration.Duration
      readonly bucket: string
      readonly reason: WaitReason
    }

/** Which of a request's buckets a 429 names; `unknown` blocks all of them (the safe reading). */
export type ExhaustedLimit = BucketScope | "unknown"

const Row = Schema.Struct({
  bucket: Schema.String,
  scope: Schema.Literals(["token", "company", "ip"]),
  request_limit: Schema.Number,
  window_ms: Schema.Number,
  window_start_ms: Schema.NullOr(Schema.Number),
  used: Schema.Number,
  blocked_until_ms: Schema.NullOr(Schema.Number),
  learned_limit: Schema.NullOr(Schema.Number),
  learned_base: Schema.NullOr(Schema.Number),
  updated_ms: Schema.Number,
  shares: Schema.Record(Schema.String, Schema.Number),
  prev_consumers: Schema.Number,
  now_ms: Schema.Number
})
type Row = typeof Row.Type
const decodeRows = Schema.decodeUnknownEffect(Schema.Array(Row))

/** A window's state, budgeted to the learned ceiling while one holds. */
const toState = (row: Row): WindowState => ({
  key: row.bucket,
  scope: row.scope,
  limit: row.learned_limit === null ? row.request_limit : Math.min(row.request_limit, row.learned_limit),
  windowMs: row.window_ms,
  windowStart: row.window_start_ms === null ? null : Math.round(row.window_start_ms),
  used: row.used,
  blockedUntil: row.blocked_until_ms === null ? null : Math.round(row.blocked_until_ms)
})

/** How ceilings are learned (see the module comment). */
export interface Learning {
  /** How long a learned ceiling holds. */
  readonly ttlMs: number
  /** The rise after each clean window, as a share of the configured limit. */
  readonly stepShare: number
}

export const defaultLearning: Learning = { ttlMs: 6 * 3_600_000, stepShare: 0.2 }

/** A learned ceiling never goes below this share of the configured limit. */
const FLOOR_SHARE = 0.1
const floorSql = `GREATEST(1, floor(request_limit * ${FLOOR_SHARE})::int)`

/** In a 429's UPDATE: the window is live and crm-sync's own count was below the configured limit. */
const BELOW_LIMIT = `window_start IS NOT NULL
  AND window_start + make_interval(secs => window_ms::float8 / 1000) > clock_timestamp()
  AND used < request_limit`

/**
 * The ceiling a 429 teaches (see the module comment), else `otherwise`: one less for another 429
 * of the block in force (a request that was in flight), what crm-sync had sent for a first one
 * below the limit.
 */
const learnedOn429 = (learning: Learning, otherwise: string) => `CASE
  WHEN blocked_until > clock_timestamp() AND (${validLearned(learning)}) IS NOT NULL
    AND learned_at > clock_timestamp() - make_interval(secs => window_ms::float8 / 1000)
    THEN GREATEST(${floorSql}, learned_limit - 1)
  WHEN ${BELOW_LIMIT}
    THEN LEAST(COALESCE(${validLearned(learning)}, request_limit), GREATEST(${floorSql}, used - 1))
  ELSE ${otherwise} END`

/**
 * In the grant's UPDATE (`w` the row before it, `v` the new window): a window ends, and a new one
 * begins, without a 429 since the ceiling was learned — a clean window.
 */
const rollsClean = `(w.window_start IS NOT NULL AND w.learned_at IS NOT NULL AND w.window_start >= w.learned_at
  AND to_timestamp(v.start_ms::float8 / 1000) > w.window_start)`

/**
 * Near a ceiling (this share of the limit left, at least 2 requests), permits are spaced by
 * NEAR_SPACING_MS across every process (the row's last grant), so that about one request is in
 * flight when an unknown limit is met: a co-tenant's share, or a probe that went too far, costs
 * the one request rather than a burst.
 */
/**
 * The most clean windows a probe waits after probes that met a 429 (it doubles from 1): longer
 * would leave a departed co-tenant's share unused for long; the price of short is one refused
 * request every few windows while a steady co-tenant stays.
 */
const MAX_PROBE_WAIT = 2

/** The share of a window after which a shared bucket's even shares no longer bind. */
const FREE_AT = 0.85

/**
 * The fair-share wait of a grant of `taken` permits to `consumer` on a shared bucket, or undefined:
 * while the window is younger than FREE_AT, a connection past `limit / n` waits until then.
 */
const fairShareWait = (row: Row, state: WindowState, consumer: string, taken: number, now: number) => {
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

const NEAR_SHARE = 0.1
const NEAR_SPACING_MS = 250
/** The spacing in a window of `windowMs`: 250 ms, less in windows shortened for tests (a 400th). */
const spacingFor = (windowMs: number) => Math.min(NEAR_SPACING_MS, Math.floor(windowMs / 400))
/**
 * Near the ceiling: within a tenth of it (at least 2 requests), or anywhere above the level the
 * last 429 set (`learned_base`), which probing has raised the ceiling past.
 */
const nearCeiling = (row: Row, state: WindowState, now: number) => {
  const live = state.windowStart !== null && now < state.windowStart + state.windowMs
  const used = live ? state.used : 0
  const base = row.learned_base === null ? state.limit : Math.min(state.limit, row.learned_base)
  return base - used <= Math.max(2, Math.floor(base * NEAR_SHARE))
}

/** The SQL of a learned ceiling that still holds (NULL once it expired). */
const validLearned = (learning: Learning, table = "") =>
  `CASE WHEN ${table}learned_limit IS NOT NULL
     AND ${table}learned_at > clock_timestamp() - make_interval(secs => ${learning.ttlMs / 1000})
     THEN ${table}learned_limit END`

/** Columns every query returns, times as epoch milliseconds on the database's clock. */
const columns = (learning: Learning) => `bucket, scope, request_limit, window_ms::float8 AS window_ms,
  (extract(epoch FROM window_start) * 1000)::float8 AS window_start_ms, used,
  (extract(epoch FROM blocked_until) * 1000)::float8 AS blocked_until_ms,
  (${validLearned(learning)})::float8 AS learned_limit,
  (CASE WHEN (${validLearned(learning)}) IS NOT NULL THEN learned_base END)::float8 AS learned_base,
  (extract(epoch FROM updated_at) * 1000)::float8 AS updated_ms, shares, prev_consumers,
  (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS now_ms`

/** Waking a little after the computed moment spreads processes that were waiting for the same one. */
const wakeJitterMs = (waitMs: number) => Math.min(25, Math.ceil(waitMs * 0.02))

/** The most bulk permits one transaction takes (see the module comment). */
const BULK_AHEAD_MAX = 32
/**
 * Bulk permits one transaction takes: one per 100 the windows still have room for, between 1 and
 * `BULK_AHEAD_MAX`. What lapses unused is then at most 1% of what was left: under the spec's
 * limits (500 or 1,000 requests an hour per token) a handful, and 32 only where the windows hold
 * thousands.
 */
const bulkAhead = (room: number) => Math.min(BULK_AHEAD_MAX, Math.max(1, Math.floor(room / 100)))
/** How long bulk permits taken ahead may wait for their request before they lapse. */
const BULK_HOLD_MS = 1_000

/** Bulk permits taken ahead for one set of buckets, and when they lapse (this process's clock). */
interface Reservoir {
  count: number
  until: number
}

const reservoirKey = (sorted: ReadonlyArray<BucketSpec>) => sorted.map((bucket) => bucket.key).join("\n")

/** A lost row-lock race (deadlock, serialization) is retried briefly before it counts as a failure. */
const transactionRetry = Schedule.exponential("20 millis").pipe(Schedule.jittered, Schedule.upTo({ times: 4 }))

export class RateBudget extends Context.Service<
  RateBudget,
  {
    /**
     * Waits until `permits` (default 1) requests may start on all of `buckets`, then counts them.
     * Never fails for lack of budget, only when the database cannot be reached.
     */
    readonly acquire: (
      buckets: ReadonlyArray<BucketSpec>,
      options: { readonly priority: Priority; readonly permits?: number }
    ) => Effect.Effect<void, BudgetError>
    /**
     * Takes the permits if they are available now, without waiting; otherwise says how long until
     * they might be, which bucket is the reason, and why.
     */
    readonly tryAcquire: (
      buckets: ReadonlyArray<BucketSpec>,
      options: { readonly priority: Priority; readonly permits?: number }
    ) => Effect.Effect<TryAcquire, BudgetError>
    /**
     * Records a 429: the named bucket (all of them for `unknown`) takes no permits until the
     * clamped, jittered `retryAfter` has passed — for every process, and across restarts — and its
     * window starts afresh after that. Returns the wait applied.
     */
    readonly markExhausted: (
      buckets: ReadonlyArray<BucketSpec>,
      limit: ExhaustedLimit,
      retryAfter: Duration.Duration | undefined
    ) => Effect.Effect<Duration.Duration, BudgetError>
    /** used / limit / resets-at per bucket: the given ones, or every bucket on record. */
    readonly status: (buckets?: ReadonlyArray<BucketSpec>) => Effect.Effect<ReadonlyArray<BucketStatus>, BudgetError>
    /** How long until `permits` more requests could have been sent, if nobody else used these buckets. */
    readonly timeUntil: (
      buckets: ReadonlyArray<BucketSpec>,
      permits: number,
      priority: Priority
    ) => Effect.Effect<Duration.Duration, BudgetError>
    readonly policy: Policy
  }
>()("crm-sync/budget/RateBudget") {
  /** The budget with an explicit policy (tests, benchmarks). Needs only a SqlClient. */
  static readonly layerWith = (policy: Policy, learning: Learning = defaultLearning) =>
    Layer.effect(RateBudget, make(policy, learning))

  /** The budget configured by `budget.*` of AppConfig. */
  static readonly layer = Layer.effect(
    RateBudget,
    Effect.gen(function* () {
      const config = yield* AppConfig
      return yield* make(
        {
          reserveInteractive: config.budget.reserve_interactive,
          reserveIncremental: config.budget.reserve_incremental,
          marginMs: Duration.toMillis(config.budget.safety_margin)
        },
        {
          ttlMs: Duration.toMillis(config.budget.learned_ceiling_ttl),
          stepShare: config.budget.probe_step
        }
      )
    })
  )
}

const failWith = (message: string) => (cause: SqlError | Schema.SchemaError) => new BudgetError({ message, cause })

/**
 * Numbers for an array parameter, as text: the driver infers each element's type from its value
 * (an integer and a fraction would disagree), so the SQL casts them instead.
 */
const numbers = (values: ReadonlyArray<number>) => values.map(String)

/** Buckets without duplicates, in key order: the one order every process locks rows in. */
const ordered = (buckets: ReadonlyArray<BucketSpec>) =>
  [...new Map(buckets.map((bucket) => [bucket.key, bucket])).values()].toSorted(byKey)

const byKey = (a: BucketSpec, b: BucketSpec) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)

const validated = (buckets: ReadonlyArray<BucketSpec>, permits: number) => {
  const sorted = ordered(buckets)
  const smallest = Math.min(...sorted.map((bucket) => bucket.limit))
  return sorted.length > 0 && Number.isInteger(permits) && permits >= 1 && permits <= smallest
    ? Effect.succeed(sorted)
    : Effect.fail(new BudgetError({ message: `cannot take ${permits} permits from buckets of ${smallest}` }))
}

const make = Effect.fnUntraced(function* (policy: Policy, learning: Learning) {
  const sql = yield* SqlClient
  const COLUMNS = columns(learning)

  /** The buckets as rows, in the given (key) order: `INSERT ... SELECT` locks them in this order. */
  const upsertSource = (buckets: ReadonlyArray<BucketSpec>) =>
    sql`SELECT key, scope, request_limit::int, window_ms::bigint FROM unnest(
      ${buckets.map((bucket) => bucket.key)}::text[],
      ${buckets.map((bucket) => bucket.scope)}::text[],
      ${numbers(buckets.map((bucket) => bucket.limit))}::text[],
      ${numbers(buckets.map((bucket) => bucket.windowMs))}::text[]) AS v(key, scope, request_limit, window_ms)`

  /** Upserts (and so locks, in key order) the buckets' rows and returns their state. */
  const lockRows = (buckets: ReadonlyArray<BucketSpec>) =>
    sql`INSERT INTO crm_sync.rate_windows (bucket, scope, request_limit, window_ms)
      ${upsertSource(buckets)}
      ON CONFLICT (bucket) DO UPDATE
        SET request_limit = excluded.request_limit, window_ms = excluded.window_ms
      RETURNING ${sql.literal(COLUMNS)}`.pipe(Effect.flatMap(decodeRows))

  /**
   * One attempt: lock, decide, record. Returns the decision and the database's time. With `ahead`,
   * takes up to `bulkAhead` of the room every bucket has (at least `permits`).
   */
  const attempt = (buckets: ReadonlyArray<BucketSpec>, permits: number, priority: Priority, ahead = false) =>
    sql
      .withTransaction(
        Effect.gen(function* () {
          const rows = yield* lockRows(buckets)
          const now = Math.max(...rows.map((row) => row.now_ms))
          const states = rows.map(toState)
          const room = Math.min(...states.map((state) => grantable(state, now, priority, policy)))
          const near = rows.some((row, index) => nearCeiling(row, states[index]!, now))
          const taken = ahead && !near ? Math.max(permits, Math.min(room, bulkAhead(room))) : permits
          const decided: Decision = decide(states, now, taken, priority, policy)
          // Near a ceiling, one permit per NEAR_SPACING_MS (see above); interactive work is not held.
          const spaced = rows.filter(
            (row, index) =>
              nearCeiling(row, states[index]!, now) && now - row.updated_ms < spacingFor(states[index]!.windowMs)
          )
          // A shared bucket (ip, company) answers to the connection's token bucket: its fair share.
          const consumer = rows.find((row) => row.scope === "token")?.bucket
          const unfair =
            consumer === undefined || priority === "interactive"
              ? []
              : rows.flatMap((row, index) => {
                  if (row.scope === "token") return []
                  const until = fairShareWait(row, states[index]!, consumer, taken, now)
                  return until === undefined ? [] : [{ bucket: row.bucket, until }]
                })
          const decision: Decision =
            decided.kind === "grant" && priority !== "interactive" && spaced.length > 0
              ? {
                  kind: "wait",
                  until: Math.max(...spaced.map((row) => row.updated_ms + spacingFor(row.window_ms))),
                  bucket: spaced[0]!.bucket,
                  reason: "full"
                }
              : decided.kind === "grant" && unfair.length > 0
                ? {
                    kind: "wait",
                    until: Math.max(...unfair.map((wait) => wait.until)),
                    bucket: unfair[0]!.bucket,
                    reason: "reserve"
                  }
                : decided
          if (decision.kind === "grant") {
            // A window that ends without a 429 since the ceiling was learned raises it a step.
            yield* sql`UPDATE crm_sync.rate_windows AS w
              SET window_start = to_timestamp(v.start_ms::float8 / 1000), used = v.used::int, updated_at = now(),
                -- A clean window run above the last 429's level: the probe held. That level is the
                -- known-good one now, and the next probe comes after one clean window again.
                probe_wait = CASE
                  WHEN ${sql.literal(rollsClean)} AND w.learned_limit > COALESCE(w.learned_base, w.learned_limit) THEN 1
                  ELSE w.probe_wait END,
                learned_base = CASE
                  WHEN ${sql.literal(rollsClean)} AND w.learned_limit > COALESCE(w.learned_base, w.learned_limit)
                    THEN w.learned_limit
                  ELSE w.learned_base END,
                clean_windows = CASE
                  WHEN ${sql.literal(rollsClean)} THEN
                    CASE WHEN w.clean_windows + 1 >= w.probe_wait THEN 0 ELSE w.clean_windows + 1 END
                  ELSE w.clean_windows END,
                learned_limit = CASE
                  WHEN (${sql.literal(validLearned(learning, "w."))}) IS NULL THEN NULL
                  WHEN ${sql.literal(rollsClean)} AND w.clean_windows + 1 >= w.probe_wait AND ${learning.stepShare} > 0
                    THEN NULLIF(LEAST(w.request_limit,
                      w.learned_limit + GREATEST(1, ceil(w.request_limit * ${learning.stepShare})::int)), w.request_limit)
                  ELSE w.learned_limit END,
                prev_consumers = CASE
                  WHEN w.window_start IS DISTINCT FROM to_timestamp(v.start_ms::float8 / 1000)
                    THEN (SELECT count(*)::int FROM jsonb_object_keys(w.shares))
                  ELSE w.prev_consumers END,
                shares = CASE
                  WHEN v.consumer IS NULL THEN w.shares
                  WHEN w.window_start IS DISTINCT FROM to_timestamp(v.start_ms::float8 / 1000)
                    THEN jsonb_build_object(v.consumer, ${taken})
                  ELSE w.shares || jsonb_build_object(v.consumer, COALESCE((w.shares ->> v.consumer)::int, 0) + ${taken})
                  END
              FROM unnest(${decision.windows.map((window) => window.key)}::text[],
                          ${numbers(decision.windows.map((window) => window.windowStart ?? now))}::text[],
                          ${numbers(decision.windows.map((window) => window.used))}::text[],
                          ${decision.windows.map((window) => (window.scope === "token" ? null : (consumer ?? null)))}::text[])
                AS v(bucket, start_ms, used, consumer)
              WHERE w.bucket = v.bucket`
          }
          return { decision, now, taken }
        })
      )
      .pipe(Effect.retry(transactionRetry), Effect.mapError(failWith("cannot take a permit from the rate budget")))

  const reservoirs = new Map<string, Reservoir>()
  /**
   * Blocks this process learned from a 429, by bucket, until when (this process's clock): set the
   * moment the 429 is seen, before the block is written to the database, so that no other fiber
   * of this process sends while that write waits for its row locks (a loaded database can take
   * hundreds of milliseconds). Other processes learn the block from the database.
   */
  const localBlocks = new Map<string, number>()
  const locallyBlocked = (buckets: ReadonlyArray<BucketSpec>) =>
    Effect.map(Clock.currentTimeMillis, (local) => {
      let until = local
      let bucket: string | undefined
      for (const { key } of buckets) {
        const blockedUntil = localBlocks.get(key)
        if (blockedUntil !== undefined && blockedUntil > until) {
          until = blockedUntil
          bucket = key
        }
      }
      return bucket === undefined ? undefined : { waitMs: until - local, bucket, reason: "blocked" as const }
    })
  /**
   * One refill at a time per bucket set in this process: acquirers that find the reservoir empty
   * while another refills it wait for that refill instead of queueing on the same three row locks
   * (each in a transaction of its own), and most then find a permit it took ahead.
   */
  const refills = new Map<string, Semaphore.Semaphore>()
  const refillLock = (key: string) => {
    let lock = refills.get(key)
    if (lock === undefined) {
      lock = Semaphore.makeUnsafe(1)
      refills.set(key, lock)
    }
    return lock
  }

  const acquire = Effect.fn("RateBudget.acquire")(function* (
    buckets: ReadonlyArray<BucketSpec>,
    options: { readonly priority: Priority; readonly permits?: number }
  ) {
    const permits = options.permits ?? 1
    const sorted = yield* validated(buckets, permits)
    const ahead = options.priority === "bulk" && permits === 1
    const key = reservoirKey(sorted)
    /** A permit taken ahead by this process for these buckets, if one is still good. */
    const takeHeld = Effect.map(Clock.currentTimeMillis, (local) => {
      const held = reservoirs.get(key)
      if (!ahead || held === undefined || held.count === 0 || local >= held.until) return false
      held.count--
      return true
    })
    /** Takes a permit (held, or from the windows), or says how long to wait before asking again. */
    const round = Effect.gen(function* () {
      const blocked = yield* locallyBlocked(sorted)
      if (blocked !== undefined) return blocked
      // Checked on every round: while this acquirer waited, another may have taken some ahead.
      if (yield* takeHeld) return undefined
      const { decision, now, taken } = yield* attempt(sorted, permits, options.priority, ahead)
      if (decision.kind === "grant") {
        if (taken > permits) {
          const local = yield* Clock.currentTimeMillis
          const closes = Math.min(
            ...decision.windows.map(
              (window) => window.windowStart! + window.windowMs - effectiveMargin(window.windowMs, policy)
            )
          )
          const until = local + Math.min(BULK_HOLD_MS, closes - now)
          const held = reservoirs.get(key)
          if (held !== undefined && held.count > 0 && local < held.until) {
            held.count += taken - permits
            held.until = Math.min(held.until, until)
          } else reservoirs.set(key, { count: taken - permits, until })
        }
        return undefined
      }
      return { waitMs: decision.until - now, bucket: decision.bucket, reason: decision.reason }
    })
    const guarded = ahead ? refillLock(key).withPermits(1)(round) : round
    while (true) {
      const denied = yield* guarded
      if (denied === undefined) return
      const { waitMs } = denied
      if (waitMs >= 1_000) {
        yield* Effect.logDebug("rate budget: waiting").pipe(
          Effect.annotateLogs({
            bucket: denied.bucket,
            reason: denied.reason,
            priority: options.priority,
            seconds: Math.round(waitMs / 100) / 10
          })
        )
      }
      const jitter = yield* Random.nextBetween(0, wakeJitterMs(waitMs))
      yield* Effect.sleep(Duration.millis(waitMs + jitter))
    }
  })

  const tryAcquire = Effect.fn("RateBudget.tryAcquire")(function* (
    buckets: ReadonlyArray<BucketSpec>,
    options: { readonly priority: Priority; readonly permits?: number }
  ) {
    const permits = options.permits ?? 1
    const sorted = yield* validated(buckets, permits)
    const blocked = yield* locallyBlocked(sorted)
    if (blocked !== undefined) {
      return {
        granted: false,
        retryIn: Duration.millis(blocked.waitMs),
        bucket: blocked.bucket,
        reason: blocked.reason
      } satisfies TryAcquire
    }
    const { decision, now } = yield* attempt(sorted, permits, options.priority)
    return decision.kind === "grant"
      ? ({ granted: true } satisfies TryAcquire)
      : ({
          granted: false,
          retryIn: Duration.millis(Math.max(0, decision.until - now)),
          bucket: decision.bucket,
          reason: decision.reason
        } satisfies TryAcquire)
  })

  const markExhausted = Effect.fn("RateBudget.markExhausted")(function* (
    buckets: ReadonlyArray<BucketSpec>,
    limit: ExhaustedLimit,
    retryAfter: Duration.Duration | undefined
  ) {
    const targets = ordered(limit === "unknown" ? buckets : buckets.filter((bucket) => bucket.scope === limit))
    // A 429 naming a bucket this request does not use is read as naming all of them.
    const marked = targets.length > 0 ? targets : ordered(buckets)
    // Without a usable Retry-After, the longest the server can still hold us is one window.
    const fallback = Math.max(...marked.map((bucket) => bucket.windowMs))
    const clamped = clampRetryAfter(retryAfter === undefined ? undefined : Duration.toMillis(retryAfter), fallback)
    const waitMs = jitterRetryAfter(clamped, yield* Random.next)
    const markedKeys = new Set(marked.map((bucket) => bucket.key))
    const local = yield* Clock.currentTimeMillis
    for (const key of markedKeys) localBlocks.set(key, Math.max(localBlocks.get(key) ?? 0, local + waitMs))
    for (const key of reservoirs.keys()) {
      if (key.split("\n").some((bucket) => markedKeys.has(bucket))) reservoirs.delete(key)
    }
    // The window restarts after the block: the server's own window has ended by then, and our next
    // first permit lines ours up with its next one again.
    yield* sql`INSERT INTO crm_sync.rate_windows (bucket, scope, request_limit, window_ms)
      ${upsertSource(marked)}
      ON CONFLICT (bucket) DO UPDATE SET request_limit = excluded.request_limit, window_ms = excluded.window_ms`.pipe(
      Effect.andThen(
        sql`UPDATE crm_sync.rate_windows
          SET learned_limit = ${sql.literal(learnedOn429(learning, validLearned(learning)))},
              -- A 429 while a ceiling was already known: the last probe went too far; wait longer.
              probe_wait = CASE
                WHEN blocked_until > clock_timestamp() THEN probe_wait
                WHEN (${sql.literal(validLearned(learning))}) IS NOT NULL THEN LEAST(${MAX_PROBE_WAIT}, probe_wait * 2)
                ELSE 1 END,
              clean_windows = 0,
              learned_base = ${sql.literal(learnedOn429(learning, "learned_base"))},
              learned_at = CASE
                WHEN blocked_until > clock_timestamp() AND learned_limit IS NOT NULL THEN learned_at
                WHEN ${sql.literal(BELOW_LIMIT)} THEN clock_timestamp()
                ELSE learned_at END,
              blocked_until = GREATEST(COALESCE(blocked_until, '-infinity'::timestamptz),
                                       clock_timestamp() + make_interval(secs => ${waitMs / 1000})),
              window_start = NULL, used = 0, updated_at = now()
          WHERE bucket = ANY(${marked.map((bucket) => bucket.key)}::text[])`
      ),
      sql.withTransaction,
      Effect.mapError(failWith("cannot record a 429 in the rate budget"))
    )
    yield* Effect.logWarning("rate budget: bucket exhausted (429)").pipe(
      Effect.annotateLogs({ buckets: marked.map((bucket) => bucket.key).join(","), seconds: waitMs / 1000 })
    )
    return Duration.millis(waitMs)
  })

  const readRows = (buckets: ReadonlyArray<BucketSpec> | undefined) =>
    (buckets === undefined
      ? sql`SELECT ${sql.literal(COLUMNS)} FROM crm_sync.rate_windows ORDER BY bucket`
      : sql`SELECT ${sql.literal(COLUMNS)} FROM crm_sync.rate_windows
          WHERE bucket = ANY(${buckets.map((bucket) => bucket.key)}::text[]) ORDER BY bucket`
    ).pipe(Effect.flatMap(decodeRows))

  const status = Effect.fn("RateBudget.status")(function* (buckets?: ReadonlyArray<BucketSpec>) {
    const rows = yield* readRows(buckets).pipe(Effect.mapError(failWith("cannot read the rate budget")))
    const known = new Map(rows.map((row) => [row.bucket, row]))
    const learnedOf = new Map(
      rows.flatMap((row) => (row.learned_limit === null ? [] : [[row.bucket, row.learned_limit] as const]))
    )
    // Buckets never used yet have no row: report them as empty rather than leave them out.
    const missing = (buckets ?? []).filter((bucket) => !known.has(bucket.key))
    const now = rows[0]?.now_ms ?? (yield* Effect.clockWith((clock) => clock.currentTimeMillis))
    const reported = [
      ...rows.map(toState),
      ...missing.map((bucket): WindowState => ({ ...bucket, windowStart: null, used: 0, blockedUntil: null }))
    ]
    return reported.map((state): BucketStatus => {
      const margin = effectiveMargin(state.windowMs, policy)
      const live = state.windowStart !== null && now < state.windowStart + state.windowMs + margin
      return {
        bucket: state.key,
        scope: state.scope,
        limit: known.get(state.key)?.request_limit ?? state.limit,
        used: live ? state.used : 0,
        window: Duration.millis(state.windowMs),
        windowStart: live ? DateTime.makeUnsafe(state.windowStart!) : undefined,
        resetsAt: live ? DateTime.makeUnsafe(state.windowStart! + state.windowMs + margin) : undefined,
        blockedUntil:
          state.blockedUntil !== null && state.blockedUntil > now ? DateTime.makeUnsafe(state.blockedUntil) : undefined,
        learnedLimit: learnedOf.get(state.key)
      }
    })
  })

  const timeUntil = Effect.fn("RateBudget.timeUntil")(function* (
    buckets: ReadonlyArray<BucketSpec>,
    permits: number,
    priority: Priority
  ) {
    if (permits <= 0) return Duration.zero
    const sorted = ordered(buckets)
    const rows = yield* readRows(sorted).pipe(Effect.mapError(failWith("cannot read the rate budget")))
    const known = new Map(rows.map((row) => [row.bucket, toState(row)]))
    const now = rows[0]?.now_ms ?? (yield* Effect.clockWith((clock) => clock.currentTimeMillis))
    const states = sorted.map(
      (bucket): WindowState => known.get(bucket.key) ?? { ...bucket, windowStart: null, used: 0, blockedUntil: null }
    )
    return Duration.millis(windowsTimeUntil(states, now, permits, priority, policy))
  })

  return RateBudget.of({ acquire, tryAcquire, markExhausted, status, timeUntil, policy })
})

/** Every bucket's current window as stored, with a learned ceiling younger than `ttl` (for `status`). */
export const bucketWindows = (ttl: Duration.Duration) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    return yield* sql<{
      bucket: string
      scope: string
      used: number
      request_limit: number
      resets_at: Date | null
      blocked_until: Date | null
      learned_limit: number | null
    }>`
      SELECT bucket, scope, used, request_limit,
             window_start + window_ms * interval '1 millisecond' AS resets_at, blocked_until,
             CASE WHEN learned_at > now() - ${`${Duration.toSeconds(ttl)} seconds`}::interval
                  THEN learned_limit END AS learned_limit
      FROM crm_sync.rate_windows ORDER BY bucket`
  })

/** The learned ceilings younger than `ttl` of these buckets (for the plan). */
export const learnedCeilings = (buckets: ReadonlyArray<string>, ttl: Duration.Duration) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const rows = yield* sql<{ bucket: string; learned_limit: number }>`
      SELECT bucket, learned_limit FROM crm_sync.rate_windows
      WHERE bucket = ANY(${buckets}::text[]) AND learned_limit IS NOT NULL
        AND learned_at > now() - ${`${Duration.toSeconds(ttl)} seconds`}::interval`
    return new Map(rows.map((row) => [row.bucket, row.learned_limit]))
  })
