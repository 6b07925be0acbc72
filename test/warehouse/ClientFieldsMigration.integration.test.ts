/**
 * The migration that orders a client's fields one by one (0023): a client stored before it, as a
 * whole snapshot ordered by `updated_at`, gets that time for each of its fields, so an older
 * update arriving late still cannot undo it; a client stored only from a `client.created` gets
 * none; `crm.current_clients` shows the new column.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { HistorySettings } from "../../src/warehouse/History.ts"
import { Warehouse } from "../../src/warehouse/Warehouse.ts"
import { migrateUpTo } from "../support/MigrationSteps.ts"
import { EmptyTestDatabase } from "../support/TestDatabase.ts"

const client = (id: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const rows = yield* sql<{ tier: string; field_signed_at: Record<string, string> | null }>`
      SELECT tier, field_signed_at FROM crm.current_clients WHERE id = ${id}`
    return rows[0]
  })

layer(EmptyTestDatabase, { timeout: 60_000 })("the client field times migration", (it) => {
  it.effect("gives each field of a stored client its updated_at, and none to a client only created", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const migration = yield* migrateUpTo("_client_field_times.sql")
      yield* sql`
        INSERT INTO crm.clients (id, updated_at, tier, source, raw) VALUES
          ('cli_updated', '2026-02-01T10:01:00Z', 'silver', 'webhook', '{"id": "cli_updated", "tier": "silver", "name": "A"}'),
          ('cli_created', NULL, 'gold', 'webhook', '{"id": "cli_created", "tier": "gold"}')`
      yield* migration.applyIt

      const t = "2026-02-01T10:01:00.000Z"
      assert.deepStrictEqual((yield* client("cli_updated"))?.field_signed_at, { tier: t, name: t })
      assert.isNull((yield* client("cli_created"))?.field_signed_at)

      // Migration 0025 (the history) is not applied here: no history to write.
      const warehouse = yield* Effect.provide(
        Effect.service(Warehouse),
        Warehouse.layer.pipe(Layer.provide(Layer.succeed(HistorySettings, { resources: new Set<never>() })))
      )
      const update = (id: string, tier: string, signedAt: string) =>
        warehouse.writeClients([{ record: { id, tier }, signedAt, changedFields: ["tier"] }], { source: "webhook" })
      yield* update("cli_updated", "gold", "2026-02-01T10:00:00.000Z")
      assert.strictEqual((yield* client("cli_updated"))?.tier, "silver", "an older update does not undo it")
      yield* update("cli_updated", "platinum", "2026-02-01T10:02:00.000Z")
      yield* update("cli_created", "silver", "2026-02-01T09:00:00.000Z")
      assert.strictEqual((yield* client("cli_updated"))?.tier, "platinum", "a newer one applies")
      assert.strictEqual((yield* client("cli_created"))?.tier, "silver", "any update replaces a creation's field")
    })
  )
})
