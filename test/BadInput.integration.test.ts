/**
 * Every bad input gets a clear error and changes nothing: one row per case, grouped by where the
 * input comes from — webhook requests (each signature failure, size, encoding, JSON depth, header
 * floods), config values, outbox payloads, and malformed API responses (an HTML page, an empty or
 * cut body, an envelope that lies about its totals, a record with wrong types). After each row the
 * part that received it still works: a good delivery is applied, a good page is read.
 */
import { NodeHttpServer } from "@effect/platform-node"
import { assert, describe, it, layer } from "@effect/vitest"
import { Effect, Exit, Layer, Result } from "effect"
import { FetchHttpClient, HttpClient, HttpClientRequest } from "effect/http"
import { SqlClient } from "effect/sql/SqlClient"
import { createHmac } from "node:crypto"
import { createServer, type Server } from "node:http"
import { RateBudget } from "../src/budget/RateBudget.ts"
import { AppConfig, decodeDocument } from "../src/config/AppConfig.ts"
import { CrmClient } from "../src/crm/CrmClient.ts"
import { Credentials } from "../src/crm/Credentials.ts"
import { decodePayload } from "../src/outbound/OutboundWriter.ts"
import { PageCrawler } from "../src/sync/PageCrawler.ts"
import { SyncServicesLive } from "../src/sync/SyncJobs.ts"
import { Warehouse } from "../src/warehouse/Warehouse.ts"
import { EventProcessor, EventProcessorLive } from "../src/webhooks/EventProcessor.ts"
import { TranscriptReader } from "../src/webhooks/TranscriptReader.ts"
import { eventFixtureText } from "./fixtures/Fixtures.ts"
import { TestDatabase } from "./support/TestDatabase.ts"
import { deliver, hookId, IntakeServer, makeSecret, post, signedHeaders } from "./webhooks/harness.ts"

const options = { timeout: 60_000, excludeTestServices: true } as const

// ---------------------------------------------------------------------------------------------
// Webhook requests
// ---------------------------------------------------------------------------------------------

const secret = makeSecret()
const otherSecret = makeSecret()
const MAX_BODY = 4096
const task = eventFixtureText("task.created")
const now = () => Math.floor(Date.now() / 1000)

interface WebhookCase {
  readonly name: string
  /** The request: path, body, headers. */
  readonly request: () => { path: string; body: string | Uint8Array; headers: Record<string, string> }
  readonly status: number
  /** Whether the delivery is kept (a signed body that is not JSON: stored `dead`, answered 2xx). */
  readonly stored?: "dead" | "unapplied"
  readonly error?: string
}

/** Standard Webhooks' signature over the exact bytes (a sender that signs what it sends). */
const signBytes = (key: string, id: string, timestamp: number, body: Uint8Array) =>
  `v1,${createHmac("sha256", Buffer.from(key.slice("whsec_".length), "base64"))
    .update(Buffer.concat([Buffer.from(`${id}.${timestamp}.`), body]))
    .digest("base64")}`

const signed = (body: string | Uint8Array, options: { id?: string; timestamp?: number; key?: string } = {}) => {
  const id = options.id ?? hookId()
  const timestamp = options.timestamp ?? now()
  const key = options.key ?? secret
  const headers =
    typeof body === "string"
      ? signedHeaders(key, id, body, { timestamp })
      : { "hook-id": id, "hook-timestamp": String(timestamp), "hook-signature": signBytes(key, id, timestamp, body) }
  return { path: "/webhooks/default", body, headers }
}

const webhookCases: ReadonlyArray<WebhookCase> = [
  {
    name: "no signature headers at all",
    request: () => ({ path: "/webhooks/default", body: task, headers: {} }),
    status: 400,
    error: "missing_header"
  },
  {
    name: "a timestamp that is not a number",
    request: () => {
      const request = signed(task)
      return { ...request, headers: { ...request.headers, "hook-timestamp": "yesterday" } }
    },
    status: 400,
    error: "malformed_header"
  },
  {
    name: "a signature header without a v1 signature",
    request: () => {
      const request = signed(task)
      return { ...request, headers: { ...request.headers, "hook-signature": "v0,bm90LWEtc2lnbmF0dXJl" } }
    },
    status: 401,
    error: "bad_signature"
  },
  {
    name: "signed with another secret",
    request: () => signed(task, { key: otherSecret }),
    status: 401,
    error: "bad_signature"
  },
  {
    name: "a body changed after signing",
    request: () => {
      const request = signed(task)
      return { ...request, body: task.replace("task.created", "task.deleted") }
    },
    status: 401,
    error: "bad_signature"
  },
  {
    name: "a timestamp ten minutes old",
    request: () => signed(task, { timestamp: now() - 600 }),
    status: 401,
    error: "stale_timestamp"
  },
  {
    name: "a timestamp ten minutes ahead",
    request: () => signed(task, { timestamp: now() + 600 }),
    status: 401,
    error: "stale_timestamp"
  },
  {
    name: "a body over max_body_bytes",
    request: () => signed(JSON.stringify({ event_type: "task.created", padding: "x".repeat(MAX_BODY) })),
    status: 413,
    error: "body_too_large"
  },
  {
    name: "an endpoint that does not exist",
    request: () => ({ ...signed(task), path: "/webhooks/nope" }),
    status: 404
  },
  {
    name: "a header flood (64 KB of headers)",
    request: () => {
      const request = signed(task)
      const flood: Record<string, string> = {}
      for (let i = 0; i < 64; i++) flood[`x-flood-${i}`] = "y".repeat(1000)
      return { ...request, headers: { ...request.headers, ...flood } }
    },
    status: 431
  },
  {
    name: "a signed body that is not UTF-8",
    request: () => signed(new Uint8Array([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d])),
    status: 200,
    stored: "dead"
  },
  {
    name: "a signed body that is not JSON",
    request: () => signed("<html>not json</html>"),
    status: 200,
    stored: "dead"
  },
  {
    name: "signed JSON nested 1,500 deep",
    request: () => signed(`{"event_type":"task.created","task":${"[".repeat(1500)}${"]".repeat(1500)}}`),
    status: 200,
    stored: "dead"
  }
]

const webhookConfig = AppConfig.layerFrom({
  webhooks: { endpoints: [{ name: "default", secrets: [secret] }], max_body_bytes: MAX_BODY }
})
const NoTranscripts = Layer.succeed(
  TranscriptReader,
  TranscriptReader.of({ read: (_endpoint, meetingId) => Effect.succeed({ meeting_id: meetingId, transcript: null }) })
)
const WebhookWorld = EventProcessorLive.pipe(
  Layer.provideMerge(EventProcessor.layerWith({ workerId: "bad-input", pollInterval: "200 millis" })),
  Layer.provide(Layer.mergeAll(Warehouse.layer, NoTranscripts)),
  Layer.provideMerge(IntakeServer),
  Layer.provideMerge(webhookConfig),
  Layer.provideMerge(TestDatabase)
)

const counts = Effect.gen(function* () {
  const sql = yield* SqlClient
  const [row] = yield* sql<{ inbox: number; tasks: number }>`
    SELECT (SELECT count(*)::int FROM crm_sync.webhook_inbox) AS inbox, (SELECT count(*)::int FROM crm.tasks) AS tasks`
  return row!
})

const statusOf = (hook: string) =>
  Effect.map(
    Effect.flatMap(
      SqlClient,
      (sql) => sql<{ status: string }>`SELECT status FROM crm_sync.webhook_inbox WHERE hook_id = ${hook}`
    ),
    (rows) => rows[0]?.status
  )

/** A good delivery after the bad one is accepted and applied: the intake and processor are healthy. */
const stillHealthy = Effect.gen(function* () {
  const id = hookId()
  const body = task.replace(/"id":\s*"([^"]+)"/, `"id": "task_${id}"`)
  const answer = yield* deliver("default", secret, body, id)
  assert.strictEqual(answer.status, 200)
  for (let i = 0; i < 300; i++) {
    if ((yield* statusOf(id)) === "processed") return
    yield* Effect.sleep("50 millis")
  }
  assert.fail("a good delivery after the bad one was not applied")
})

const sendRaw = (request: { path: string; body: string | Uint8Array; headers: Record<string, string> }) =>
  post(request.path, request.body, request.headers).pipe(
    // A request Node's parser refuses outright (431) can end the connection without a body.
    Effect.catch(() =>
      Effect.gen(function* () {
        const client = yield* HttpClient.HttpClient
        const response = yield* client.execute(
          HttpClientRequest.post(request.path).pipe(HttpClientRequest.setHeaders(request.headers))
        )
        return { status: response.status, body: "" }
      })
    )
  )

layer(WebhookWorld, options)("bad webhook requests", (it) => {
  for (const row of webhookCases) {
    it.effect(
      `${row.name}: ${row.status}${row.stored === undefined ? ", nothing stored" : `, stored ${row.stored}`}`,
      () =>
        Effect.gen(function* () {
          const before = yield* counts
          const request = row.request()
          const answer = yield* sendRaw(request)
          assert.strictEqual(answer.status, row.status)
          if (row.error !== undefined) assert.include(answer.body, row.error)
          const after = yield* counts
          if (row.stored === undefined) {
            assert.deepStrictEqual(after, before, "nothing stored, nothing applied")
          } else {
            assert.strictEqual(after.inbox, before.inbox + 1)
            const hook = request.headers["hook-id"]!
            if (row.stored === "dead") assert.strictEqual(yield* statusOf(hook), "dead")
            else {
              for (let i = 0; i < 100 && (yield* statusOf(hook)) === "pending"; i++) yield* Effect.sleep("50 millis")
              assert.include(["dead", "unhandled", "failed"], yield* statusOf(hook))
            }
            assert.strictEqual(after.tasks, before.tasks, "nothing applied to the warehouse")
          }
          yield* stillHealthy
        })
    )
  }
})

// ---------------------------------------------------------------------------------------------
// Config values
// ---------------------------------------------------------------------------------------------

const connection = (fields: Record<string, unknown> = {}) => ({
  connections: [{ name: "x", base_url: "https://crm.test", credential: "personal", token: "t", ...fields }]
})

const oauthConnection = (oauth: Record<string, unknown>) => ({
  connections: [
    {
      name: "x",
      base_url: "https://crm.test",
      credential: "oauth",
      oauth: {
        client_id: "id",
        client_secret: "secret",
        auth_url: "https://crm.test/oauth/authorize",
        token_url: "https://crm.test/oauth/token",
        ...oauth
      }
    }
  ]
})

const configCases: ReadonlyArray<{ name: string; document: Record<string, unknown>; key: string }> = [
  { name: "a port that is not a number", document: { webhook_port: "eighty" }, key: "webhook_port" },
  {
    name: "a base_url that is not http(s)",
    document: connection({ base_url: "ftp://crm.test" }),
    key: "connections[0].base_url"
  },
  {
    name: "a signing secret without whsec_",
    document: { webhooks: { endpoints: [{ name: "default", secrets: ["plain-text"] }] } },
    key: "webhooks.endpoints[0].secrets[0]"
  },
  { name: "a schedule of zero seconds", document: { schedules: { crawl: "0 seconds" } }, key: "schedules.crawl" },
  { name: "a share above 1", document: { sync: { deletion_threshold: 1.5 } }, key: "sync.deletion_threshold" },
  { name: "a key crm-sync does not know", document: { webhook_prot: 8080 }, key: "webhook_prot" },
  {
    name: "two connections with one name",
    document: { connections: [connection().connections[0], connection().connections[0]] },
    key: "connections[1].name"
  },
  {
    name: "an OAuth token_url over plain http to another host",
    document: oauthConnection({ token_url: "http://auth.example.com/token" }),
    key: "connections[0].oauth.token_url"
  },
  {
    name: "an OAuth redirect_uri that is not this machine",
    document: oauthConnection({ redirect_uri: "https://crm-sync.example.com/oauth/callback" }),
    key: "connections[0].oauth.redirect_uri"
  },
  {
    name: "a tolerance longer than the retention",
    document: { webhooks: { tolerance: "2 days", retention: "1 day" } },
    key: "webhooks.tolerance"
  }
]

describe("bad config values", () => {
  for (const row of configCases) {
    it.effect(`${row.name}: refused, naming ${row.key}`, () =>
      Effect.gen(function* () {
        const exit = yield* Effect.exit(decodeDocument(row.document))
        assert.isTrue(Exit.isFailure(exit))
        const error = yield* Effect.flip(decodeDocument(row.document))
        assert.strictEqual(error.key, row.key)
        assert.notInclude(error.message, "\n")
      })
    )
  }
})

// ---------------------------------------------------------------------------------------------
// Outbox payloads
// ---------------------------------------------------------------------------------------------

const payloadCases: ReadonlyArray<{ name: string; operation: string; payload: unknown; says: string }> = [
  { name: "an operation that does not exist", operation: "contact.delete", payload: {}, says: "unknown operation" },
  {
    name: "a prospect without last_name",
    operation: "prospect.create",
    payload: { book_id: "b1", first_name: "Ada" },
    says: "payload.last_name"
  },
  {
    name: "a contact whose first_name is a number",
    operation: "contact.create",
    payload: { book_id: "b1", first_name: 7 },
    says: "payload.first_name"
  },
  { name: "a payload that is an array", operation: "contact.create", payload: [1, 2], says: "payload" },
  {
    name: "a field the operation does not take",
    operation: "prospect.create",
    payload: { book_id: "b1", first_name: "A", last_name: "B", admin: true },
    says: "payload.admin"
  }
]

describe("bad outbox payloads", () => {
  for (const row of payloadCases) {
    it(`${row.name}: refused before anything is sent (${row.says})`, () => {
      const decoded = decodePayload(row.operation, row.payload)
      assert.isTrue(Result.isFailure(decoded))
      if (Result.isFailure(decoded)) assert.include(decoded.failure, row.says)
    })
  }
})

// ---------------------------------------------------------------------------------------------
// Malformed API responses, from a CRM that answers whatever the row says
// ---------------------------------------------------------------------------------------------

interface Canned {
  status: number
  contentType: string
  body: string
}
let canned: Canned | undefined
const goodBusiness = (id: string) => ({ id, name: `Business ${id}`, updated_at: "2026-01-01T00:00:00Z", book_id: "b1" })
const envelope = (data: ReadonlyArray<unknown>, total = data.length, totalPages = 1) =>
  JSON.stringify({ data, pagination: { current_page: 1, per_page: 100, total_count: total, total_pages: totalPages } })
const good: Canned = { status: 200, contentType: "application/json", body: envelope([goodBusiness("b-good")]) }

const CannedCrm = Layer.unwrap(
  Effect.gen(function* () {
    const server: Server = createServer((_request, response) => {
      const answer = canned ?? good
      response.writeHead(answer.status, { "content-type": answer.contentType })
      response.end(answer.body)
    })
    yield* Effect.acquireRelease(
      Effect.promise(() => new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))),
      () => Effect.promise(() => new Promise<void>((resolve) => server.close(() => resolve())))
    )
    const port = (server.address() as { port: number }).port
    return AppConfig.layerFrom({
      connections: [
        {
          name: "canned",
          base_url: `http://127.0.0.1:${port}`,
          credential: "personal",
          token: "pat_canned",
          limits: { token: 1_000_000, company: 1_000_000, ip: 1_000_000 },
          request_timeout: "2 seconds"
        }
      ]
    })
  })
)

const ApiWorld = SyncServicesLive.pipe(
  Layer.provideMerge(Warehouse.layer),
  Layer.provideMerge(
    Layer.mergeAll(RateBudget.layer, Credentials.layer).pipe(Layer.provideMerge(FetchHttpClient.layer))
  ),
  Layer.provideMerge(CannedCrm),
  Layer.provideMerge(TestDatabase),
  Layer.provide(NodeHttpServer.layerTest)
)

const listOnce = Effect.flatMap(CrmClient.make("canned"), (client) => client.listBusinesses({ page: 1, per_page: 100 }))

const responseCases: ReadonlyArray<{ name: string; answer: Canned; says: string }> = [
  {
    name: "an HTML error page with 200",
    answer: { status: 200, contentType: "text/html", body: "<html><body>Maintenance</body></html>" },
    says: "is not JSON"
  },
  {
    name: "an empty body with 200",
    answer: { status: 200, contentType: "application/json", body: "" },
    says: "is not JSON"
  },
  {
    name: "a body cut short",
    answer: { status: 200, contentType: "application/json", body: envelope([goodBusiness("b1")]).slice(0, 40) },
    says: "is not JSON"
  },
  {
    name: "an envelope without pagination",
    answer: { status: 200, contentType: "application/json", body: JSON.stringify({ data: [] }) },
    says: "does not have the documented shape"
  },
  {
    name: "a 500 with an HTML body",
    answer: { status: 500, contentType: "text/html", body: "<h1>Internal Server Error</h1>" },
    says: "the CRM failed (500)"
  }
]

layer(ApiWorld, options)("malformed API responses", (it) => {
  for (const row of responseCases) {
    it.effect(`${row.name}: a clear error (${row.says}), then the next good page reads`, () =>
      Effect.gen(function* () {
        canned = row.answer
        const error = yield* Effect.flip(listOnce)
        canned = undefined
        assert.include(error.message, row.says)
        const page = yield* listOnce
        assert.strictEqual(page.data.length, 1)
      })
    )
  }

  it.effect("a record with wrong types: kept aside in undecodable_records, the others stored", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      canned = {
        status: 200,
        contentType: "application/json",
        body: envelope([goodBusiness("b-ok"), { id: "b-bad", name: 42, updated_at: "not a date" }])
      }
      const crawler = yield* PageCrawler
      const summary = yield* crawler.crawl(yield* CrmClient.make("canned"), "businesses", { source: "crawl" })
      canned = undefined
      assert.strictEqual(summary.rejected, 1)
      const [kept] = yield* sql<{ error: string }>`
        SELECT error FROM crm_sync.undecodable_records WHERE resource = 'businesses' AND record_id = 'b-bad'`
      assert.isDefined(kept)
      const live = yield* sql<{ id: string }>`SELECT id FROM crm.businesses WHERE deleted_at IS NULL`
      assert.deepInclude(live, { id: "b-ok" })
    })
  )

  it.effect("a listing whose envelope promises 250 records and holds none: no absence counted, nothing deleted", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const crawler = yield* PageCrawler
      const client = yield* CrmClient.make("canned")
      const crawl = crawler.crawl(client, "businesses", { source: "crawl" })
      // Two honest crawls first: b-ok and b-good are tracked.
      canned = {
        status: 200,
        contentType: "application/json",
        body: envelope([goodBusiness("b-ok"), goodBusiness("b-good")])
      }
      yield* crawl
      yield* crawl
      // Then two crawls whose first page is empty while it says 250 records on 3 pages.
      canned = { status: 200, contentType: "application/json", body: envelope([], 250, 3) }
      const lying = yield* crawl
      yield* crawl
      canned = undefined
      assert.include(lying.note ?? "", "total_count said 250")
      const live = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM crm.businesses WHERE deleted_at IS NULL`
      assert.isAtLeast(live[0]!.n, 2, "nothing was deleted for a listing that contradicted itself")
    })
  )
})
