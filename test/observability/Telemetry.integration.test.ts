/**
 * OTLP export as a platform team wires it: `crm-sync run` with OTEL_EXPORTER_OTLP_ENDPOINT pointed
 * at a small collector stub (an HTTP server that keeps what it is sent) delivers spans for a
 * crawl's page requests and for a webhook delivery, under service `crm-sync`.
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { createServer } from "node:http"
import { Sandbox } from "@crm-sync/sandbox"
import { eventFixture } from "../fixtures/Fixtures.ts"
import { deliverSigned, eventually, freePort, get, startDaemon } from "../support/Daemon.ts"
import { freshDatabase } from "../support/TestDatabase.ts"

const SECRET = `whsec_${Buffer.from("crm-sync telemetry test secret").toString("base64")}`

interface Received {
  readonly path: string
  readonly body: any
}

/** A collector: every POST it receives, parsed. */
const collector = Effect.acquireRelease(
  Effect.promise(
    () =>
      new Promise<{ readonly url: string; readonly received: Array<Received>; readonly close: () => void }>(
        (resolve) => {
          const received: Array<Received> = []
          const server = createServer((request, response) => {
            const chunks: Array<Buffer> = []
            request.on("data", (chunk: Buffer) => chunks.push(chunk))
            request.on("end", () => {
              try {
                received.push({ path: request.url ?? "", body: JSON.parse(Buffer.concat(chunks).toString("utf8")) })
              } catch {
                received.push({ path: request.url ?? "", body: undefined })
              }
              response.writeHead(200, { "content-type": "application/json" }).end("{}")
            })
          })
          server.listen(0, "127.0.0.1", () => {
            const address = server.address()
            const port = typeof address === "object" && address !== null ? address.port : 0
            resolve({ url: `http://127.0.0.1:${port}`, received, close: () => server.close() })
          })
        }
      )
  ),
  (stub) => Effect.sync(() => stub.close())
)

/** Every span name received, with its service. */
const spans = (received: ReadonlyArray<Received>) =>
  received
    .filter((item) => item.path === "/v1/traces")
    .flatMap((item) =>
      ((item.body?.resourceSpans ?? []) as ReadonlyArray<any>).flatMap((resource) => {
        const service = (resource.resource?.attributes ?? []).find((a: any) => a.key === "service.name")?.value
          ?.stringValue
        return ((resource.scopeSpans ?? []) as ReadonlyArray<any>).flatMap((scope) =>
          ((scope.spans ?? []) as ReadonlyArray<any>).map((span) => ({ name: String(span.name), service }))
        )
      })
    )

layer(
  Sandbox.layer({ records: 100, seed: 6, limits: { personal: { token: 100_000, company: 100_000, ip: 100_000 } } }),
  { timeout: 120_000, excludeTestServices: true }
)("OTLP export", (it) => {
  it.effect(
    "spans for a crawl page and a delivery reach the collector",
    () =>
      Effect.gen(function* () {
        const stub = yield* collector
        const sandbox = yield* Sandbox
        const port = yield* freePort
        const adminPort = yield* freePort
        yield* startDaemon({
          DATABASE_URL: yield* freshDatabase,
          CRM_BASE_URL: sandbox.baseUrl,
          CRM_TOKEN: sandbox.credentials.personalAccessToken,
          CRM_WEBHOOK_SECRET: SECRET,
          WEBHOOK_PORT: String(port),
          ADMIN_PORT: String(adminPort),
          OTEL_EXPORTER_OTLP_ENDPOINT: stub.url,
          LOG_LEVEL: "warn"
        })
        yield* eventually("readiness", get(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200)
        const body = JSON.stringify(eventFixture("task.created"))
        const status = yield* deliverSigned(`http://127.0.0.1:${port}`, SECRET, "msg_telemetry_1", body)
        assert.strictEqual(status, 200)
        const names = yield* eventually(
          "spans at the collector",
          Effect.sync(() => spans(stub.received)),
          (received) =>
            received.some((span) => span.name === "WebhookIntake.deliver") &&
            received.some((span) => span.name === "CrmClient.listFinancialAccounts"),
          60
        )
        assert.isTrue(
          names.every((span) => span.service === "crm-sync"),
          "service.name is crm-sync"
        )
        assert.isTrue(names.some((span) => span.name === "PageCrawler.crawl"))
      }).pipe(Effect.scoped),
    { timeout: 120_000 }
  )
})
