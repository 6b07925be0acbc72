/**
 * The intake over real HTTP on loopback and a real PostgreSQL: what a sender sees (status codes)
 * and what ends up in `crm_sync.webhook_inbox` (or does not).
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { HttpClient, HttpClientRequest } from "effect/http"
import { SqlClient } from "effect/sql/SqlClient"
import { Stream } from "effect"
import { TestDatabase } from "../support/TestDatabase.ts"
import { configLayer, deliver, hookId, IntakeServer, makeSecret, post, signedHeaders } from "./harness.ts"

const primary = makeSecret()
const rotated = makeSecret()
const clients = makeSecret()

const config = configLayer({
  webhooks: {
    endpoints: [
      { name: "default", secrets: [primary] },
      { name: "rotating", secrets: [primary, rotated] },
      { name: "client-created", secrets: [clients], event_type: "client.created" }
    ],
    max_body_bytes: 4096
  }
})

const TestLayer = IntakeServer.pipe(Layer.provideMerge(config), Layer.provideMerge(TestDatabase))

const taskEvent = (id: string) =>
  JSON.stringify({
    event_type: "task.updated",
    id,
    book_id: "book_1",
    subscription_id: "sub_1",
    user_id: "user_1",
    company_id: "company_1",
    task: { id, title: "Call back", status: "todo", updated_at: "2024-05-01T12:00:00Z" }
  })

const inboxRow = (id: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const rows = yield* sql<{
      status: string
      event_type: string | null
      endpoint: string
      body: Uint8Array
      last_error: string | null
    }>`
      SELECT status, event_type, endpoint, body, last_error FROM crm_sync.webhook_inbox WHERE hook_id = ${id}`
    return rows[0]
  })

const inboxCount = Effect.gen(function* () {
  const sql = yield* SqlClient
  const rows = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM crm_sync.webhook_inbox`
  return rows[0]!.n
})

/**
 * A hook-timestamp `offset` seconds from now, read at the send: the wall clock moves between the
 * reading and the intake's check, so a slow machine must not carry a delivery back inside the window.
 */
const secondsFromNow = (offset: number) => Math.floor(Date.now() / 1000) + offset

/** Sends a delivery that must be refused and checks that the inbox did not grow. */
const refused = (expected: number, send: Effect.Effect<{ status: number; body: string }, unknown, any>) =>
  Effect.gen(function* () {
    const before = yield* inboxCount
    const response = yield* send
    assert.strictEqual(response.status, expected, response.body)
    assert.strictEqual(yield* inboxCount, before, "nothing stored")
    return JSON.parse(response.body) as { error: string }
  })

layer(TestLayer, { excludeTestServices: true })("WebhookIntake", (it) => {
  it.effect("stores a verified delivery byte for byte, pending, with its event type, and answers 200", () =>
    Effect.gen(function* () {
      const id = hookId()
      // Odd spacing on purpose: the stored body must be the signed bytes, not a re-serialization.
      const body = taskEvent("task_1").replace(`"id":`, `"id" :  `)
      const response = yield* deliver("default", primary, body, id)
      assert.strictEqual(response.status, 200)
      assert.deepStrictEqual(JSON.parse(response.body), { status: "accepted" })
      const row = yield* inboxRow(id)
      assert.strictEqual(row?.status, "pending")
      assert.strictEqual(row?.event_type, "task.updated")
      assert.strictEqual(row?.endpoint, "default")
      assert.strictEqual(Buffer.from(row!.body).toString("utf8"), body)
    })
  )

  it.effect("the same delivery three times in parallel: three 200s, one row", () =>
    Effect.gen(function* () {
      const id = hookId()
      const body = taskEvent("task_2")
      const headers = signedHeaders(primary, id, body)
      const responses = yield* Effect.all(
        [1, 2, 3].map(() => post("/webhooks/default", body, headers)),
        { concurrency: "unbounded" }
      )
      assert.deepStrictEqual(
        responses.map((response) => response.status),
        [200, 200, 200]
      )
      assert.deepStrictEqual(responses.map((response) => JSON.parse(response.body).status).toSorted(), [
        "accepted",
        "duplicate",
        "duplicate"
      ])
      const sql = yield* SqlClient
      const rows = yield* sql<{
        n: number
      }>`SELECT count(*)::int AS n FROM crm_sync.webhook_inbox WHERE hook_id = ${id}`
      assert.strictEqual(rows[0]!.n, 1)
      // A later redelivery is a duplicate too.
      const again = yield* post("/webhooks/default", body, headers)
      assert.strictEqual(again.status, 200)
      assert.strictEqual(JSON.parse(again.body).status, "duplicate")
    })
  )

  it.effect("a tampered body is 401 and stores nothing", () =>
    Effect.gen(function* () {
      const id = hookId()
      const body = taskEvent("task_3")
      const headers = signedHeaders(primary, id, body)
      const error = yield* refused(401, post("/webhooks/default", body.replace("Call back", "Call back!"), headers))
      assert.strictEqual(error.error, "bad_signature")
    })
  )

  it.effect("re-serialized JSON (same data, other bytes) is 401", () =>
    Effect.gen(function* () {
      const id = hookId()
      const body = JSON.stringify(JSON.parse(taskEvent("task_4")), null, 2)
      const headers = signedHeaders(primary, id, body)
      yield* refused(401, post("/webhooks/default", JSON.stringify(JSON.parse(body)), headers))
    })
  )

  it.effect("a wrong secret is 401", () =>
    Effect.gen(function* () {
      const error = yield* refused(401, deliver("default", makeSecret(), taskEvent("task_5")))
      assert.strictEqual(error.error, "bad_signature")
    })
  )

  it.effect("a stale or future timestamp is 401, even with a valid signature", () =>
    Effect.gen(function* () {
      // A minute past the five minutes either side: the exact second of the boundary is
      // WebhookSignature.test's, on a fixed clock.
      const stale = yield* refused(
        401,
        Effect.suspend(() =>
          deliver("default", primary, taskEvent("task_6"), hookId(), { timestamp: secondsFromNow(-360) })
        )
      )
      assert.strictEqual(stale.error, "stale_timestamp")
      const future = yield* refused(
        401,
        Effect.suspend(() =>
          deliver("default", primary, taskEvent("task_6"), hookId(), { timestamp: secondsFromNow(360) })
        )
      )
      assert.strictEqual(future.error, "stale_timestamp")
      // Within the five minutes either side is fine.
      const skewed = yield* Effect.suspend(() =>
        deliver("default", primary, taskEvent("task_6"), hookId(), { timestamp: secondsFromNow(-240) })
      )
      assert.strictEqual(skewed.status, 200)
    })
  )

  it.effect("a missing or malformed header is 400", () =>
    Effect.gen(function* () {
      const id = hookId()
      const body = taskEvent("task_7")
      const { "hook-signature": _signature, ...withoutSignature } = signedHeaders(primary, id, body)
      const missing = yield* refused(400, post("/webhooks/default", body, withoutSignature))
      assert.strictEqual(missing.error, "missing_header")
      const badTimestamp = yield* refused(
        400,
        post("/webhooks/default", body, { ...signedHeaders(primary, id, body), "hook-timestamp": "yesterday" })
      )
      assert.strictEqual(badTimestamp.error, "malformed_header")
      const badSignature = yield* refused(
        400,
        post("/webhooks/default", body, { ...signedHeaders(primary, id, body), "hook-signature": "not a signature" })
      )
      assert.strictEqual(badSignature.error, "malformed_header")
    })
  )

  it.effect("an oversize body is 413, whether declared by Content-Length or streamed without one", () =>
    Effect.gen(function* () {
      const body = JSON.stringify({ event_type: "note.updated", padding: "x".repeat(5000) })
      const declared = yield* refused(413, deliver("default", primary, body))
      assert.strictEqual(declared.error, "body_too_large")

      // Chunked: no Content-Length, so only counting the bytes as they arrive can catch it.
      const id = hookId()
      const client = yield* HttpClient.HttpClient
      const bytes = new TextEncoder().encode(body)
      const chunks = [bytes.subarray(0, 2000), bytes.subarray(2000, 4000), bytes.subarray(4000)]
      const streamed = yield* refused(
        413,
        client
          .execute(
            HttpClientRequest.post("/webhooks/default").pipe(
              HttpClientRequest.setHeaders(signedHeaders(primary, id, body)),
              HttpClientRequest.bodyStream(Stream.fromIterable(chunks), { contentType: "application/json" })
            )
          )
          .pipe(
            Effect.flatMap((response) => Effect.map(response.text, (text) => ({ status: response.status, body: text })))
          )
      )
      assert.strictEqual(streamed.error, "body_too_large")
    })
  )

  it.effect("svix-* and webhook-* headers are accepted like hook-*", () =>
    Effect.gen(function* () {
      for (const prefix of ["svix-", "webhook-"]) {
        const id = hookId()
        const response = yield* deliver("default", primary, taskEvent("task_8"), id, { prefix })
        assert.strictEqual(response.status, 200, prefix)
        assert.strictEqual((yield* inboxRow(id))?.status, "pending")
      }
    })
  )

  it.effect("during a rotation a delivery signed by either secret is accepted", () =>
    Effect.gen(function* () {
      assert.strictEqual((yield* deliver("rotating", primary, taskEvent("task_9"))).status, 200)
      assert.strictEqual((yield* deliver("rotating", rotated, taskEvent("task_9"))).status, 200)
      // The endpoint's secrets only: the rotated secret is not valid on `default`.
      yield* refused(401, deliver("default", rotated, taskEvent("task_9")))
    })
  )

  it.effect("an unknown endpoint is 404", () =>
    Effect.gen(function* () {
      const error = yield* refused(404, deliver("nope", primary, taskEvent("task_10")))
      assert.strictEqual(error.error, "unknown_endpoint")
    })
  )

  it.effect("an endpoint's fixed event type names events that carry none (client.created)", () =>
    Effect.gen(function* () {
      const id = hookId()
      const body = JSON.stringify({ id: "client_1", name: "Ada", status: "active", type: "client", book_id: "book_1" })
      assert.strictEqual((yield* deliver("client-created", clients, body, id)).status, 200)
      assert.strictEqual((yield* inboxRow(id))?.event_type, "client.created")
    })
  )

  it.effect("a signed body that is not JSON is stored dead with its error, and answered 200", () =>
    Effect.gen(function* () {
      const id = hookId()
      const response = yield* deliver("default", primary, "{not json", id)
      assert.strictEqual(response.status, 200)
      assert.strictEqual(JSON.parse(response.body).status, "not_json")
      const row = yield* inboxRow(id)
      assert.strictEqual(row?.status, "dead")
      assert.include(row?.last_error ?? "", "not JSON")
    })
  )

  it.effect("/healthz, /readyz and /metrics answer, and refusals are counted by reason", () =>
    Effect.gen(function* () {
      const client = yield* HttpClient.HttpClient
      assert.strictEqual((yield* client.get("/healthz")).status, 200)
      assert.strictEqual((yield* client.get("/readyz")).status, 200)
      const metrics = yield* Effect.flatMap(client.get("/metrics"), (response) => response.text)
      assert.match(metrics, /crm_sync_webhook_deliveries_total\{[^}]*result="bad_signature"[^}]*\} [1-9]/)
      assert.match(metrics, /crm_sync_webhook_deliveries_total\{[^}]*result="body_too_large"[^}]*\} [1-9]/)
      assert.match(metrics, /crm_sync_webhook_deliveries_total\{[^}]*result="accepted"[^}]*\} [1-9]/)
      assert.match(metrics, /crm_sync_webhook_ack_seconds_bucket/)
    })
  )
})
