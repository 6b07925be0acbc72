/**
 * LagState: how far behind each part of crm-sync is, read from the database for /metrics (see
 * StateMetrics) — when each scheduled job last succeeded and how many runs failed since, against
 * its schedule; where each poll cursor stands; when each webhook endpoint last received a
 * delivery; how many records the warehouse refused; whether each subscription is still the one
 * crm-sync made. A last *successful* run tells a failed poll from a quiet hour, which the time of
 * the last row written cannot.
 */
import { Duration, Effect, Schema } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import type { AppConfigShape } from "../config/AppConfig.ts"
import { JobNames } from "../sync/SyncJobs.ts"
import { runsPerDay } from "./PlanReport.ts"

export interface JobLag {
  readonly job: string
  readonly connection: string
  /** Seconds between runs the schedule asks for. */
  readonly interval_seconds: number
  /** Unix seconds of the last successful run's end; null: never. */
  readonly last_success: number | null
  /** Failed runs since the last success. */
  readonly failures: number
}

export interface LagState {
  readonly jobs: ReadonlyArray<JobLag>
  readonly cursors: ReadonlyArray<{ readonly connection: string; readonly resource: string; readonly at: number }>
  readonly endpoints: ReadonlyArray<{ readonly endpoint: string; readonly last_delivery: number | null }>
  readonly undecodable: ReadonlyArray<{ readonly resource: string; readonly records: number }>
  readonly subscriptions: ReadonlyArray<{ readonly connection: string; readonly state: string }>
}

const seconds = (duration: Duration.Duration) => Duration.toSeconds(duration)

/** The scheduled jobs the daemon runs for each connection, with their intervals (seconds). */
export const scheduledJobs = (
  config: AppConfigShape,
  now: Date
): ReadonlyArray<Omit<JobLag, "last_success" | "failures">> => {
  const reconcileEvery = 86_400 / Math.max(1, runsPerDay(config.schedules.reconcile, now))
  return config.connections.flatMap((connection) => [
    { job: JobNames.poll, connection: connection.name, interval_seconds: seconds(config.schedules.businesses) },
    {
      job: JobNames.crawl("businesses"),
      connection: connection.name,
      interval_seconds: seconds(config.schedules.business_crawl)
    },
    {
      job: JobNames.crawl("annuity_contracts"),
      connection: connection.name,
      interval_seconds: seconds(config.schedules.crawl)
    },
    {
      job: JobNames.crawl("financial_accounts"),
      connection: connection.name,
      interval_seconds: seconds(config.schedules.crawl)
    },
    { job: JobNames.reference, connection: connection.name, interval_seconds: seconds(config.schedules.reference) },
    { job: "reconcile", connection: connection.name, interval_seconds: reconcileEvery },
    ...(connection.credential === "oauth"
      ? [
          {
            job: JobNames.subscription,
            connection: connection.name,
            interval_seconds: seconds(config.schedules.subscription_check)
          }
        ]
      : [])
  ])
}

const JobRows = Schema.Array(
  Schema.Struct({
    job: Schema.String,
    connection: Schema.String,
    last_success: Schema.NullOr(Schema.Number),
    failures: Schema.Number
  })
)
const CursorRows = Schema.Array(
  Schema.Struct({ connection: Schema.String, resource: Schema.String, at: Schema.Number })
)
const EndpointRows = Schema.Array(
  Schema.Struct({ endpoint: Schema.String, last_delivery: Schema.NullOr(Schema.Number) })
)
const UndecodableRows = Schema.Array(Schema.Struct({ resource: Schema.String, records: Schema.Number }))
const SubscriptionRows = Schema.Array(Schema.Struct({ connection: Schema.String, state: Schema.String }))

export const lagState = Effect.fn("LagState.read")(function* (config: AppConfigShape) {
  const sql = yield* SqlClient
  const jobs = scheduledJobs(config, new Date(yield* Effect.clockWith((clock) => clock.currentTimeMillis)))
  const rows = yield* sql`
    SELECT j.job, j.connection,
           extract(epoch FROM s.finished_at)::float8 AS last_success,
           (SELECT count(*)::int FROM crm_sync.job_runs f
            WHERE f.job = j.job AND f.connection = j.connection AND f.status = 'failed'
              AND f.id > COALESCE(s.id, 0)) AS failures
    FROM unnest(${jobs.map((job) => job.job)}::text[], ${jobs.map((job) => job.connection)}::text[]) AS j(job, connection)
    LEFT JOIN LATERAL (
      SELECT r.id, r.finished_at FROM crm_sync.job_runs r
      WHERE r.job = j.job AND r.connection = j.connection AND r.status = 'succeeded'
      ORDER BY r.id DESC LIMIT 1
    ) AS s ON true`.pipe(Effect.flatMap(Schema.decodeUnknownEffect(JobRows)))
  const byKey = new Map(rows.map((row) => [`${row.job}\u0000${row.connection}`, row]))
  const endpointNames = config.webhooks.endpoints.map((endpoint) => endpoint.name)
  return {
    jobs: jobs.map((job) => {
      const row = byKey.get(`${job.job}\u0000${job.connection}`)
      return { ...job, last_success: row?.last_success ?? null, failures: row?.failures ?? 0 }
    }),
    cursors: yield* sql`
      SELECT connection, resource, extract(epoch FROM cursor)::float8 AS at
      FROM crm_sync.cursors WHERE cursor IS NOT NULL`.pipe(Effect.flatMap(Schema.decodeUnknownEffect(CursorRows))),
    endpoints:
      endpointNames.length === 0
        ? []
        : yield* sql`
            SELECT e.endpoint,
                   (SELECT extract(epoch FROM max(i.received_at))::float8 FROM crm_sync.webhook_inbox i
                    WHERE i.endpoint = e.endpoint) AS last_delivery
            FROM unnest(${endpointNames}::text[]) AS e(endpoint)`.pipe(
            Effect.flatMap(Schema.decodeUnknownEffect(EndpointRows))
          ),
    undecodable: yield* sql`
      SELECT resource, count(*)::int AS records FROM crm_sync.undecodable_records GROUP BY resource`.pipe(
      Effect.flatMap(Schema.decodeUnknownEffect(UndecodableRows))
    ),
    subscriptions: yield* sql`
      SELECT connection, state FROM crm_sync.webhook_subscriptions WHERE state <> 'unsubscribed'`.pipe(
      Effect.flatMap(Schema.decodeUnknownEffect(SubscriptionRows))
    )
  } satisfies LagState
})
