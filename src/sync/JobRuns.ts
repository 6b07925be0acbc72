/**
 * JobRuns: the history of sync jobs in `crm_sync.job_runs` — one row per run of a poll, crawl,
 * reference refresh or backfill, opened as `running` when the run starts and closed as
 * `succeeded`, `failed` or `interrupted` however it ends (the close runs as a finalizer, so a
 * SIGTERM still records it). `status` shows the latest runs; the scheduler reads the last finish
 * of a job to decide when it is next due, so a restarted daemon does not crawl again at once. Runs
 * older than `sync.history_retention` are pruned (`prune`), so a 5-minute poll does not add a
 * hundred thousand rows a year for good.
 */
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as DateTime from "effect/DateTime"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql/SqlError"
import { CurrentLease } from "./JobLease.ts"
import { oneLine } from "../observability/Text.ts"
import { recordRun } from "./SyncMetrics.ts"

/** What a finished job reports: requests it sent and whatever else is worth keeping. */
export interface JobOutcome {
  readonly requests: number
  readonly detail: Record<string, unknown>
  /**
   * Set when the run gave its worker back to wait on the rate budget (BudgetHandoff): the wait in
   * ms. The run is recorded `deferred`, and the job resumes when the permit is due.
   */
  readonly deferredMs?: number
}

export type JobStatus = "succeeded" | "failed" | "interrupted" | "deferred"

/** One line saying why a job failed: the error's own message, never a payload. */
export const describeFailure = (cause: Cause.Cause<unknown>): string => oneLine(cause)

/** The error of a run closed for a holder that is gone. */
export const ORPHANED =
  "the run's process ended (or lost its database session) before the run did; the next run resumes it"

const LeaseRows = Schema.Array(Schema.Struct({ lease: Schema.String }))
const DueRows = Schema.Array(Schema.Struct({ due_ms: Schema.NullOr(Schema.Number) }))
const FinishedRows = Schema.Array(Schema.Struct({ connection: Schema.String, job: Schema.String }))

const LastFinished = Schema.Array(Schema.Struct({ finished_ms: Schema.NullOr(Schema.Number) }))

/** How a run ended, as `crm_sync.job_runs` records it: an interruption alone is not a failure. */
const statusOf = (exit: Exit.Exit<JobOutcome, unknown>): JobStatus =>
  Exit.isSuccess(exit)
    ? exit.value.deferredMs === undefined
      ? "succeeded"
      : "deferred"
    : Cause.hasInterruptsOnly(exit.cause)
      ? "interrupted"
      : "failed"

/** Closes run `id` with how it ended; a close the database refuses is logged, never the run's failure. */
const closeRun = (sql: SqlClient, job: string, id: number, exit: Exit.Exit<JobOutcome, unknown>) => {
  const status = statusOf(exit)
  const requests = Exit.isSuccess(exit) ? exit.value.requests : 0
  // Merged over what was written at the start.
  const detail = Exit.isSuccess(exit) ? exit.value.detail : {}
  const error = Exit.isFailure(exit) && status === "failed" ? describeFailure(exit.cause) : null
  return recordRun(job, status).pipe(
    Effect.andThen(sql`UPDATE crm_sync.job_runs
    SET status = ${status}, finished_at = now(), requests = ${requests},
        detail = detail || ${JSON.stringify(detail)}::jsonb, error = ${error}
    WHERE id = ${id}`),
    Effect.catch((sqlError) =>
      Effect.logError("job_runs: cannot record the end of a run").pipe(
        Effect.annotateLogs({ id, error: sqlError.message })
      )
    )
  )
}

const record =
  (sql: SqlClient) =>
  <A extends JobOutcome, E, R>(
    job: string,
    connection: string | null,
    effect: Effect.Effect<A, E, R>,
    initialDetail: Record<string, unknown> = {}
  ): Effect.Effect<A, E | SqlError, R> =>
    Effect.gen(function* () {
      const lease = yield* CurrentLease
      // Callers hold the job's lease, so a run of this job (or under this lease) still marked
      // running belongs to a process that died without closing it (kill -9, a lost host, a lost
      // database session): close it for the record.
      yield* sql`
        UPDATE crm_sync.job_runs SET status = 'interrupted', finished_at = now(), error = ${ORPHANED}
        WHERE status = 'running'
          AND ((job = ${job} AND connection IS NOT DISTINCT FROM ${connection}) OR lease = ${lease})`
      // The row and its close go together: an interruption (SIGTERM) between the insert and the
      // run would leave the row `running` for good.
      return yield* Effect.uninterruptibleMask((restore) =>
        Effect.flatMap(
          sql<{ id: number }>`
            INSERT INTO crm_sync.job_runs (job, connection, detail, lease)
            VALUES (${job}, ${connection}, ${JSON.stringify(initialDetail)}::jsonb, ${lease}) RETURNING id::int AS id`,
          ([row]) => restore(effect).pipe(Effect.onExit((exit) => closeRun(sql, job, row!.id, exit)))
        )
      )
    }).pipe(Effect.withSpan("JobRuns.record", { attributes: { job, connection } }))

const lastSucceeded = (sql: SqlClient) =>
  Effect.fn("JobRuns.lastSucceeded")(function* (job: string, connection: string | null) {
    const rows = yield* sql`
      SELECT (extract(epoch FROM max(finished_at)) * 1000)::float8 AS finished_ms FROM crm_sync.job_runs
      WHERE job = ${job} AND connection IS NOT DISTINCT FROM ${connection} AND status = 'succeeded'`
    return Schema.decodeUnknownOption(LastFinished)(rows).pipe(
      Option.flatMap((list) => Option.fromNullishOr(list[0]?.finished_ms)),
      Option.map((ms) => DateTime.makeUnsafe(Math.round(ms)))
    )
  })

const closeOrphans = (sql: SqlClient) =>
  Effect.fn("JobRuns.closeOrphans")(function* (lease: string) {
    const closed = yield* sql<{ id: number }>`
      UPDATE crm_sync.job_runs SET status = 'interrupted', finished_at = now(), error = ${ORPHANED}
      WHERE status = 'running' AND lease = ${lease} RETURNING id::int AS id`
    return closed.length
  })

const runningLeases = (sql: SqlClient) =>
  sql`
    SELECT DISTINCT lease FROM crm_sync.job_runs WHERE status = 'running' AND lease IS NOT NULL`.pipe(
    Effect.flatMap(Schema.decodeUnknownEffect(LeaseRows)),
    Effect.map((rows) => rows.map((row) => row.lease))
  )

const dueIn = (sql: SqlClient) =>
  Effect.fn("JobRuns.dueIn")(function* (jobs: ReadonlyArray<string>, connection: string, every: Duration.Duration) {
    const rows = yield* sql`
      SELECT (extract(epoch FROM (max(finished_at) + make_interval(secs => ${Duration.toSeconds(every)})) - now())
              * 1000)::float8 AS due_ms
      FROM crm_sync.job_runs
      WHERE job = ANY(${jobs}::text[]) AND connection = ${connection} AND status = 'succeeded'`
    const [row] = yield* Schema.decodeUnknownEffect(DueRows)(rows)
    return Math.max(0, Math.ceil(row?.due_ms ?? 0))
  })

const SinceRows = Schema.Array(
  Schema.Struct({ job: Schema.String, connection: Schema.String, ago_ms: Schema.NullOr(Schema.Number) })
)

const lastSuccesses = (sql: SqlClient) =>
  Effect.fn("JobRuns.lastSuccesses")(function* (
    pairs: ReadonlyArray<{ readonly job: string; readonly connection: string }>
  ) {
    const rows = yield* sql`
      SELECT p.job, p.connection, (extract(epoch FROM now() - s.finished_at) * 1000)::float8 AS ago_ms
      FROM unnest(${pairs.map((pair) => pair.job)}::text[], ${pairs.map((pair) => pair.connection)}::text[])
        AS p(job, connection)
      LEFT JOIN LATERAL (
        SELECT max(r.finished_at) AS finished_at FROM crm_sync.job_runs r
        WHERE r.job = p.job AND r.connection = p.connection AND r.status = 'succeeded'
      ) AS s ON true`
    const decoded = yield* Schema.decodeUnknownEffect(SinceRows)(rows)
    const ago = new Map<string, number>()
    for (const row of decoded) if (row.ago_ms !== null) ago.set(`${row.connection}\u0000${row.job}`, row.ago_ms)
    return ago
  })

const backfilledSince = (sql: SqlClient) =>
  Effect.fn("JobRuns.backfilledSince")(function* (selection: unknown) {
    const json = JSON.stringify(selection)
    const rows = yield* sql`
      WITH last_complete AS (
        SELECT COALESCE(max(finished_at), '-infinity'::timestamptz) AS at FROM crm_sync.job_runs
        WHERE job = 'backfill' AND status = 'succeeded' AND detail -> 'resources' = ${json}::jsonb
      ),
      unfinished AS (
        SELECT min(r.started_at) AS since FROM crm_sync.job_runs r, last_complete c
        WHERE r.job = 'backfill' AND r.status <> 'succeeded' AND r.started_at > c.at
          AND r.detail -> 'resources' = ${json}::jsonb
      )
      SELECT DISTINCT r.connection, r.job FROM crm_sync.job_runs r, unfinished u
      WHERE u.since IS NOT NULL AND r.job LIKE 'backfill:%' AND r.status = 'succeeded' AND r.started_at >= u.since`
    const finished = yield* Schema.decodeUnknownEffect(FinishedRows)(rows)
    return new Set(finished.map((row) => `${row.connection}/${row.job.slice("backfill:".length)}`))
  })

const lastStarted = (sql: SqlClient) =>
  Effect.fn("JobRuns.lastStarted")(function* (job: string, connection: string) {
    const rows = yield* sql<{ at: number | null }>`
      SELECT (extract(epoch FROM max(started_at)) * 1000)::float8 AS at FROM crm_sync.job_runs
      WHERE job = ${job} AND connection = ${connection}`
    return rows[0]?.at ?? null
  })

/** Rows deleted by one statement of `prune`: a large backlog never holds one long delete. */
const PRUNE_SLICE = 5000

// The latest run of each job (status, the lag metrics) and its latest success (when it is next
// due) stay, however old; so do backfills' runs, which tell a resumed backfill what it finished.
const pruneSlice = (sql: SqlClient, retentionMs: number) =>
  sql<{ n: number }>`
    WITH gone AS (
      DELETE FROM crm_sync.job_runs WHERE id IN (
        SELECT r.id FROM crm_sync.job_runs r
        WHERE r.status <> 'running' AND r.job NOT LIKE 'backfill%'
          AND r.finished_at < now() - ${retentionMs}::float8 * interval '1 millisecond'
          AND r.id < (SELECT max(l.id) FROM crm_sync.job_runs l
                      WHERE l.job = r.job AND l.connection IS NOT DISTINCT FROM r.connection)
          AND r.id <> COALESCE((SELECT max(s.id) FROM crm_sync.job_runs s
                                WHERE s.job = r.job AND s.connection IS NOT DISTINCT FROM r.connection
                                  AND s.status = 'succeeded'), 0)
        -- Oldest first, by the primary key: a slice stops reading once it has its rows.
        ORDER BY r.id
        LIMIT ${PRUNE_SLICE}
      )
      RETURNING 1
    )
    SELECT count(*)::int AS n FROM gone`.pipe(Effect.map((rows) => rows[0]?.n ?? 0))

const prune = (sql: SqlClient) =>
  Effect.fn("JobRuns.prune")(function* (retention: Duration.Duration) {
    let total = 0
    while (true) {
      const deleted = yield* pruneSlice(sql, Duration.toMillis(retention))
      total += deleted
      if (deleted < PRUNE_SLICE) return total
    }
  })

export class JobRuns extends Context.Service<
  JobRuns,
  {
    /**
     * Runs `effect` as one recorded run of `job` (for `connection`, if it is per connection). The
     * row is written before the effect starts and closed after it ends, even on interruption.
     * Call it holding the job's lease: earlier runs of the job still marked `running` are closed
     * as `interrupted` first.
     */
    readonly record: <A extends JobOutcome, E, R>(
      job: string,
      connection: string | null,
      effect: Effect.Effect<A, E, R>,
      /** Written when the run starts, so that it is there however the run ends (kill -9 too). */
      initialDetail?: Record<string, unknown>
    ) => Effect.Effect<A, E | SqlError, R>
    /**
     * Marks `interrupted` the job runs still `running` under `lease`. Call it holding that lease
     * and running nothing under it: such runs belong to a process that died. Returns how many.
     */
    readonly closeOrphans: (lease: string) => Effect.Effect<number, SqlError>
    /** The leases that runs still marked `running` were taken under. */
    readonly runningLeases: Effect.Effect<ReadonlyArray<string>, SqlError | Schema.SchemaError>
    /**
     * Milliseconds until a job is due (0 if it is, or never ran), on the database's clock: `every`
     * after the last success of any of `jobs` for `connection`.
     */
    readonly dueIn: (
      jobs: ReadonlyArray<string>,
      connection: string,
      every: Duration.Duration
    ) => Effect.Effect<number, SqlError | Schema.SchemaError>
    /**
     * For each (job, connection) that ever succeeded, how long ago (milliseconds, on the database's
     * clock) its latest success finished, keyed `connection + "\u0000" + job`: the scheduler's start.
     */
    readonly lastSuccesses: (
      pairs: ReadonlyArray<{ readonly job: string; readonly connection: string }>
    ) => Effect.Effect<ReadonlyMap<string, number>, SqlError | Schema.SchemaError>
    /**
     * The `connection/resource` pairs a backfill of `selection` finished since the last backfill
     * of that selection that succeeded (none when that was the last one): what a resumed backfill
     * skips.
     */
    readonly backfilledSince: (selection: unknown) => Effect.Effect<ReadonlySet<string>, SqlError | Schema.SchemaError>
    /**
     * Deletes the runs that finished longer than `retention` ago, but for each job's (and
     * connection's) latest run and latest success, and backfills' runs. Returns how many.
     */
    readonly prune: (retention: Duration.Duration) => Effect.Effect<number, SqlError>
    /** When a run of `job` for `connection` last started (any outcome), epoch milliseconds, if ever. */
    readonly lastStarted: (job: string, connection: string) => Effect.Effect<number | null, SqlError>
    /** When `job` last finished without failing (succeeded), if ever. */
    readonly lastSucceeded: (
      job: string,
      connection: string | null
    ) => Effect.Effect<Option.Option<DateTime.Utc>, SqlError>
  }
>()("crm-sync/sync/JobRuns") {
  static readonly layer = Layer.effect(
    JobRuns,
    Effect.gen(function* () {
      const sql = yield* SqlClient
      return JobRuns.of({
        record: record(sql),
        closeOrphans: closeOrphans(sql),
        runningLeases: runningLeases(sql),
        dueIn: dueIn(sql),
        lastSuccesses: lastSuccesses(sql),
        backfilledSince: backfilledSince(sql),
        prune: prune(sql),
        lastStarted: lastStarted(sql),
        lastSucceeded: lastSucceeded(sql)
      })
    })
  )
}

// ---------------------------------------------------------------------------------------------
// Reads for status, the status page, lag metrics and the plan
// ---------------------------------------------------------------------------------------------

/** The latest run of each job (and connection). */
export const latestRuns = Effect.gen(function* () {
  const sql = yield* SqlClient
  return yield* sql<{ job: string; connection: string | null; status: string; finished_at: Date | null }>`
    SELECT DISTINCT ON (job, connection) job, connection, status, finished_at
    FROM crm_sync.job_runs ORDER BY job, connection, id DESC`
})

/** The `limit` most recent runs (of `connection`'s jobs, if given), newest first, with how long each took (null: still running). */
export const recentRuns = (limit: number, connection?: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const only = connection === undefined ? sql`TRUE` : sql`connection = ${connection}`
    return yield* sql<{
      job: string
      connection: string | null
      status: string
      started_at: Date
      seconds: number | null
      error: string | null
    }>`
      SELECT job, connection, status, started_at,
             extract(epoch FROM finished_at - started_at)::float8 AS seconds, error
      FROM crm_sync.job_runs WHERE ${only} ORDER BY id DESC LIMIT ${limit}`
  })

/**
 * For each (job, connection): its latest run's status, the end of its last success, and the runs
 * that failed since (how many, and the latest one's error). Read from the runs started within
 * `horizonSeconds` (a range of the primary key, found from its newest end: its cost follows what
 * the schedules ran in that time, not the history kept nor the pairs asked about); only a pair
 * with no success in that range is looked up further back, by itself.
 */
export const jobStates = (
  jobs: ReadonlyArray<{ readonly job: string; readonly connection: string }>,
  horizonSeconds: number
) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    return yield* sql<{
      job: string
      connection: string
      last_status: string | null
      last_success: Date | null
      failures: number
      last_error: string | null
    }>`
      WITH keys AS (
        SELECT * FROM unnest(${jobs.map((job) => job.job)}::text[], ${jobs.map((job) => job.connection)}::text[])
          AS j(job, connection)
      ),
      recent AS (
        SELECT r.id, r.job, r.connection, r.status, r.finished_at, r.error FROM crm_sync.job_runs r
        WHERE r.id > COALESCE((SELECT o.id FROM crm_sync.job_runs o
                               WHERE o.started_at < now() - make_interval(secs => ${horizonSeconds})
                               ORDER BY o.id DESC LIMIT 1), 0)
          AND r.connection IS NOT NULL
      ),
      latest AS (
        SELECT DISTINCT ON (job, connection) job, connection, status FROM recent ORDER BY job, connection, id DESC
      ),
      success AS (
        SELECT DISTINCT ON (job, connection) job, connection, id, finished_at FROM recent
        WHERE status = 'succeeded' ORDER BY job, connection, id DESC
      ),
      found AS (
        SELECT k.job, k.connection, l.status AS last_status,
               COALESCE(s.id, old.id) AS success_id, COALESCE(s.finished_at, old.finished_at) AS last_success
        FROM keys k
        LEFT JOIN latest l ON l.job = k.job AND l.connection = k.connection
        LEFT JOIN success s ON s.job = k.job AND s.connection = k.connection
        LEFT JOIN LATERAL (
          SELECT r.id, r.finished_at FROM crm_sync.job_runs r
          WHERE s.id IS NULL AND r.job = k.job AND r.connection = k.connection AND r.status = 'succeeded'
          ORDER BY r.id DESC LIMIT 1
        ) AS old ON true
      )
      SELECT f.job, f.connection,
             COALESCE(f.last_status, (SELECT r.status FROM crm_sync.job_runs r
                                      WHERE r.id = f.success_id)) AS last_status,
             f.last_success, COALESCE(x.failures, 0)::int AS failures, x.error AS last_error
      FROM found f
      LEFT JOIN (
        SELECT r.job, r.connection, count(*)::int AS failures, (array_agg(r.error ORDER BY r.id DESC))[1] AS error
        FROM recent r LEFT JOIN success s ON s.job = r.job AND s.connection = r.connection
        WHERE r.status = 'failed' AND r.id > COALESCE(s.id, 0)
        GROUP BY r.job, r.connection
      ) AS x ON x.job = f.job AND x.connection = f.connection`
  })

/**
 * Requests of the last 20 successful incremental runs of `job` on average, for each of
 * `connections` that has any: one pass over the job's successes, not one walk per connection.
 */
export const averagePollRequests = (job: string, connections: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const rows = yield* sql<{ connection: string; avg: number }>`
      SELECT connection, avg(requests)::float8 AS avg FROM (
        SELECT connection, requests, row_number() OVER (PARTITION BY connection ORDER BY id DESC) AS n
        FROM crm_sync.job_runs
        WHERE job = ${job} AND connection = ANY(${connections}::text[]) AND status = 'succeeded'
          AND coalesce(detail->>'mode', 'poll') = 'poll') recent
      WHERE n <= 20 GROUP BY connection`
    return new Map(rows.map((row) => [row.connection, row.avg]))
  })

/** The id below which every run started before `since` (ISO): a range of the primary key, found from its newest end. */
const startedFrom = (sql: SqlClient, since: string) =>
  sql`COALESCE((SELECT o.id FROM crm_sync.job_runs o WHERE o.started_at < ${since}::timestamptz
                ORDER BY o.id DESC LIMIT 1), 0)`

/**
 * Requests per minute since `since` (ISO) for each key (a rate bucket) of `pairs`, summed over the
 * connections drawing on it. Requests are not recorded per minute: each finished run's requests
 * are spread evenly over the minutes it ran (a poll's few in its minute, a crawl's over its
 * length). Runs that started a day or more before `since` are not read.
 */
export const requestsPerMinute = (
  pairs: ReadonlyArray<{ readonly connection: string; readonly key: string }>,
  since: string
) =>
  Effect.gen(function* () {
    if (pairs.length === 0) return []
    const sql = yield* SqlClient
    const from = new Date(Date.parse(since) - 86_400_000).toISOString()
    return yield* sql<{ key: string; minute: Date; requests: number }>`
      WITH pairs AS (
        SELECT * FROM unnest(${pairs.map((pair) => pair.connection)}::text[], ${pairs.map((pair) => pair.key)}::text[])
          AS p(connection, key)
      ),
      runs AS (
        SELECT r.connection, r.requests, date_trunc('minute', r.started_at) AS first_minute,
               date_trunc('minute', r.finished_at) AS last_minute
        FROM crm_sync.job_runs r
        WHERE r.id > ${startedFrom(sql, from)} AND r.finished_at >= ${since}::timestamptz AND r.requests > 0
      ),
      spread AS (
        SELECT r.connection, m.minute,
               r.requests::float8 / (extract(epoch FROM r.last_minute - r.first_minute) / 60 + 1) AS requests
        FROM runs r
        CROSS JOIN LATERAL generate_series(r.first_minute, r.last_minute, interval '1 minute') AS m(minute)
      )
      SELECT p.key, s.minute, sum(s.requests)::float8 AS requests
      FROM spread s JOIN pairs p ON p.connection = s.connection
      WHERE s.minute >= date_trunc('minute', ${since}::timestamptz)
      GROUP BY p.key, s.minute`
  })

/**
 * Runs started since `since` (ISO) per job, in slots of `slotMs` counted from the epoch (slot
 * `n` starts at `n * slotMs`), by status: what the status page draws as a day of ticks. The rows
 * follow the jobs and slots, not the connections.
 */
export const runsPerSlot = (since: string, slotMs: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    return yield* sql<{ job: string; slot: number; status: string; n: number }>`
      SELECT job, floor(extract(epoch FROM started_at) * 1000 / ${slotMs})::float8 AS slot, status,
             count(*)::int AS n
      FROM crm_sync.job_runs
      WHERE id > ${startedFrom(sql, since)} AND started_at >= ${since}::timestamptz
      GROUP BY job, 2, status`
  })
