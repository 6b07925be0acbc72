/**
 * StateMetrics: once a minute, the daemon reads the same report as `crm-sync status` and exports it
 * as gauges — budget use per bucket, outbox rows by status, rows and last write per table, and
 * connections that need re-authorization — so dashboards and alerts see every process sharing the
 * database, not just this one.
 */
import { Duration, Effect, Layer, Schedule } from "effect"
import { AppConfig } from "../config/AppConfig.ts"
import { DatabaseInfo } from "../warehouse/Database.ts"
import * as Metrics from "./Metrics.ts"
import { statusReport } from "./StatusReport.ts"

const INTERVAL = Duration.minutes(1)

const refresh = Effect.gen(function* () {
  const config = yield* AppConfig
  const report = yield* statusReport(config, yield* DatabaseInfo)
  const now = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
  for (const bucket of report.buckets) {
    const labels = { bucket: bucket.bucket, scope: bucket.scope }
    yield* Metrics.set(Metrics.budgetUsed, bucket.used, labels)
    yield* Metrics.set(Metrics.budgetLimit, bucket.limit, labels)
    const blocked = bucket.blocked_until !== null && Date.parse(bucket.blocked_until) > now
    yield* Metrics.set(Metrics.budgetBlocked, blocked ? 1 : 0, labels)
  }
  for (const status of ["pending", "in_flight", "succeeded", "failed", "needs_review"]) {
    yield* Metrics.set(Metrics.outboxRows, report.outbox[status] ?? 0, { status })
  }
  for (const [resource, state] of Object.entries(report.resources)) {
    yield* Metrics.set(Metrics.resourceRows, state.rows - state.deleted, { resource })
    yield* Metrics.set(
      Metrics.resourceLastSync,
      state.last_sync === null ? 0 : Math.floor(Date.parse(state.last_sync) / 1000),
      { resource }
    )
  }
  for (const plan of report.plan) {
    yield* Metrics.set(Metrics.planFits, plan.fits ? 1 : 0, { connection: plan.connection })
    for (const crawl of plan.crawls) {
      // -1: never (no budget left for crawls); a gauge cannot hold infinity usefully.
      const seconds = crawl.full_crawl_seconds ?? -1
      yield* Metrics.set(Metrics.planFullCrawlSeconds, seconds, {
        connection: plan.connection,
        resource: crawl.resource
      })
    }
  }
  for (const connection of config.connections) {
    const needs = report.connections_needing_reauthorization.includes(connection.name)
    yield* Metrics.set(Metrics.connectionNeedsReauthorization, needs ? 1 : 0, { connection: connection.name })
  }
})

export const StateMetricsLive = Layer.effectDiscard(
  refresh.pipe(
    Effect.catchCause((cause) => Effect.logDebug("state metrics not refreshed", cause)),
    Effect.repeat(Schedule.spaced(INTERVAL)),
    Effect.forkScoped
  )
)
