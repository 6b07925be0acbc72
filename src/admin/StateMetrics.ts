/**
 * StateMetrics: once a minute, the daemon reads the same report as `crm-sync status` and exports it
 * as gauges — budget use per bucket, outbox rows by status, rows and last write per table,
 * connections that need re-authorization, refused webhook deliveries, and the lag of every job, cursor and endpoint
 * (LagState) — so dashboards and alerts see every process sharing the
 * database, not just this one.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import { AppConfig } from "../config/AppConfig.ts"
import { DatabaseInfo } from "../warehouse/Database.ts"
import { Resources } from "../warehouse/Warehouse.ts"
import * as Metrics from "../observability/Metrics.ts"
import { lagState } from "./LagState.ts"
import { statusReport } from "./StatusReport.ts"

const INTERVAL = Duration.minutes(1)

/** One refresh of every state gauge (the daemon runs it once a minute). */
export const refresh = Effect.gen(function* () {
  const config = yield* AppConfig
  const report = yield* statusReport(config, yield* DatabaseInfo)
  const now = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
  for (const bucket of report.buckets) {
    const labels = { bucket: bucket.bucket, scope: bucket.scope }
    yield* Metrics.set(Metrics.budgetUsed, bucket.used, labels)
    yield* Metrics.set(Metrics.budgetLimit, bucket.limit, labels)
    yield* Metrics.set(Metrics.budgetLearnedLimit, bucket.learned_limit ?? 0, labels)
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
  const lag = yield* lagState(config)
  for (const job of lag.jobs) {
    const labels = { job: job.job, connection: job.connection }
    yield* Metrics.set(Metrics.jobLastSuccess, job.last_success === null ? 0 : Math.floor(job.last_success), labels)
    yield* Metrics.set(Metrics.jobInterval, job.interval_seconds, labels)
    yield* Metrics.set(Metrics.jobFailures, job.failures, labels)
  }
  for (const cursor of lag.cursors) {
    yield* Metrics.set(Metrics.cursorTimestamp, Math.floor(cursor.at), {
      connection: cursor.connection,
      resource: cursor.resource
    })
  }
  for (const endpoint of lag.endpoints) {
    const at = endpoint.last_delivery === null ? 0 : Math.floor(endpoint.last_delivery)
    yield* Metrics.set(Metrics.webhookLastDelivery, at, { endpoint: endpoint.endpoint })
  }
  // Every table, so that a cleared resource goes back to 0 rather than keeping its last count.
  for (const resource of Resources) {
    const records = lag.undecodable.find((row) => row.resource === resource)?.records ?? 0
    yield* Metrics.set(Metrics.undecodableRecords, records, { resource })
  }
  for (const subscription of lag.subscriptions) {
    // A refused grant takes the subscription with it (the CRM removes it), whichever process found it.
    const refused = report.connections_needing_reauthorization.includes(subscription.connection)
    yield* Metrics.set(Metrics.webhookSubscriptionOk, subscription.state === "present" && !refused ? 1 : 0, {
      connection: subscription.connection
    })
    yield* Metrics.set(Metrics.webhookSubscribedAt, Math.floor(subscription.changed_at), {
      connection: subscription.connection
    })
  }
  for (const refusal of report.webhook_refusals) {
    yield* Metrics.set(Metrics.webhookLastRefusal, Math.floor(Date.parse(refusal.last_at) / 1000), {
      endpoint: refusal.endpoint,
      reason: refusal.reason
    })
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
