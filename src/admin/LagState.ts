/**
 * LagState: how far behind each part of crm-sync is, read from the database for /metrics (see
 * StateMetrics) — when each scheduled job last succeeded and how many runs failed since, against
 * its schedule; where each poll cursor stands; when each webhook endpoint last received a
 * delivery; how many records the warehouse refused; whether each subscription is still the one
 * crm-sync made. A last *successful* run tells a failed poll from a quiet hour, which the time of
 * the last row written cannot.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type { AppConfigShape } from "../config/AppConfig.ts"
import { cursorPositions } from "../sync/Cursors.ts"
import { jobStates } from "../sync/JobRuns.ts"
import { JobNames } from "../sync/SyncJobs.ts"
import { undecodableCounts } from "../warehouse/Warehouse.ts"
import { activeSubscriptions } from "../webhooks/Subscriptions.ts"
import { lastDeliveries } from "../webhooks/WebhookInbox.ts"
import { runsPerDay } from "./PlanReport.ts"

export interface JobLag {
  readonly job: string
  readonly connection: string
  /** Seconds between runs the schedule asks for. */
  readonly interval_seconds: number
  /** Unix seconds of the last successful run's end; null: never. */
  readonly last_success: number | null
  /** Failed runs since the last success (of those started within `stateHorizon`'s reach). */
  readonly failures: number
}

export interface LagState {
  readonly jobs: ReadonlyArray<JobLag>
  readonly cursors: ReadonlyArray<{ readonly connection: string; readonly resource: string; readonly at: number }>
  readonly endpoints: ReadonlyArray<{ readonly endpoint: string; readonly last_delivery: number | null }>
  readonly undecodable: ReadonlyArray<{ readonly resource: string; readonly records: number }>
  readonly subscriptions: ReadonlyArray<{
    readonly connection: string
    readonly state: string
    readonly changed_at: number
  }>
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

/**
 * How far back the job states are read (JobRuns' `jobStates`): twice the longest interval and an
 * hour. A job whose last success is older is late by any reading; its last success is still
 * found, and only its failures before that reach go uncounted.
 */
export const stateHorizon = (jobs: ReadonlyArray<{ readonly interval_seconds: number }>) =>
  2 * Math.max(3600, ...jobs.map((job) => job.interval_seconds)) + 3600

export const lagState = Effect.fn("LagState.read")(function* (config: AppConfigShape) {
  const jobs = scheduledJobs(config, new Date(yield* Effect.clockWith((clock) => clock.currentTimeMillis)))
  const rows = yield* jobStates(jobs, stateHorizon(jobs))
  const byKey = new Map(rows.map((row) => [`${row.job}\u0000${row.connection}`, row]))
  return {
    jobs: jobs.map((job) => {
      const row = byKey.get(`${job.job}\u0000${job.connection}`)
      const success = row?.last_success ?? null
      return { ...job, last_success: success === null ? null : success.getTime() / 1000, failures: row?.failures ?? 0 }
    }),
    cursors: yield* cursorPositions,
    endpoints: yield* lastDeliveries(config.webhooks.endpoints.map((endpoint) => endpoint.name)),
    undecodable: yield* undecodableCounts,
    subscriptions: yield* activeSubscriptions
  } satisfies LagState
})
