/**
 * JobRuns: the history of sync jobs in `crm_sync.job_runs` — one row per run of a poll, crawl,
 * reference refresh or backfill, opened as `running` when the run starts and closed as
 * `succeeded`, `failed` or `interrupted` however it ends (the close runs as a finalizer, so a
 * SIGTERM still records it). `status` shows the latest runs; the scheduler reads the last finish
 * of a job to decide when it is next due, so a restarted daemon does not crawl again at once.
 */
import { Cause, Context, DateTime, Effect, Exit, Layer, Option, Schema } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql/SqlError"
import { CurrentLease } from "./JobLease.ts"
import { oneLine } from "../observability/Text.ts"
import { recordRun } from "./SyncMetrics.ts"

/** What a finished job reports: requests it sent and whatever else is worth keeping. */
export interface JobOutcome {
  readonly requests: number
  readonly detail: Record<string, unknown>
}

export type JobStatus = "succeeded" | "failed" | "interrupted"

/** One line saying why a job failed: the error's own message, never a payload. */
export const describeFailure = (cause: Cause.Cause<unknown>): string => oneLine(cause)

/** The error of a run closed for a holder that is gone. */
const ORPHANED = "the run's process ended (or lost its database session) before the run did; the next run resumes it"

const LastFinished = Schema.Array(Schema.Struct({ finished_ms: Schema.NullOr(Schema.Number) }))

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
     * Marks `interrupted` the runs (job runs and crawl runs) still `running` under `lease`. Call it
     * holding that lease and running nothing under it: such runs belong to a process that died.
     * Returns how many job runs it closed.
     */
    readonly closeOrphans: (lease: string) => Effect.Effect<number, SqlError>
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

      const close = (job: string, id: number, exit: Exit.Exit<JobOutcome, unknown>) => {
        const status: JobStatus = Exit.isSuccess(exit)
          ? "succeeded"
          : Cause.hasInterruptsOnly(exit.cause)
            ? "interrupted"
            : "failed"
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

      const record = <A extends JobOutcome, E, R>(
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
          const [row] = yield* sql<{ id: number }>`
            INSERT INTO crm_sync.job_runs (job, connection, detail, lease)
            VALUES (${job}, ${connection}, ${JSON.stringify(initialDetail)}::jsonb, ${lease}) RETURNING id::int AS id`
          const id = row!.id
          return yield* effect.pipe(Effect.onExit((exit) => close(job, id, exit)))
        }).pipe(Effect.withSpan("JobRuns.record", { attributes: { job, connection } }))

      const lastSucceeded = Effect.fn("JobRuns.lastSucceeded")(function* (job: string, connection: string | null) {
        const rows = yield* sql`
          SELECT (extract(epoch FROM max(finished_at)) * 1000)::float8 AS finished_ms FROM crm_sync.job_runs
          WHERE job = ${job} AND connection IS NOT DISTINCT FROM ${connection} AND status = 'succeeded'`
        return Schema.decodeUnknownOption(LastFinished)(rows).pipe(
          Option.flatMap((list) => Option.fromNullishOr(list[0]?.finished_ms)),
          Option.map((ms) => DateTime.makeUnsafe(Math.round(ms)))
        )
      })

      const closeOrphans = Effect.fn("JobRuns.closeOrphans")(function* (lease: string) {
        const closed = yield* sql<{ id: number }>`
          UPDATE crm_sync.job_runs SET status = 'interrupted', finished_at = now(), error = ${ORPHANED}
          WHERE status = 'running' AND lease = ${lease} RETURNING id::int AS id`
        yield* sql`
          UPDATE crm_sync.crawl_runs SET status = 'interrupted', finished_at = now(), error = ${ORPHANED}
          WHERE status = 'running' AND lease = ${lease}`
        return closed.length
      })

      return JobRuns.of({ record, closeOrphans, lastSucceeded })
    })
  )
}
