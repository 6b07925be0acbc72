/**
 * Lag can be observed: the daily subscription check finds a webhook subscription that vanished
 * behind crm-sync's back (another process unsubscribed; the check's POST creates a new one), says
 * so in crm_sync.webhook_subscriptions and in /metrics; and the state gauges export the last
 * successful run and failures of each job, the poll cursor, the last delivery and the last refused
 * delivery per endpoint, when the subscription was made, and the records the warehouse refused.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { FetchHttpClient } from "effect/http"
import * as PrometheusMetrics from "effect/observability/PrometheusMetrics"
import { SqlClient } from "effect/sql/SqlClient"
import { RateBudget } from "../../src/budget/RateBudget.ts"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { CrmClient } from "../../src/crm/CrmClient.ts"
import { Credentials } from "../../src/crm/Credentials.ts"
import { refresh } from "../../src/admin/StateMetrics.ts"
import { Sandbox } from "@crm-sync/sandbox"
import { check, subscribe, unsubscribe } from "../../src/webhooks/Subscriptions.ts"
import { DatabaseInfo } from "../../src/warehouse/Database.ts"
import { TestDatabase } from "../support/TestDatabase.ts"

const SandboxLive = Sandbox.layer({ records: 60, seed: 5 })

const Config = Layer.unwrap(
  Effect.gen(function* () {
    const sandbox = yield* Sandbox
    const { oauthClientId, userId, companyId } = sandbox.credentials
    const oauth = yield* sandbox.admin.connect({ clientId: oauthClientId, userId, companyId })
    return AppConfig.layerFrom({
      connections: [{ name: "firm", base_url: sandbox.baseUrl, credential: "oauth", token: oauth.access_token }],
      webhooks: { endpoints: [{ name: "default", secrets: ["whsec_c2VjcmV0LWZvci10ZXN0cw=="] }] }
    })
  })
)

const TestLayer = Layer.mergeAll(
  RateBudget.layer,
  Credentials.layer,
  Layer.succeed(DatabaseInfo, { kind: "external", location: "the test database" })
).pipe(
  Layer.provideMerge(FetchHttpClient.layer),
  Layer.provideMerge(Config),
  Layer.provideMerge(TestDatabase),
  Layer.provideMerge(SandboxLive)
)

const checkFirm = Effect.flatMap(CrmClient.make("firm"), check)

/** The value of one series of /metrics, by its name and labels as Prometheus prints them. */
const metric = (text: string, series: string) => {
  const line = text.split("\n").find((candidate) => candidate.startsWith(`${series} `))
  return line === undefined ? undefined : Number(line.slice(series.length + 1))
}

const storedRow = Effect.gen(function* () {
  const sql = yield* SqlClient
  const [row] = yield* sql<{ state: string; subscription_id: string; previous_id: string | null; detail: string }>`
    SELECT state, subscription_id, previous_id, detail FROM crm_sync.webhook_subscriptions WHERE connection = 'firm'`
  return row
})

layer(TestLayer, { excludeTestServices: true, timeout: 60_000 })("subscription check and lag metrics", (it) => {
  it.effect("a subscription removed behind crm-sync's back is found by the check and exported", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      const sql = yield* SqlClient

      // Never subscribed through crm-sync: the check leaves the connection alone (sends nothing).
      assert.strictEqual((yield* checkFirm).state, "skipped")
      assert.lengthOf(yield* sandbox.admin.subscriptions, 0)

      const subscribed = yield* subscribe("firm")
      const first = yield* checkFirm
      assert.deepInclude(first, { state: "present", subscription_id: subscribed.subscription.id })

      // Someone else removes the subscription with the same grant (spec §3: DELETE, 204).
      const token = (yield* sandbox.admin.connect({ ...connectionOf(sandbox) })).access_token
      yield* Effect.promise(() =>
        fetch(`${sandbox.baseUrl}/v1/webhook_subscription`, {
          method: "DELETE",
          headers: { authorization: `Bearer ${token}` }
        })
      )
      const found = yield* checkFirm
      assert.strictEqual(found.state, "replaced")
      assert.strictEqual(found.previous_id, subscribed.subscription.id)
      assert.notStrictEqual(found.subscription_id, subscribed.subscription.id)
      const row = yield* storedRow
      assert.strictEqual(row!.state, "replaced")
      assert.include(row!.detail, "events in between were never sent")
      assert.lengthOf(yield* sandbox.admin.subscriptions, 1, "the check subscribed again")

      // A job that failed twice since its last success, a poll cursor, a delivery, a refused record.
      yield* sql`
        INSERT INTO crm_sync.job_runs (job, connection, status, started_at, finished_at) VALUES
          ('poll:businesses', 'firm', 'succeeded', now() - interval '20 minutes', '2026-01-02T03:04:05Z'),
          ('poll:businesses', 'firm', 'failed', now() - interval '10 minutes', now() - interval '10 minutes'),
          ('poll:businesses', 'firm', 'failed', now() - interval '5 minutes', now() - interval '5 minutes')`
      yield* sql`
        INSERT INTO crm_sync.cursors (connection, resource, cursor) VALUES ('firm', 'businesses', '2026-01-01T00:00:00Z')`
      yield* sql`
        INSERT INTO crm_sync.webhook_inbox (hook_id, endpoint, received_at, body, status)
        VALUES ('msg_lag', 'default', '2026-01-03T00:00:00Z', convert_to('{}', 'UTF8'), 'processed')`
      yield* sql`
        INSERT INTO crm_sync.undecodable_records (resource, record_id, raw, error, source)
        VALUES ('tasks', 't1', '{"id": "t1"}', 'updated_at: Expected a timestamp', 'webhook')`
      // Deliveries refused on an endpoint (as the intake records them), for the alert on refusals.
      yield* sql`
        INSERT INTO crm_sync.webhook_refusals (endpoint, reason, count, first_at, last_at)
        VALUES ('default', 'bad_signature', 3, now() - interval '10 minutes', now() - interval '1 minute')`

      yield* refresh
      const text = yield* PrometheusMetrics.format()
      assert.strictEqual(metric(text, 'crm_sync_webhook_subscription_ok{connection="firm"}'), 0)
      const job = '{job="poll:businesses",connection="firm"}'
      assert.strictEqual(
        metric(text, `crm_sync_job_last_success_timestamp_seconds${job}`),
        Date.parse("2026-01-02T03:04:05Z") / 1000
      )
      assert.strictEqual(metric(text, `crm_sync_job_failures_since_success${job}`), 2)
      assert.strictEqual(metric(text, `crm_sync_job_interval_seconds${job}`), 300)
      assert.strictEqual(
        metric(text, 'crm_sync_job_last_success_timestamp_seconds{job="reconcile",connection="firm"}'),
        0
      )
      assert.strictEqual(
        metric(text, 'crm_sync_cursor_timestamp_seconds{connection="firm",resource="businesses"}'),
        Date.parse("2026-01-01T00:00:00Z") / 1000
      )
      assert.strictEqual(
        metric(text, 'crm_sync_webhook_last_delivery_timestamp_seconds{endpoint="default"}'),
        Date.parse("2026-01-03T00:00:00Z") / 1000
      )
      assert.strictEqual(metric(text, 'crm_sync_undecodable_records{resource="tasks"}'), 1)
      const [stored] = yield* sql<{ last: number; subscribed: number }>`
        SELECT floor(extract(epoch FROM r.last_at))::float8 AS last, floor(extract(epoch FROM s.changed_at))::float8 AS subscribed
        FROM crm_sync.webhook_refusals r, crm_sync.webhook_subscriptions s`
      assert.strictEqual(
        metric(text, 'crm_sync_webhook_last_refusal_timestamp_seconds{endpoint="default",reason="bad_signature"}'),
        stored!.last
      )
      assert.strictEqual(
        metric(text, 'crm_sync_webhook_subscribed_timestamp_seconds{connection="firm"}'),
        stored!.subscribed
      )

      // The next check finds the new subscription unchanged; unsubscribing on purpose stops the checks.
      assert.strictEqual((yield* checkFirm).state, "present")
      yield* refresh
      assert.strictEqual(
        metric(yield* PrometheusMetrics.format(), 'crm_sync_webhook_subscription_ok{connection="firm"}'),
        1
      )
      yield* unsubscribe("firm")
      assert.strictEqual((yield* checkFirm).state, "skipped")
      assert.lengthOf(yield* sandbox.admin.subscriptions, 0)
    })
  )
})

const connectionOf = (sandbox: Sandbox["Service"]) => ({
  clientId: sandbox.credentials.oauthClientId,
  userId: sandbox.credentials.userId,
  companyId: sandbox.credentials.companyId
})
