/**
 * Readiness (`/readyz`) reflects whether this replica can work its connections: an OAuth
 * connection whose stored tokens the configured `CRM_SYNC_ENCRYPTION_KEY` cannot open (a wrong or
 * rotated key), or with no key at all, makes the replica unready with the reason; the right key,
 * a connection not connected yet, and a grant needing re-authorization (the same for every
 * replica) do not. Its `SELECT 1` runs on a connection of its own: a pool busy with every
 * connection's jobs leaves the replica ready.
 */
import { assert, layer } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Redacted } from "effect"
import { Reactivity } from "effect/reactivity"
import { inject } from "vitest"
import { DatabaseInfo, type DatabaseInfoShape } from "../../src/warehouse/Database.ts"
import { FetchHttpClient, HttpClient } from "effect/http"
import { SqlClient } from "effect/sql/SqlClient"
import { randomBytes } from "node:crypto"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { Credentials } from "../../src/crm/Credentials.ts"
import { TestDatabase } from "../support/TestDatabase.ts"
import { configLayer, IntakeServer, makeSecret } from "../webhooks/harness.ts"

const RIGHT_KEY = randomBytes(32).toString("hex")
const WRONG_KEY = randomBytes(32).toString("hex")

const connection = (name: string) => ({
  name,
  base_url: "https://crm.example.com",
  credential: "oauth",
  oauth: {
    client_id: "client",
    client_secret: "secret",
    auth_url: "https://crm.example.com/oauth/authorize",
    token_url: "https://crm.example.com/oauth/token",
    redirect_uri: "http://127.0.0.1:8765/oauth/callback"
  }
})

const configWith = (key: string | undefined) =>
  configLayer({
    connections: [connection("stored"), connection("fresh")],
    webhooks: { endpoints: [{ name: "default", secrets: [makeSecret()] }] },
    ...(key === undefined ? {} : { encryption_key: key })
  })

/** What `/readyz` answers with `key` configured (and `info`, the database layer's, if given). */
const readiness = (key: string | undefined, info?: DatabaseInfoShape) =>
  Effect.gen(function* () {
    const client = yield* HttpClient.HttpClient
    const response = yield* client.get("/readyz")
    return { status: response.status, body: yield* response.text }
  }).pipe(
    Effect.provide(
      IntakeServer.pipe(
        Layer.provideMerge(configWith(key)),
        Layer.provideMerge(info === undefined ? Layer.empty : Layer.succeed(DatabaseInfo, info))
      )
    )
  )

/** The database layer's info with a client of its own on the test's database, as DatabaseLive makes it. */
const withDedicatedClient = Effect.gen(function* () {
  const sql = yield* SqlClient
  const [row] = yield* sql<{ name: string }>`SELECT current_database() AS name`
  const url = new URL(inject("databaseUrl"))
  url.pathname = `/${row!.name}`
  return {
    kind: "external",
    location: "the test database",
    dedicated: (_purpose: string) =>
      PgClient.make({ url: Redacted.make(url.toString()), maxConnections: 1 }).pipe(Effect.provide(Reactivity.layer))
  } satisfies DatabaseInfoShape
})

/** Every connection of the test's pool (8) busy for `seconds`, as hundreds of connections' jobs keep it. */
const poolBusy = (seconds: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    for (let i = 0; i < 8; i++) yield* Effect.forkChild(sql`SELECT pg_sleep(${seconds})`)
    yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 500)))
  })

/** Stores a token pair for `stored`, sealed with the right key (as `crm-sync connect` does). */
const connectStored = Effect.gen(function* () {
  const config = yield* AppConfig
  const credentials = yield* Credentials
  yield* credentials.store(config.connections[0]!, {
    accessToken: Redacted.make("access"),
    refreshToken: Redacted.make("refresh"),
    expiresIn: undefined,
    scope: undefined
  })
}).pipe(
  Effect.provide(
    Credentials.layer.pipe(Layer.provideMerge(configWith(RIGHT_KEY)), Layer.provideMerge(FetchHttpClient.layer))
  )
)

layer(TestDatabase, { timeout: 60_000, excludeTestServices: true })("readiness", (it) => {
  it.effect("is unready, saying why, while the encryption key is missing or does not open the stored tokens", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      // Not connected yet: nothing to open, the replica is ready (connect runs against it).
      assert.deepStrictEqual(yield* readiness(WRONG_KEY), { status: 200, body: "ok\n" })
      yield* connectStored

      assert.deepStrictEqual(yield* readiness(RIGHT_KEY), { status: 200, body: "ok\n" })

      const wrong = yield* readiness(WRONG_KEY)
      assert.strictEqual(wrong.status, 503)
      assert.match(
        wrong.body,
        /^connection stored: the stored OAuth tokens cannot be opened with CRM_SYNC_ENCRYPTION_KEY/
      )
      assert.notInclude(wrong.body, "connection fresh", "a connection not connected yet is no problem")

      const missing = yield* readiness(undefined)
      assert.strictEqual(missing.status, 503)
      assert.include(missing.body, "connection stored: CRM_SYNC_ENCRYPTION_KEY (encryption_key) is not set")
      assert.include(missing.body, "connection fresh: CRM_SYNC_ENCRYPTION_KEY (encryption_key) is not set")

      // A grant the CRM revoked is every replica's problem, shown in status; the intake goes on.
      yield* sql`UPDATE crm_sync.credentials SET needs_reauthorization = true WHERE connection = 'stored'`
      assert.strictEqual((yield* readiness(RIGHT_KEY)).status, 200)
    })
  )

  it.effect("answers from a connection of its own: ready at once while every pooled connection is busy", () =>
    Effect.gen(function* () {
      const info = yield* withDedicatedClient
      // Another session (the pool is busy) counts the pool's sleepers when each probe has answered.
      const observer = yield* info.dedicated!("observer")
      const sleeping = Effect.map(
        observer<{ n: number }>`
          SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%' AND state = 'active'`,
        (rows) => rows[0]!.n
      )
      yield* poolBusy(4)
      assert.deepStrictEqual(yield* readiness(RIGHT_KEY, info), { status: 200, body: "ok\n" })
      assert.isAbove(yield* sleeping, 0, "answered while the pool was still busy")
      // The same check on the shared pool waits for a pooled connection: it times out (503), or
      // answers only once the pool is free.
      yield* poolBusy(4)
      const shared = yield* readiness(RIGHT_KEY)
      const left = yield* sleeping
      assert.isTrue(shared.status === 503 || left === 0, `answered ${shared.status} with ${left} still busy`)
    })
  )
})
