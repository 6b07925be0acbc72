/**
 * A PostgreSQL database of this test file's own, migrated, as a layer: it is created from the
 * server that globalSetup started and dropped when the layer closes.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Redacted } from "effect"
import { Reactivity } from "effect/reactivity"
import { SqlClient } from "effect/sql/SqlClient"
import { randomBytes } from "node:crypto"
import { inject } from "vitest"
import { migrate } from "../../src/warehouse/Migrations.ts"

const withDatabase = (url: string, database: string) => {
  const parsed = new URL(url)
  parsed.pathname = `/${database}`
  return parsed.toString()
}

/** Creates a fresh database and returns its URL; drops it when the scope closes. */
export const freshDatabase = Effect.gen(function* () {
  const adminUrl = inject("databaseUrl")
  const name = `crm_sync_test_${randomBytes(6).toString("hex")}`
  const admin = yield* PgClient.make({ url: Redacted.make(adminUrl), maxConnections: 1 })
  yield* Effect.acquireRelease(admin.unsafe(`CREATE DATABASE ${name}`), () =>
    admin.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).pipe(Effect.ignore)
  )
  return withDatabase(adminUrl, name)
}).pipe(Effect.provide(Reactivity.layer))

/** PgClient/SqlClient on a fresh, migrated database. */
export const TestDatabase = Layer.unwrap(
  Effect.map(freshDatabase, (url) =>
    Layer.effectDiscard(Effect.asVoid(migrate)).pipe(
      Layer.provideMerge(PgClient.layer({ url: Redacted.make(url), maxConnections: 8 }))
    )
  )
)

/** A fresh database without migrations (for tests of the migrator itself). */
export const EmptyTestDatabase = Layer.unwrap(
  Effect.map(freshDatabase, (url) => PgClient.layer({ url: Redacted.make(url), maxConnections: 8 }))
)

export { SqlClient }
