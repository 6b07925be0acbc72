/**
 * A wrong signing secret is loud (issue 33, point 3). The CRM sends `client.created` (which carries
 * no `event_type`, spec §6.3) to the endpoint filtered to it and a copy to the all-types endpoint.
 * With the typed endpoint's secret wrong, every copy there is refused with 401: the operator gets
 * one WARN line for the endpoint (not one per delivery), `status` (and `/status`, the page) counts
 * the refusals by endpoint and reason, the copies on the all-types endpoint go dead with a reason
 * that names the secret, and `webhooks replay --dead` leaves them alone instead of sending them
 * straight back to dead.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer, Logger } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { renderStatusPage } from "../../src/admin/StatusPage.ts"
import { renderStatus, statusReport } from "../../src/admin/StatusReport.ts"
import { Warehouse } from "../../src/warehouse/Warehouse.ts"
import { EventProcessor, replay } from "../../src/webhooks/EventProcessor.ts"
import { TranscriptReader } from "../../src/webhooks/TranscriptReader.ts"
import { WebhookInbox } from "../../src/webhooks/WebhookInbox.ts"
import { eventFixtureText } from "../fixtures/Fixtures.ts"
import { TestDatabase } from "../support/TestDatabase.ts"
import { deliver, hookId, IntakeServer, makeSecret } from "./harness.ts"

const allTypes = makeSecret()
const clientCreated = makeSecret()

/** Every line logged, as "LEVEL message". */
const logLines: Array<string> = []
const CapturedLogs = Logger.layer([
  Logger.make((options) => logLines.push(`${options.logLevel.toUpperCase()} ${String(options.message)}`))
])

const config = AppConfig.layerFrom({
  webhooks: {
    endpoints: [
      { name: "default", secrets: [allTypes] },
      { name: "client-created", secrets: [clientCreated], event_type: "client.created" }
    ]
  }
})

const NoTranscripts = Layer.succeed(
  TranscriptReader,
  TranscriptReader.of({ read: (_endpoint, meetingId) => Effect.succeed({ meeting_id: meetingId, transcript: null }) })
)

const TestLayer = EventProcessor.layerWith({ workerId: "wrong-secret" }).pipe(
  Layer.provide(Layer.mergeAll(Warehouse.layer, NoTranscripts)),
  Layer.provideMerge(WebhookInbox.layer),
  Layer.provideMerge(config),
  Layer.provideMerge(TestDatabase),
  Layer.provideMerge(CapturedLogs)
)

/**
 * Fourteen client.created events, each to both endpoints as the CRM sends them: the typed copy
 * signed with a secret the typed endpoint does not have. The intake runs in its own scope, whose
 * end (a shutdown) records what it refused.
 */
const fourteenDeliveries = Effect.gen(function* () {
  const body = eventFixtureText("client.created")
  const wrong = makeSecret()
  const statuses: Array<number> = []
  for (let i = 0; i < 14; i++) {
    const id = hookId()
    statuses.push((yield* deliver("client-created", wrong, body, id)).status)
    statuses.push((yield* deliver("default", allTypes, body, id)).status)
  }
  return statuses
}).pipe(Effect.provide(IntakeServer), Effect.scoped)

const deadRows = Effect.gen(function* () {
  const sql = yield* SqlClient
  return yield* sql<{ status: string; last_error: string | null }>`
    SELECT status, last_error FROM crm_sync.webhook_inbox WHERE endpoint = 'default' ORDER BY hook_id`
})

layer(TestLayer, { excludeTestServices: true, timeout: 60_000 })("a wrong webhook secret", (it) => {
  it.effect("is one WARN line, a count in status and on the page, a dead reason that names it", () =>
    Effect.gen(function* () {
      const statuses = yield* fourteenDeliveries
      assert.deepStrictEqual(
        statuses.filter((_, i) => i % 2 === 0),
        Array(14).fill(401)
      )
      assert.deepStrictEqual(
        statuses.filter((_, i) => i % 2 === 1),
        Array(14).fill(200)
      )

      // One WARN for the endpoint, saying what to check; not fourteen.
      const warnings = logLines.filter((line) => line.startsWith("WARN") && line.includes("client-created"))
      assert.lengthOf(warnings, 1, logLines.join("\n"))
      assert.include(warnings[0]!, "refused")
      assert.include(warnings[0]!, "webhooks.endpoints.client-created's signing secret")

      // `crm-sync status` (another process: it reads the database) and the page.
      const report = yield* statusReport(yield* AppConfig, { kind: "external", location: "the test database" })
      const text = renderStatus(report)
      assert.match(text, /endpoint client-created: 14 deliveries refused, bad signature, last (< 1 s|\d+ s) ago/)
      assert.deepInclude(report.webhook_refusals[0]!, {
        endpoint: "client-created",
        reason: "bad_signature",
        count: 14
      })
      const page = renderStatusPage(report, {
        now: report.generated_at,
        oldest_inbox_waiting: null,
        oldest_outbox_waiting: null,
        dead: [],
        outbox_problems: [],
        runs: []
      })
      assert.include(page, "endpoint client-created: 14 deliveries refused, bad signature")

      // The copies on the all-types endpoint: dead, with a reason that points at the secret.
      yield* (yield* EventProcessor).drain
      const dead = yield* deadRows
      assert.lengthOf(dead, 14)
      for (const row of dead) {
        assert.strictEqual(row.status, "dead")
        assert.include(row.last_error ?? "", "client-created")
        assert.include(row.last_error ?? "", "signing secret")
      }

      // Replaying them would make them dead again at once: they are left, and counted.
      const replayed = yield* replay({ _tag: "Dead" })
      assert.deepStrictEqual(replayed, { replayed: 0, leftDead: 14 })
      assert.isTrue((yield* deadRows).every((row) => row.status === "dead"))
    })
  )

  it.effect("once the secret is right, the CRM's retry completes the dead copy and it is applied", () =>
    Effect.gen(function* () {
      const body = eventFixtureText("client.created")
      const id = hookId()
      yield* Effect.gen(function* () {
        assert.strictEqual((yield* deliver("client-created", makeSecret(), body, id)).status, 401)
        assert.strictEqual((yield* deliver("default", allTypes, body, id)).status, 200)
      }).pipe(Effect.provide(IntakeServer), Effect.scoped)
      yield* (yield* EventProcessor).drain
      const sql = yield* SqlClient
      const [before] = yield* sql<{ status: string }>`SELECT status FROM crm_sync.webhook_inbox WHERE hook_id = ${id}`
      assert.strictEqual(before!.status, "dead")
      // The secret is fixed; the CRM retries the typed copy.
      yield* Effect.gen(function* () {
        assert.strictEqual((yield* deliver("client-created", clientCreated, body, id)).status, 200)
      }).pipe(Effect.provide(IntakeServer), Effect.scoped)
      yield* (yield* EventProcessor).drain
      const [after] = yield* sql<{ status: string }>`SELECT status FROM crm_sync.webhook_inbox WHERE hook_id = ${id}`
      assert.strictEqual(after!.status, "processed")
    })
  )
})
