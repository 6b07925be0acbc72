/**
 * OAuth credentials end to end against the sandbox's authorization server (spec §5.3) and a real
 * PostgreSQL: `connect` with PKCE and a checked `state`, tokens stored as ciphertext, a refresh on
 * 401, five concurrent refreshers from five "processes" making one token request, `invalid_grant`
 * ending in "needs re-authorization" without a loop — and no secret in any log line.
 */
import { CrmHttpClient } from "../../src/cli/ApiStack.ts"
import { assert, layer } from "@effect/vitest"
import { Effect, Layer, Logger, Redacted, References, Result } from "effect"
import { HttpClient, HttpClientRequest } from "effect/http"
import { randomBytes } from "node:crypto"
import { createServer } from "node:net"
import { RateBudget } from "../../src/budget/RateBudget.ts"
import { AppConfig, type Connection } from "../../src/config/AppConfig.ts"
import { connect } from "../../src/crm/Connect.ts"
import { CrmClient } from "../../src/crm/CrmClient.ts"
import { Credentials } from "../../src/crm/Credentials.ts"
import { open, parseKey } from "../../src/crm/TokenCipher.ts"
import { Sandbox } from "@crm-sync/sandbox"
import { SqlClient, TestDatabase } from "../support/TestDatabase.ts"

const ENCRYPTION_KEY = randomBytes(32).toString("base64")

/** Every log line of the suite, as JSON, to check that none carries a secret. */
const logLines: Array<string> = []
const CapturedLogs = Layer.mergeAll(
  Logger.layer([Logger.make((options) => logLines.push(Logger.formatJson.log(options)))]),
  Layer.succeed(References.MinimumLogLevel, "Debug")
)

/** A free loopback port for a connection's callback (the sandbox accepts any loopback port, RFC 8252 §7.3). */
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
    const oauth = (port: number) => ({
      client_id: sandbox.credentials.oauthClientId,
      client_secret: sandbox.credentials.oauthClientSecret,
      auth_url: `${sandbox.baseUrl}/oauth/authorize`,
      token_url: `${sandbox.baseUrl}/oauth/token`,
      redirect_uri: `http://127.0.0.1:${port}/oauth/callback`
    })
    const connection = (name: string, port: number) => ({
      name,
      base_url: sandbox.baseUrl,
      credential: "oauth",
      oauth: oauth(port),
      company_bucket: name,
      request_timeout: "5 seconds"
    })
    return AppConfig.layerFrom({
      encryption_key: ENCRYPTION_KEY,
      connections: [
        connection("oauth", yield* freePort),
        connection("forged", yield* freePort),
        connection("second", yield* freePort),
        connection("late", yield* freePort)
      ],
      budget: { safety_margin: "50 millis" }
    })
  })
)

const Stack = CrmClient.layerFor("oauth").pipe(
  Layer.provideMerge(Layer.mergeAll(RateBudget.layer, Credentials.layer)),
  Layer.provideMerge(Config),
  Layer.provideMerge(CrmHttpClient),
  Layer.provideMerge(TestDatabase),
  Layer.provideMerge(Sandbox.layer({ records: 200, seed: 5 })),
  Layer.provideMerge(CapturedLogs)
)

const connectionNamed = Effect.fnUntraced(function* (name: string) {
  const config = yield* AppConfig
  return config.connections.find((candidate) => candidate.name === name)!
})

/** Plays the browser: opens the authorization address (auto-approved) and follows the redirect to our callback. */
const browser =
  (tamper: (callback: URL) => URL = (url) => url) =>
  (address: string) =>
    Effect.gen(function* () {
      const http = yield* HttpClient.HttpClient
      const authorize = yield* http.execute(HttpClientRequest.get(address))
      assert.strictEqual(authorize.status, 302)
      const callback = tamper(new URL(authorize.headers.location!))
      const answer = yield* http.execute(HttpClientRequest.get(callback))
      yield* answer.text
    }).pipe(Effect.orDie)

/** Runs `connect` for a connection with the browser above, in parallel with it. */
const connectWith = (name: string, tamper?: (callback: URL) => URL) =>
  Effect.gen(function* () {
    const http = yield* HttpClient.HttpClient
    return yield* connect(name, {
      onAuthorizeUrl: (address) =>
        browser(tamper)(address).pipe(
          Effect.provideService(HttpClient.HttpClient, http),
          Effect.forkDetach,
          Effect.asVoid
        )
    })
  })

const tokenRequests = Effect.fnUntraced(function* (since: number) {
  const sandbox = yield* Sandbox
  return yield* sandbox.admin.requests({ since, method: "POST", path: "/oauth/token" })
})

const storedRow = (name: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const rows = yield* sql<{
      access_token: Uint8Array | null
      refresh_token: Uint8Array | null
      needs_reauthorization: boolean
      last_error: string | null
    }>`SELECT access_token, refresh_token, needs_reauthorization, last_error FROM crm_sync.credentials WHERE connection = ${name}`
    return rows[0]
  })

const decrypt = (connection: Connection, sealed: Uint8Array) =>
  Redacted.value(
    Result.getOrThrow(open(Result.getOrThrow(parseKey(Redacted.make(ENCRYPTION_KEY))), connection.name, sealed))
  )

/** The key of a connection's token/user bucket. */
const userBucket = (buckets: ReadonlyArray<{ readonly key: string; readonly scope: string }>) =>
  buckets.find((bucket) => bucket.scope === "token")!.key

/** Tokens seen during the suite: none may appear in a log line. */
const seenSecrets = new Set<string>()

layer(Stack, { excludeTestServices: true })("Credentials (OAuth)", (it) => {
  it.effect("before connect, a call fails with missing credentials and sends nothing", () =>
    Effect.gen(function* () {
      const client = yield* CrmClient
      const sandbox = yield* Sandbox
      const since = yield* sandbox.admin.lastRequestSeq
      const error = yield* Effect.flip(client.me())
      assert.strictEqual(error.reason._tag, "MissingCredentials")
      assert.include(error.message, "crm-sync connect oauth")
      assert.lengthOf(yield* sandbox.admin.requests({ since }), 0)
    })
  )

  it.effect("connect runs the code flow with PKCE and stores the pair as ciphertext", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      const since = yield* sandbox.admin.lastRequestSeq
      const connected = yield* connectWith("oauth")
      assert.strictEqual(connected.connection, "oauth")
      assert.strictEqual(connected.userId, sandbox.credentials.userId)

      const [authorize] = yield* sandbox.admin.requests({ since, path: "/oauth/authorize" })
      assert.strictEqual(authorize!.query.code_challenge_method, "S256")
      assert.match(authorize!.query.code_challenge ?? "", /^[A-Za-z0-9_-]{43}$/)
      assert.isTrue((authorize!.query.state ?? "").length >= 16)

      const row = yield* storedRow("oauth")
      const connection = yield* connectionNamed("oauth")
      const access = decrypt(connection, row!.access_token!)
      const refresh = decrypt(connection, row!.refresh_token!)
      seenSecrets.add(access).add(refresh)
      assert.match(access, /^crm_oat_/)
      assert.match(refresh, /^crm_ort_/)
      assert.notInclude(Buffer.from(row!.access_token!).toString("latin1"), "crm_oat_")
      assert.notInclude(Buffer.from(row!.refresh_token!).toString("latin1"), "crm_ort_")

      const client = yield* CrmClient
      const me = yield* client.access()
      assert.match(me.authType, /oauth/)
    })
  )

  it.effect("a callback with another state is refused, nothing is stored, and the flow waits for ours", () =>
    Effect.gen(function* () {
      const http = yield* HttpClient.HttpClient
      const sql = yield* SqlClient
      const forgedStatus: Array<number> = []
      const stored: Array<boolean> = []
      // A forged callback reaches the port first; then the browser's own.
      const browserAfterForgery = (address: string) =>
        Effect.gen(function* () {
          const authorize = yield* http.execute(HttpClientRequest.get(address))
          const callback = new URL(authorize.headers.location!)
          const forged = new URL(callback)
          forged.searchParams.set("state", "forged-state-value")
          const refused = yield* http.execute(HttpClientRequest.get(forged))
          forgedStatus.push(refused.status)
          stored.push((yield* storedRow("forged")) !== undefined)
          yield* (yield* http.execute(HttpClientRequest.get(callback))).text
        }).pipe(Effect.provideService(SqlClient, sql), Effect.orDie)
      const connected = yield* connect("forged", {
        onAuthorizeUrl: (address) => browserAfterForgery(address).pipe(Effect.forkDetach, Effect.asVoid)
      })
      assert.deepStrictEqual(forgedStatus, [400])
      assert.deepStrictEqual(stored, [false], "nothing stored for the forged callback")
      assert.strictEqual(connected.connection, "forged")
      assert.isDefined(yield* storedRow("forged"))
    })
  )

  it.effect("two connections of one user share the user's rate bucket (spec §8, §5.4)", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      yield* connectWith("second")
      const first = yield* CrmClient.make("oauth")
      const second = yield* CrmClient.make("second")
      assert.strictEqual(
        userBucket(first.buckets),
        `token:oauth:${sandbox.credentials.oauthClientId}:${sandbox.credentials.userId}`
      )
      assert.strictEqual(userBucket(second.buckets), userBucket(first.buckets))
    })
  )

  it.effect("a client made before connect takes the user's bucket once connect has recorded the user", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      // As a daemon started before `connect` ran in another shell.
      const client = yield* CrmClient.make("late")
      assert.strictEqual(userBucket(client.buckets), "token:late")
      yield* connectWith("late")
      const since = yield* sandbox.admin.lastRequestSeq
      yield* client.access()
      const userKey = `token:oauth:${sandbox.credentials.oauthClientId}:${sandbox.credentials.userId}`
      assert.strictEqual(userBucket(client.buckets), userKey)
      // The request itself was counted in the user's bucket.
      const status = yield* (yield* RateBudget).status(client.buckets)
      assert.isAtLeast(status.find((bucket) => bucket.bucket === userKey)!.used, 1)
      assert.isAtLeast((yield* sandbox.admin.requests({ since })).length, 1)
    })
  )

  it.effect("five concurrent refreshes from five processes make exactly one token request", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      const credentials = yield* Credentials
      const connection = yield* connectionNamed("oauth")
      const before = yield* credentials.token(connection)
      const since = yield* sandbox.admin.lastRequestSeq
      // Each refresher is its own Credentials instance, as five processes would hold.
      const refreshed = yield* Effect.all(
        Array.from({ length: 5 }, () =>
          Effect.gen(function* () {
            const process = yield* Credentials
            return yield* process.refresh(connection, before)
          }).pipe(Effect.provide(Credentials.layer.pipe(Layer.fresh)))
        ),
        { concurrency: "unbounded" }
      )
      assert.lengthOf(yield* tokenRequests(since), 1)
      const tokens = new Set(refreshed.map(Redacted.value))
      assert.strictEqual(tokens.size, 1)
      assert.notStrictEqual([...tokens][0], Redacted.value(before))
      // The rotated refresh token was stored with the access token.
      const row = yield* storedRow("oauth")
      assert.strictEqual(decrypt(connection, row!.access_token!), [...tokens][0])
      seenSecrets.add([...tokens][0]!).add(decrypt(connection, row!.refresh_token!))
    })
  )

  it.effect("an expired access token is refreshed on 401 and the call goes through", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      const client = yield* CrmClient
      // The CRM's clock moves past every access token issued so far (they live 2 hours).
      yield* sandbox.admin.advanceClock("3 hours")
      const since = yield* sandbox.admin.lastRequestSeq
      const me = yield* client.access()
      assert.match(me.authType, /oauth/)
      const requests = (yield* sandbox.admin.requests({ since })).map((request) => `${request.path} ${request.status}`)
      // This process still held the token from before the five refreshes: the first refresh hands
      // it the one another process stored (no token request), which has expired too; the second
      // refresh asks the authorization server.
      assert.deepStrictEqual(requests, ["/v1/me 401", "/v1/me 401", "/oauth/token 200", "/v1/me 200"])
    })
  )

  it.effect("invalid_grant marks the connection as needing re-authorization, with no retry loop", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      const client = yield* CrmClient
      // The CRM's administrator disconnects the app: every token of the connection is revoked.
      yield* sandbox.admin.disconnect({
        clientId: sandbox.credentials.oauthClientId,
        userId: sandbox.credentials.userId,
        companyId: sandbox.credentials.companyId
      })
      const since = yield* sandbox.admin.lastRequestSeq
      const error = yield* Effect.flip(client.me())
      assert.strictEqual(error.reason._tag, "NeedsReauthorization")
      assert.isFalse(error.retryable)
      assert.include(error.message, "crm-sync connect")
      assert.lengthOf(yield* tokenRequests(since), 1)

      const status = yield* (yield* Credentials).status(yield* connectionNamed("oauth"))
      assert.isTrue(status.needsReauthorization)
      assert.match(status.lastError ?? "", /invalid_grant/)
      const row = yield* storedRow("oauth")
      assert.isTrue(row!.needs_reauthorization)

      // Later calls, from this process or a fresh one, fail at once: no token request, no API request.
      const later = yield* sandbox.admin.lastRequestSeq
      assert.strictEqual((yield* Effect.flip(client.me())).reason._tag, "NeedsReauthorization")
      const fresh = yield* Effect.gen(function* () {
        const process = yield* Credentials
        return yield* Effect.flip(process.token(yield* connectionNamed("oauth")))
      }).pipe(Effect.provide(Credentials.layer.pipe(Layer.fresh)))
      assert.strictEqual(fresh.reason._tag, "NeedsReauthorization")
      assert.lengthOf(yield* sandbox.admin.requests({ since: later }), 0)

      // Connecting again clears it.
      yield* connectWith("oauth")
      assert.isFalse((yield* storedRow("oauth"))!.needs_reauthorization)
      assert.match((yield* client.access()).authType, /oauth/)
    })
  )

  it.effect("no log line of the suite carries a token, a secret or the encryption key", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      const row = yield* storedRow("oauth")
      const connection = yield* connectionNamed("oauth")
      seenSecrets
        .add(decrypt(connection, row!.access_token!))
        .add(decrypt(connection, row!.refresh_token!))
        .add(sandbox.credentials.oauthClientSecret)
        .add(sandbox.credentials.personalAccessToken)
        .add(ENCRYPTION_KEY)
      assert.isTrue(logLines.length > 0, "the suite logged something")
      for (const line of logLines) {
        for (const secret of seenSecrets) assert.notInclude(line, secret)
        assert.notInclude(line, "whsec_")
      }
    })
  )
})
