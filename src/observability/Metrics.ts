/**
 * Metrics: the counters, gauges and histograms crm-sync exports as Prometheus text on `/metrics`
 * (see Health.ts), built on Effect's own `Metric` registry so that any module can record into it
 * with `Metrics.increment` / `Metrics.observe` / `Metrics.set` and nothing has to be wired.
 *
 * Names follow Prometheus conventions (`crm_sync_` prefix, `_total` for counters, base units such
 * as seconds). Label values come from small closed sets (endpoint names from the config, results,
 * event types) so the number of series stays bounded. Other capabilities declare their metrics
 * here too, next to these, so that `/metrics` and the Grafana dashboard have one place to look.
 */
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"

type Attributes = Readonly<Record<string, string>>

// One labelled metric per (metric, labels), made once: a labelled metric caches its series key,
// so recording on a hot path (every webhook request) does not rebuild and re-serialize it.
const labelled = new WeakMap<object, Map<string, unknown>>()
const withLabels = <M extends Metric.Metric<any, any>>(metric: M, attributes: Attributes): M => {
  let byLabels = labelled.get(metric)
  if (byLabels === undefined) labelled.set(metric, (byLabels = new Map()))
  const key = JSON.stringify(attributes)
  let bound = byLabels.get(key) as M | undefined
  if (bound === undefined) byLabels.set(key, (bound = Metric.withAttributes(metric, attributes) as M))
  return bound
}

/** Adds `amount` (default 1) to a counter, under the given labels. */
export const increment = (counter: Metric.Counter<number>, attributes: Attributes, amount = 1): Effect.Effect<void> =>
  Metric.update(withLabels(counter, attributes), amount)

/** Records one observation in a histogram, under the given labels. */
export const observe = (histogram: Metric.Histogram<number>, value: number, attributes: Attributes = {}) =>
  Metric.update(withLabels(histogram, attributes), value)

/** Sets a gauge to `value`, under the given labels. */
export const set = (gauge: Metric.Gauge<number>, value: number, attributes: Attributes = {}) =>
  Metric.update(withLabels(gauge, attributes), value)

/** Latency buckets in seconds, 1 ms to 10 s: the webhook ack target is 50 ms (issue 6). */
const latencyBoundaries = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

// ---------------------------------------------------------------------------------------------
// Webhook intake (src/webhooks/WebhookIntake.ts)
// ---------------------------------------------------------------------------------------------

/**
 * Every request to `/webhooks/<name>`, by `endpoint` and `result`: `accepted`, `duplicate`,
 * `not_json` (stored dead, answered 2xx), or the rejection: `unknown_endpoint` (404),
 * `body_too_large` (413), `missing_header` / `malformed_header` (400), `bad_signature` /
 * `stale_timestamp` (401), `unavailable` (503, the database could not take it), `busy` (503, the
 * in-flight body bytes are at their cap).
 */
export const webhookDeliveries = Metric.counter("crm_sync_webhook_deliveries_total", {
  description: "Webhook deliveries received, by endpoint and result (accepted, duplicate, or why refused)",
  incremental: true
})

/** Time from the request's arrival to its 2xx, for deliveries that were durably accepted. */
export const webhookAckSeconds = Metric.histogram("crm_sync_webhook_ack_seconds", {
  description: "Seconds from a webhook request's arrival to its 2xx (after the inbox commit)",
  boundaries: latencyBoundaries
})

/** Rows per group-commit INSERT into the inbox. */
export const webhookInboxBatchRows = Metric.histogram("crm_sync_webhook_inbox_batch_rows", {
  description: "Deliveries written per group-commit INSERT into crm_sync.webhook_inbox",
  boundaries: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
})

// ---------------------------------------------------------------------------------------------
// Event processing (src/webhooks/EventProcessor.ts)
// ---------------------------------------------------------------------------------------------

/** Inbox rows finished, by `event_type` and `result`: processed, unhandled, failed (will retry), dead. */
export const webhookEvents = Metric.counter("crm_sync_webhook_events_total", {
  description: "Webhook events taken from the inbox, by event type and result (processed, unhandled, failed, dead)",
  incremental: true
})

/** Seconds to apply one claimed batch (decode, follow-up reads, warehouse writes, commit). */
export const webhookApplySeconds = Metric.histogram("crm_sync_webhook_apply_batch_seconds", {
  description: "Seconds to apply one claimed batch of webhook events to the warehouse",
  boundaries: latencyBoundaries
})

/** Rows waiting in the inbox (pending or failed awaiting retry), sampled by the processor. */
export const webhookInboxBacklog = Metric.gauge("crm_sync_webhook_inbox_backlog", {
  description: "Webhook inbox rows not yet processed (pending, or failed and waiting to retry)"
})

/** Rows currently dead in the inbox (need `crm-sync webhooks replay`). */
export const webhookInboxDead = Metric.gauge("crm_sync_webhook_inbox_dead", {
  description: "Webhook inbox rows marked dead (replay with `crm-sync webhooks replay --dead`)"
})

/** Seconds from a delivery's acceptance to its application in the warehouse (freshness). */
export const webhookLagSeconds = Metric.histogram("crm_sync_webhook_lag_seconds", {
  description: "Seconds from a webhook's acceptance to its application in the warehouse",
  boundaries: latencyBoundaries
})

// ---------------------------------------------------------------------------------------------
// State read from the database (src/admin/StateMetrics.ts, once a minute)
// ---------------------------------------------------------------------------------------------

/** Requests used in each rate-limit bucket's current window (spec §8). */
export const budgetUsed = Metric.gauge("crm_sync_budget_used", {
  description: "Requests used in the current window, by bucket"
})

/** Each bucket's limit per window. */
export const budgetLimit = Metric.gauge("crm_sync_budget_limit", {
  description: "Requests allowed per window, by bucket"
})

/** 1 while a 429 has the bucket blocked (until its Retry-After). */
export const budgetBlocked = Metric.gauge("crm_sync_budget_blocked", {
  description: "1 while the bucket is blocked after a 429, else 0"
})

/** The ceiling learned from 429s below the limit (0: none): what other consumers leave. */
export const budgetLearnedLimit = Metric.gauge("crm_sync_budget_learned_limit", {
  description: "Requests per window the budget has learned it may use (others spend the rest), by bucket; 0 when none"
})

/** Outbox rows by status: `needs_review` and `failed` rows wait for a person. */
export const outboxRows = Metric.gauge("crm_sync_outbox_rows", {
  description: "Outbox rows, by status"
})

/** Live rows of each warehouse table. */
export const resourceRows = Metric.gauge("crm_sync_resource_rows", {
  description: "Rows of each crm table that are not deleted"
})

/** When each warehouse table was last written, as Unix seconds (0: never). */
export const resourceLastSync = Metric.gauge("crm_sync_resource_last_sync_timestamp_seconds", {
  description: "Unix time of the latest write to each crm table"
})

/** 1 for a connection whose OAuth grant was refused (`invalid_grant`): someone must run `crm-sync connect`. */
export const connectionNeedsReauthorization = Metric.gauge("crm_sync_connection_needs_reauthorization", {
  description: "1 when the connection needs `crm-sync connect` again, else 0"
})

// ---------------------------------------------------------------------------------------------
// Lag (src/admin/LagState.ts, refreshed with the state gauges)
// ---------------------------------------------------------------------------------------------

/** When each scheduled job of each connection last succeeded, as Unix seconds (0: never). */
export const jobLastSuccess = Metric.gauge("crm_sync_job_last_success_timestamp_seconds", {
  description: "Unix time of the end of the job's last successful run, by job and connection (0: never)"
})

/** The job's schedule, so that an alert can say "overdue" without knowing the config. */
export const jobInterval = Metric.gauge("crm_sync_job_interval_seconds", {
  description: "Seconds between runs the job's schedule asks for, by job and connection"
})

/** Failed runs since the job's last success. */
export const jobFailures = Metric.gauge("crm_sync_job_failures_since_success", {
  description: "Failed runs of the job since its last successful one, by job and connection"
})

/** Each poll cursor (the latest `updated_at` the poll has safely seen), as Unix seconds. */
export const cursorTimestamp = Metric.gauge("crm_sync_cursor_timestamp_seconds", {
  description: "Unix time of each poll cursor, by connection and resource"
})

/** When each configured endpoint last stored a delivery, as Unix seconds (0: none in the inbox). */
export const webhookLastDelivery = Metric.gauge("crm_sync_webhook_last_delivery_timestamp_seconds", {
  description: "Unix time of the latest delivery stored for each webhook endpoint (0: none kept)"
})

/** The latest refused delivery per endpoint and reason (crm_sync.webhook_refusals, a day back), as Unix seconds. */
export const webhookLastRefusal = Metric.gauge("crm_sync_webhook_last_refusal_timestamp_seconds", {
  description: "Unix time of the latest delivery refused on each webhook endpoint, by reason (within a day)"
})

/** When the connection's webhook subscription was made (or last changed state), as Unix seconds. */
export const webhookSubscribedAt = Metric.gauge("crm_sync_webhook_subscribed_timestamp_seconds", {
  description: "Unix time the connection's webhook subscription was made or last changed state (0: none)"
})

/** Records the warehouse refused, kept in crm_sync.undecodable_records. */
export const undecodableRecords = Metric.gauge("crm_sync_undecodable_records", {
  description: "Records kept in crm_sync.undecodable_records, by resource"
})

/** 1 while the connection's webhook subscription is the one crm-sync made; 0 once found gone or uncheckable. */
export const webhookSubscriptionOk = Metric.gauge("crm_sync_webhook_subscription_ok", {
  description: "1 when the daily check found the connection's webhook subscription unchanged, else 0"
})

// ---------------------------------------------------------------------------------------------
// The hour's plan (src/budget/Plan.ts, refreshed with the state gauges)
// ---------------------------------------------------------------------------------------------

/** 1 when a connection's schedules fit its strictest bucket, 0 when `crm-sync plan` warns. */
export const planFits = Metric.gauge("crm_sync_plan_fits", {
  description: "1 when the connection's schedules fit its rate budget (crm-sync plan), else 0"
})

/** How long a full crawl of a resource takes at the budget it gets. */
export const planFullCrawlSeconds = Metric.gauge("crm_sync_plan_full_crawl_seconds", {
  description: "Seconds one full crawl of the resource takes at the budget left for crawls"
})

// ---------------------------------------------------------------------------------------------
// The process (src/observability/RuntimeMetrics.ts, sampled every 10 seconds)
// ---------------------------------------------------------------------------------------------

/** Resident memory of this process: the figure the container's memory limit counts. */
export const processResidentMemory = Metric.gauge("crm_sync_process_resident_memory_bytes", {
  description: "Resident memory of the crm-sync process, in bytes"
})

/** V8 heap in use. */
export const processHeapUsed = Metric.gauge("crm_sync_process_heap_used_bytes", {
  description: "V8 heap in use by the crm-sync process, in bytes"
})

/** How late the event loop ran timers over the last interval: the 99th percentile and the worst. */
export const eventLoopDelay = Metric.gauge("crm_sync_event_loop_delay_seconds", {
  description: "Event-loop delay of the crm-sync process over the last 10 s, by quantile (0.99, max)"
})
