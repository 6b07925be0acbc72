/**
 * The database goes away while the intake is running: a delivery then gets 503 (so the sender
 * retries) and nothing is stored; once the database is back, the sender's retry is accepted and
 * stored once. The outage is real: the test database stops accepting connections and every
 * session on it is terminated, so the intake's pool loses its connections and cannot open more.
 */
import { PgClient } from "@effect/sql-pg"
import { assert, layer } from "@effect/vitest"
import { Context, Effect, Layer, Redacted } from "effect"
import { HttpClient } from "effect/http"
import { Reactivity } from "effect/reactivity"
import { SqlClient } from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql/SqlError"
import { inject } from "vitest"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { migrate } from "../../src/warehouse/Migrations.ts"
import { freshDatabase } from "../support/TestDatabase.ts"
import { hookId, IntakeServer, makeSecret, post, signedHeaders } from "./harness.ts"

/** Takes the test database down (no new connections, existing ones terminated) and up again. */
class Outage extends Context.Service<
  Outage,
  { readonly down: Effect.Effect<void, SqlError>; readonly up: Effect.Effect<void, SqlError> }
>()("test/webhooks/Outage") {}

const secret = makeSecret()

const TestLayer = Layer.unwrap(
  Effect.gen(function* () {
    const url = yield* freshDatabase
    const name = new URL(url).pathname.slice(1)
    const admin = yield* PgClient.make({ url: Redacted.make(inject("databaseUrl")), maxConnections: 1 }).pipe(
      Effect.provide(Reactivity.layer)
    )
    const outage = Outage.of({
      down: Effect.andThen(
        admin.unsafe(`ALTER DATABASE ${name} WITH ALLOW_CONNECTIONS false`),
        admin.unsafe(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${name}'`)
      ),
      up: Effect.asVoid(admin.unsafe(`ALTER DATABASE ${name} WITH ALLOW_CONNECTIONS true`))
    })
    const database = Layer.effectDiscard(Effect.asVoid(migrate)).pipe(
      Layer.provideMerge(PgClient.layer({ url: Redacted.make(url), maxConnections: 4, connectTimeout: "2 seconds" }))
    )
    return IntakeServer.pipe(
      Layer.provideMerge(AppConfig.layerFrom({ webhooks: { endpoints: [{ name: "default", secrets: [secret] }] } })),
      Layer.provideMerge(database),
      Layer.merge(Layer.succeed(Outage, outage))
    )
  })
)

/** `/readyz`'s status once it is `expected`, or its last after 15 s of asking every 200 ms. */
const readiness = (client: HttpClient.HttpClient, expected: number) =>
  Effect.gen(function* () {
    let status = 0
    for (let attempt = 0; attempt < 75 && status !== expected; attempt++) {
      if (attempt > 0) yield* Effect.sleep("200 millis")
      status = (yield* client.get("/readyz")).status
    }
    return status
  })

const body = (id: string) => JSON.stringify({ event_type: "task.deleted", id, book_id: "book_1" })

layer(TestLayer, { excludeTestServices: true })("database outage", (it) => {
  it.effect("503 while the database is down; the sender's retry is accepted once it is back", () =>
    Effect.gen(function* () {
      const outage = yield* Outage
      const client = yield* HttpClient.HttpClient
      const before = body("tsk_before")
      assert.strictEqual(
        (yield* post("/webhooks/default", before, signedHeaders(secret, hookId(), before))).status,
        200
      )

      yield* outage.down
      const id = hookId()
      const during = body("tsk_during")
      const refused = yield* post("/webhooks/default", during, signedHeaders(secret, id, during))
      assert.strictEqual(refused.status, 503, refused.body)
      assert.strictEqual(JSON.parse(refused.body).error, "unavailable")
      // `/readyz` answers a check made every second in the background: it turns within a few.
      assert.strictEqual(yield* readiness(client, 503), 503)

      yield* outage.up
      // The sender retries on its schedule (here every 200 ms, at most 10 times), re-signing each attempt.
      let status = 0
      for (let attempt = 0; attempt < 10 && status !== 200; attempt++) {
        if (attempt > 0) yield* Effect.sleep("200 millis")
        status = (yield* post("/webhooks/default", during, signedHeaders(secret, id, during))).status
      }
      assert.strictEqual(status, 200)
      assert.strictEqual(yield* readiness(client, 200), 200)
      const sql = yield* SqlClient
      const rows = yield* sql<{
        n: number
      }>`SELECT count(*)::int AS n FROM crm_sync.webhook_inbox WHERE hook_id = ${id}`
      assert.strictEqual(rows[0]!.n, 1)
    })
  )
})
