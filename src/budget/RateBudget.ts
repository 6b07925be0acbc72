/**
 * RateBudget: the one scheduler every CRM request goes through (spec §8). A request takes a
 * permit from its three buckets — token/user, company/app, IP — at once, or from none of them;
 * the buckets live in `crm_sync.rate_windows`, so every process on the database draws on the same
 * windows and a backfill beside a running daemon never exceeds a limit together with it. This
 * module keeps the windows' rows; `Permits` decides on them, `Ceilings` says how learned ceilings
 * move. Time is the database's (`clock_timestamp()`): one clock for all processes, whatever their
 * hosts' clocks say.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as DateTime from "effect/DateTime"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Random from "effect/Random"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as Semaphore from "effect/Semaphore"
import { SqlClient } from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql/SqlError"
import { AppConfig } from "../config/AppConfig.ts"
import { BLOCKS_CHANNEL, listenForBlocks, noticeOf } from "./BlockNotices.ts"
import { offerHandoff } from "./Handoff.ts"
import { ceilingOn429, ceilingOnGrant, defaultLearning, type Learning, validLearned } from "./Ceilings.ts"
import { consumerOf, grantOrWait, LocalPermits, reservoirKey, wakeJitterMs } from "./Permits.ts"
import type { BucketStatus, ExhaustedLimit, TryAcquire } from "./Reports.ts"
import { clampRetryAfter, jitterRetryAfter } from "./RetryAfter.ts"
import {
  type BucketSpec,
  openingMargin,
  type Policy,
  type Priority,
  timeUntil as windowsTimeUntil,
  type WindowState
} from "./Windows.ts"

export type { BucketScope, BucketSpec, Policy, Priority, WaitReason } from "./Windows.ts"
export type { BucketStatus, ExhaustedLimit, TryAcquire } from "./Reports.ts"

export class BudgetError extends Schema.TaggedError<BudgetError>()("BudgetError", {
  message: Schema.String,
  cause: Schema.optional(Schema.Defect())
}) {}

/** A bucket's row as every query returns it (`columns`). */
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

/** Columns every query returns, times as epoch milliseconds on the database's clock. */
const columns = (learning: Learning) => `bucket, scope, request_limit, window_ms::float8 AS window_ms,
  (extract(epoch FROM window_start) * 1000)::float8 AS window_start_ms, used,
  (extract(epoch FROM blocked_until) * 1000)::float8 AS blocked_until_ms,
  (${validLearned(learning)})::float8 AS learned_limit,
  (CASE WHEN (${validLearned(learning)}) IS NOT NULL THEN learned_base END)::float8 AS learned_base,
  (extract(epoch FROM updated_at) * 1000)::float8 AS updated_ms, shares, prev_consumers,
  (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS now_ms`

/** A lost row-lock race (deadlock, serialization) is retried briefly before it counts as a failure. */
const transactionRetry = Schedule.exponential("20 millis").pipe(Schedule.jittered, Schedule.upTo({ times: 4 }))

/** The windows a grant opened: their keys, the start it gave them and the database's clock then. */
export interface Opened {
  readonly keys: ReadonlyArray<string>
  /** The start the grant recorded, epoch milliseconds on the database's clock. */
  readonly start: number
  /** The database's clock minus this process's, at the grant. */
  readonly offset: number
}

/**
 * Why not `effect/persistence/RateLimiter`: its "fixed-window" store grows a per-key TTL by
 * `window / limit` per token, a smoothed limit rather than spec §8's window that begins at its
 * first request and resets all at once; it consumes one key per call, so three buckets cannot be
 * taken atomically (a permit from two buckets and a refusal from the third would leak); it has no
 * priorities and no externally imposed block (a 429's `Retry-After`); and its stores are memory
 * and Redis, where ours must be the PostgreSQL the processes already share.
 */
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
    ) => Effect.Effect<Opened | undefined, BudgetError>
    /**
     * Moves the windows a grant opened (`acquire`'s answer) to start when their first request
     * left, `departed` on this process's clock: the server's window begins when that request
     * arrives, and a permit can wait before its send (held ahead, a busy event loop). Only forward,
     * only while the window is the one the grant opened.
     */
    readonly anchor: (opened: Opened, departed: number) => Effect.Effect<void, BudgetError>
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
          marginMs: Duration.toMillis(config.budget.safety_margin),
          pacing: config.budget.pacing
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

/** What the budget's functions share: the database, the policy, and this process's holdings. */
interface Budget {
  readonly sql: SqlClient
  readonly policy: Policy
  readonly learning: Learning
  /** `columns(learning)`: what every query of the rows returns. */
  readonly columns: string
  readonly local: LocalPermits
  /**
   * At most two permit transactions of this process at once: they queue on the same bucket rows
   * in the database anyway, and each waiting one held a pooled connection that a 429's block (for
   * every process), a page or the inbox then waited for.
   */
  readonly transactions: Semaphore.Semaphore
}

/** The buckets as rows, in the given (key) order: `INSERT ... SELECT` locks them in this order. */
const upsertSource = (sql: SqlClient, buckets: ReadonlyArray<BucketSpec>) =>
  sql`SELECT key, scope, request_limit::int, window_ms::bigint FROM unnest(
    ${buckets.map((bucket) => bucket.key)}::text[],
    ${buckets.map((bucket) => bucket.scope)}::text[],
    ${numbers(buckets.map((bucket) => bucket.limit))}::text[],
    ${numbers(buckets.map((bucket) => bucket.windowMs))}::text[]) AS v(key, scope, request_limit, window_ms)`

/** Upserts (and so locks, in key order) the buckets' rows and returns their state. */
const lockRows = ({ sql, columns }: Budget, buckets: ReadonlyArray<BucketSpec>) =>
  sql`INSERT INTO crm_sync.rate_windows (bucket, scope, request_limit, window_ms)
    ${upsertSource(sql, buckets)}
    ON CONFLICT (bucket) DO UPDATE
      SET request_limit = excluded.request_limit, window_ms = excluded.window_ms
    RETURNING ${sql.literal(columns)}`.pipe(Effect.flatMap(decodeRows))

/**
 * The locked rows with `rate_blocks`' blocks laid over theirs, read once the rows are locked: a 429
 * recorded while this permit waited for the locks (shareBlock waits for none) stops it.
 */
const withBlocks = ({ sql }: Budget, rows: ReadonlyArray<Row>) =>
  sql<{ bucket: string; until_ms: number }>`
    SELECT bucket, (extract(epoch FROM blocked_until) * 1000)::float8 AS until_ms FROM crm_sync.rate_blocks
    WHERE bucket = ANY(${rows.map((row) => row.bucket)}::text[]) AND blocked_until > now()`.pipe(
    Effect.map((blocks) => {
      const until = new Map(blocks.map((block) => [block.bucket, Number(block.until_ms)]))
      return rows.map((row) => {
        const blocked = until.get(row.bucket)
        return blocked === undefined || (row.blocked_until_ms ?? -Infinity) >= blocked
          ? row
          : { ...row, blocked_until_ms: blocked }
      })
    })
  )

/**
 * Counts a grant of `taken` permits in its windows, and in `consumer`'s share of the shared ones;
 * a window that ends without a 429 since the ceiling was learned raises it a step (Ceilings).
 */
const recordGrant = (
  { sql, learning }: Budget,
  windows: ReadonlyArray<WindowState>,
  now: number,
  taken: number,
  consumer: string | undefined
) =>
  sql`UPDATE crm_sync.rate_windows AS w
    SET window_start = to_timestamp(v.start_ms::float8 / 1000), used = v.used::int, updated_at = now(),
      ${ceilingOnGrant(sql, learning)},
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
    FROM unnest(${windows.map((window) => window.key)}::text[],
                ${numbers(windows.map((window) => window.windowStart ?? now))}::text[],
                ${numbers(windows.map((window) => window.used))}::text[],
                ${windows.map((window) => (window.scope === "token" ? null : (consumer ?? null)))}::text[])
      AS v(bucket, start_ms, used, consumer)
    WHERE w.bucket = v.bucket`

/**
 * One attempt, one short transaction: an upsert of the buckets' rows (which locks them, always in
 * key order, so two acquirers cannot deadlock), the decision (`Permits.grantOrWait`) on the
 * locked state with the database's clock, and, if granted, the update. Returns the decision, the
 * database's time and the permits taken (with `ahead`, possibly more than `permits`).
 */
const attempt = (
  budget: Budget,
  buckets: ReadonlyArray<BucketSpec>,
  permits: number,
  priority: Priority,
  ahead = false,
  aheadCap?: number
) =>
  budget.sql
    .withTransaction(
      Effect.gen(function* () {
        const rows = yield* withBlocks(budget, yield* lockRows(budget, buckets))
        const states = rows.map(toState)
        const granting = grantOrWait(rows, states, permits, priority, budget.policy, ahead, aheadCap)
        const { decision, now, taken } = granting
        if (decision.kind !== "grant") return { ...granting, opened: [] }
        yield* recordGrant(budget, decision.windows, now, taken, consumerOf(rows))
        const opened = decision.windows.filter((window, index) => window.windowStart !== states[index]!.windowStart)
        return { ...granting, opened: opened.map((window) => window.key) }
      })
    )
    .pipe(
      Effect.retry(transactionRetry),
      budget.transactions.withPermits(1),
      Effect.mapError(failWith("cannot take a permit from the rate budget"))
    )

/** A permit taken, with the windows its grant opened, if any. */
interface Granted {
  readonly _tag: "Granted"
  readonly opened: Opened | undefined
}
const granted = (opened: Opened | undefined): Granted => ({ _tag: "Granted", opened })

/** Takes a permit (held, or from the windows), or says how long to wait before asking again. */
const acquireRound = (
  budget: Budget,
  sorted: ReadonlyArray<BucketSpec>,
  key: string,
  permits: number,
  priority: Priority,
  ahead: boolean
) =>
  Effect.gen(function* () {
    const blocked = budget.local.blocked(sorted, yield* Clock.currentTimeMillis)
    if (blocked !== undefined) return blocked
    // Checked on every round: while this acquirer waited, another may have taken some ahead.
    if (ahead && budget.local.takeHeld(key, yield* Clock.currentTimeMillis)) return granted(undefined)
    const cap = ahead ? budget.local.refillSize(key, yield* Clock.currentTimeMillis) : permits
    const { decision, now, taken, opened } = yield* attempt(budget, sorted, permits, priority, ahead, cap)
    if (decision.kind === "grant") {
      const local = yield* Clock.currentTimeMillis
      if (taken > permits) budget.local.hold(key, taken - permits, decision.windows, budget.policy, now, local)
      return granted(opened.length === 0 ? undefined : { keys: opened, start: now, offset: now - local })
    }
    return { waitMs: decision.until - now, bucket: decision.bucket, reason: decision.reason }
  })

/**
 * A denied acquirer learns the earliest moment worth asking again (its window's reset, a 429's
 * `blocked_until`, the reserve's decay) and sleeps until then: waiting costs no queries. Bulk
 * permits are taken a few at a time, one refill at a time per bucket set (`LocalPermits`).
 */
const acquire = (budget: Budget) =>
  Effect.fn("RateBudget.acquire")(function* (
    buckets: ReadonlyArray<BucketSpec>,
    options: { readonly priority: Priority; readonly permits?: number }
  ) {
    const permits = options.permits ?? 1
    const sorted = yield* validated(buckets, permits)
    const ahead = options.priority === "bulk" && permits === 1
    const key = reservoirKey(sorted)
    const round = acquireRound(budget, sorted, key, permits, options.priority, ahead)
    const guarded = ahead ? budget.local.asking(key, budget.local.refillLock(key).withPermits(1)(round)) : round
    while (true) {
      const denied = yield* guarded
      if ("_tag" in denied) return denied.opened
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
      yield* offerHandoff(waitMs)
      const jitter = yield* Random.nextBetween(0, wakeJitterMs(waitMs))
      yield* Effect.sleep(Duration.millis(waitMs + jitter))
    }
  })

const tryAcquire = (budget: Budget) =>
  Effect.fn("RateBudget.tryAcquire")(function* (
    buckets: ReadonlyArray<BucketSpec>,
    options: { readonly priority: Priority; readonly permits?: number }
  ) {
    const permits = options.permits ?? 1
    const sorted = yield* validated(buckets, permits)
    const blocked = budget.local.blocked(sorted, yield* Clock.currentTimeMillis)
    if (blocked !== undefined) {
      return {
        granted: false,
        retryIn: Duration.millis(blocked.waitMs),
        bucket: blocked.bucket,
        reason: blocked.reason
      } satisfies TryAcquire
    }
    const { decision, now } = yield* attempt(budget, sorted, permits, options.priority)
    return decision.kind === "grant"
      ? ({ granted: true } satisfies TryAcquire)
      : ({
          granted: false,
          retryIn: Duration.millis(Math.max(0, decision.until - now)),
          bucket: decision.bucket,
          reason: decision.reason
        } satisfies TryAcquire)
  })

/**
 * `RateBudget.anchor`: never more than a tenth of the window later than the grant made it. The
 * window is recognised by its start to the millisecond (later grants write it back rounded).
 */
const anchor = ({ sql }: Budget) =>
  Effect.fn("RateBudget.anchor")(function* (opened: Opened, departed: number) {
    const at = departed + opened.offset
    if (at <= opened.start) return
    yield* sql`UPDATE crm_sync.rate_windows
      SET window_start = LEAST(to_timestamp(${String(Math.round(at))}::float8 / 1000), window_start + (window_ms / 10) * interval '1 millisecond')
      WHERE bucket = ANY(${opened.keys}::text[])
        AND abs(extract(epoch FROM window_start) * 1000 - ${String(opened.start)}::float8) < 1`.pipe(
      Effect.mapError(failWith("cannot anchor a window to its first request"))
    )
  })

/**
 * The block in the windows' rows too (status shows it there), with the ceiling it teaches; the
 * window restarts after the block, our next first permit lining up with the server's next window.
 */
const recordBlockInWindows = ({ sql, learning }: Budget, marked: ReadonlyArray<BucketSpec>, waitMs: number) =>
  sql`INSERT INTO crm_sync.rate_windows (bucket, scope, request_limit, window_ms)
    ${upsertSource(sql, marked)}
    ON CONFLICT (bucket) DO UPDATE SET request_limit = excluded.request_limit, window_ms = excluded.window_ms`.pipe(
    Effect.andThen(
      sql`UPDATE crm_sync.rate_windows
        SET ${ceilingOn429(sql, learning)},
            blocked_until = GREATEST(COALESCE(blocked_until, '-infinity'::timestamptz),
                                     clock_timestamp() + make_interval(secs => ${waitMs / 1000})),
            window_start = NULL, used = 0, updated_at = now()
        WHERE bucket = ANY(${marked.map((bucket) => bucket.key)}::text[])`
    ),
    sql.withTransaction
  )

/**
 * A 429's block for every process, in `rate_blocks`, which no permit locks: in the windows' rows
 * alone it waited behind the permits queued on their locks, granted into it (recordBlockInWindows).
 */
const shareBlock = ({ sql }: Budget, marked: ReadonlyArray<BucketSpec>, waitMs: number) => {
  const keys = marked.map((bucket) => bucket.key)
  // Announced in the same statement, for the permits other processes hold ahead (BlockNotices).
  return sql`WITH shared AS (
      INSERT INTO crm_sync.rate_blocks (bucket, blocked_until)
      SELECT unnest(${keys}::text[]), clock_timestamp() + make_interval(secs => ${waitMs / 1000})
      ON CONFLICT (bucket) DO UPDATE SET blocked_until = GREATEST(rate_blocks.blocked_until, excluded.blocked_until)
    )
    SELECT pg_notify(${BLOCKS_CHANNEL}, ${noticeOf(keys, waitMs)})`
}

const cannotRecord = failWith("cannot record a 429 in the rate budget")

const markExhausted = (budget: Budget) =>
  Effect.fn("RateBudget.markExhausted")(function* (
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
    const local = yield* Clock.currentTimeMillis
    budget.local.block(new Set(marked.map((bucket) => bucket.key)), local + waitMs)
    yield* shareBlock(budget, marked, waitMs).pipe(Effect.mapError(cannotRecord))
    // How long the other processes could not know: worth seeing when they sent into the block.
    const shared_after_ms = (yield* Clock.currentTimeMillis) - local
    yield* recordBlockInWindows(budget, marked, waitMs).pipe(Effect.mapError(cannotRecord))
    const keys = marked.map((bucket) => bucket.key).join(",")
    yield* Effect.logWarning("rate budget: bucket exhausted (429)").pipe(
      Effect.annotateLogs({ buckets: keys, seconds: waitMs / 1000, shared_after_ms })
    )
    return Duration.millis(waitMs)
  })

const readRows = ({ sql, columns }: Budget, buckets: ReadonlyArray<BucketSpec> | undefined) =>
  (buckets === undefined
    ? sql`SELECT ${sql.literal(columns)} FROM crm_sync.rate_windows ORDER BY bucket`
    : sql`SELECT ${sql.literal(columns)} FROM crm_sync.rate_windows
        WHERE bucket = ANY(${buckets.map((bucket) => bucket.key)}::text[]) ORDER BY bucket`
  ).pipe(Effect.flatMap(decodeRows))

const status = (budget: Budget) =>
  Effect.fn("RateBudget.status")(function* (buckets?: ReadonlyArray<BucketSpec>) {
    const rows = yield* readRows(budget, buckets).pipe(Effect.mapError(failWith("cannot read the rate budget")))
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
      const margin = openingMargin(state.windowMs, budget.policy)
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

const timeUntil = (budget: Budget) =>
  Effect.fn("RateBudget.timeUntil")(function* (
    buckets: ReadonlyArray<BucketSpec>,
    permits: number,
    priority: Priority
  ) {
    if (permits <= 0) return Duration.zero
    const sorted = ordered(buckets)
    const rows = yield* readRows(budget, sorted).pipe(Effect.mapError(failWith("cannot read the rate budget")))
    const known = new Map(rows.map((row) => [row.bucket, toState(row)]))
    const now = rows[0]?.now_ms ?? (yield* Effect.clockWith((clock) => clock.currentTimeMillis))
    const states = sorted.map(
      (bucket): WindowState => known.get(bucket.key) ?? { ...bucket, windowStart: null, used: 0, blockedUntil: null }
    )
    return Duration.millis(windowsTimeUntil(states, now, permits, priority, budget.policy))
  })

const make = Effect.fnUntraced(function* (policy: Policy, learning: Learning) {
  const budget: Budget = {
    sql: yield* SqlClient,
    policy,
    learning,
    columns: columns(learning),
    local: new LocalPermits(),
    transactions: Semaphore.makeUnsafe(2)
  }
  // Another process's 429 reaches the permits this one holds ahead (needs PostgreSQL's LISTEN).
  const pg = yield* Effect.serviceOption(PgClient.PgClient)
  if (Option.isSome(pg)) yield* Effect.forkScoped(listenForBlocks(pg.value, budget.local))
  return RateBudget.of({
    acquire: acquire(budget),
    anchor: anchor(budget),
    tryAcquire: tryAcquire(budget),
    markExhausted: markExhausted(budget),
    status: status(budget),
    timeUntil: timeUntil(budget),
    policy
  })
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
