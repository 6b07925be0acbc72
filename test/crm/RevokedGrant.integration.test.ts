/**
 * A revoked grant is not silent (issue 33, point 7). The CRM's administrator disconnects the app:
 * the tokens stop working and the webhook subscription is removed with them (spec §3). The process
 * that finds the grant refused says so once, at ERROR; the subscription is re-checked at once (so
 * `crm_sync_webhook_subscription_ok` turns 0 without waiting for the daily check); `status` lists
 * the time range without events; `connect` stores a new grant and subscribes again, and the range
 * is closed.
 */
import { CrmHttpClient } from "../../src/cli/ApiStack.ts"
import { assert, layer } from "@effect/vitest"
import { Effect, Layer, Logger } from "effect"
import { HttpClient, HttpClientRequest } from "effect/http"
import * as PrometheusMetrics from "effect/observability/PrometheusMetrics"
import { randomBytes } from "node:crypto"
import { createServer } from "node:net"
import { RateBudget } from "../../src/budget/RateBudget.ts"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { connect } from "../../src/crm/Connect.ts"
import { CrmClient } from "../../src/crm/CrmClient.ts"
import { Credentials } from "../../src/crm/Credentials.ts"
import { renderStatus, statusReport } from "../../src/admin/StatusReport.ts"
import { recheckOnRefusal } from "../../src/cli/DaemonJobs.ts"
import { resubscribe, subscribe } from "../../src/webhooks/Subscriptions.ts"
import { Sandbox } from "@crm-sync/sandbox"
import { SqlClient, TestDatabase } from "../support/TestDatabase.ts"

/** Every line logged, as "LEVEL message". */
const logLines: Array<string> = []
const CapturedLogs = Logger.layer([
  Logger.make((options) => logLines.push(`${options.logLevel.toUpperCase()} ${String(options.message)}`))
])

const freePort = Effect.callback<number>((resume) => {
  const server = createServer()
  server.listen(0, "127.0.0.1", () => {
    const address = server.address()
    const port = typeof address === "object" && address !== null ? address.port : 0
    server.close(() => resume(Effect.succeed(port)))
  })
})

const Config = Layer.unwrap(
  Effect.gen(function* () {
    const sandbox = yield* Sandbox
    return AppConfig.layerFrom({
      encryption_key: randomBytes(32).toString("base64"),
      connections: [
        {
          name: "firm",
          base_url: sandbox.baseUrl,
          credential: "oauth",
          oauth: {
            client_id: sandbox.credentials.oauthClientId,
            client_secret: sandbox.credentials.oauthClientSecret,
            auth_url: `${sandbox.baseUrl}/oauth/authorize`,
            token_url: `${sandbox.baseUrl}/oauth/token`,
            redirect_uri: `http://127.0.0.1:${yield* freePort}/oauth/callback`
          },
          request_timeout: "5 seconds"
        }
      ]
    })
  })
)

const Stack = CrmClient.layerFor("firm").pipe(
  Layer.provideMerge(Layer.mergeAll(RateBudget.layer, Credentials.layer)),
  Layer.provideMerge(Config),
  Layer.provideMerge(CrmHttpClient),
  Layer.provideMerge(TestDatabase),
  Layer.provideMerge(Sandbox.layer({ records: 30, seed: 7 })),
  Layer.provideMerge(CapturedLogs)
)

/** `crm-sync connect firm`, with a browser that approves (the sandbox authorizes at once). */
const connectFirm = Effect.gen(function* () {
  const http = yield* HttpClient.HttpClient
  return yield* connect("firm", {
    onAuthorizeUrl: (address) =>
      Effect.gen(function* () {
        const authorize = yield* http.execute(HttpClientRequest.get(address))
        const answer = yield* http.execute(HttpClientRequest.get(authorize.headers.location!))
        yield* answer.text
      }).pipe(Effect.orDie, Effect.forkDetach, Effect.asVoid)
  })
})

const report = Effect.gen(function* () {
  return renderStatus(yield* statusReport(yield* AppConfig, { kind: "external", location: "the test database" }))
})

const subscriptionState = Effect.gen(function* () {
  const sql = yield* SqlClient
  const [row] = yield* sql<{
    state: string
  }>`SELECT state FROM crm_sync.webhook_subscriptions WHERE connection = 'firm'`
  return row?.state
})

/** Waits (bounded: 30 s) until `check` holds. */
const eventually = <E, R>(check: Effect.Effect<boolean, E, R>, what: string) =>
  Effect.gen(function* () {
    for (let i = 0; i < 600; i++) {
      if (yield* check) return
      yield* Effect.sleep("50 millis")
    }
    assert.fail(`timed out waiting until ${what}`)
  })

const subscriptionOk = Effect.map(
  PrometheusMetrics.format(),
  (text) =>
    text
      .split("\n")
      .find((line) => line.startsWith('crm_sync_webhook_subscription_ok{connection="firm"} '))
      ?.split(" ")[1]
)

layer(Stack, { excludeTestServices: true, timeout: 60_000 })("a revoked grant", (it) => {
  it.effect("is one ERROR line, a re-checked subscription, a gap in status; connect subscribes again", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      const client = yield* CrmClient
      yield* connectFirm
      const subscribed = yield* subscribe("firm")
      // The daemon's re-check, listening as SubscriptionRecheckLive does.
      const refusals = yield* (yield* Credentials).refusals
      yield* Effect.forkScoped(recheckOnRefusal([client], refusals))

      yield* sandbox.admin.disconnect({
        clientId: sandbox.credentials.oauthClientId,
        userId: sandbox.credentials.userId,
        companyId: sandbox.credentials.companyId
      })
      assert.lengthOf(yield* sandbox.admin.subscriptions, 0, "the CRM removed the subscription with the grant")
      assert.strictEqual((yield* Effect.flip(client.me())).reason._tag, "NeedsReauthorization")
      assert.strictEqual((yield* Effect.flip(client.me())).reason._tag, "NeedsReauthorization")

      // Said once, at ERROR, with what to do.
      const errors = logLines.filter((line) => line.startsWith("ERROR") && line.includes("refused the OAuth grant"))
      assert.lengthOf(errors, 1, logLines.join("\n"))
      assert.include(errors[0]!, "crm-sync connect firm")

      // status: the range without events, still open.
      assert.match(
        yield* report,
        /gap {9}connection firm: grant refused since \d{4}-\d\d-\d\dT[\d:.]+Z: no webhook events/
      )

      // Re-checked at once: the subscription is unreachable and the gauge says 0.
      yield* eventually(
        Effect.map(subscriptionState, (state) => state === "unreachable"),
        "the subscription is re-checked"
      )
      assert.strictEqual(yield* subscriptionOk, "0")

      // connect stores a new grant; the subscription crm-sync had made is made again.
      yield* connectFirm
      const again = yield* resubscribe("firm")
      assert.isTrue(again._tag === "Some")
      assert.lengthOf(yield* sandbox.admin.subscriptions, 1)
      assert.notStrictEqual(again._tag === "Some" ? again.value.subscription.id : "", subscribed.subscription.id)
      assert.strictEqual(yield* subscriptionState, "present")
      assert.match(
        yield* report,
        /gap {9}connection firm: no webhook events from \d{4}-[\dT:.-]+Z to \d{4}-[\dT:.-]+Z \(grant refused\)/
      )
    })
  )
})
