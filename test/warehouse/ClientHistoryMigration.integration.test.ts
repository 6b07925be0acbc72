/**
 * The migration that keeps field times per client version (0027) on a warehouse with a client
 * history: each current version takes its row's `field_signed_at`, older versions none; a late
 * delivery is then placed in the middle by those times (after the later migrations, 0028 included).
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { migrateFrom, migrationsDirectory } from "../../src/warehouse/Migrations.ts"
import { Warehouse } from "../../src/warehouse/Warehouse.ts"
import { migrateUpTo } from "../support/MigrationSteps.ts"
import { EmptyTestDatabase } from "../support/TestDatabase.ts"

layer(EmptyTestDatabase, { timeout: 60_000 })("the client history field times migration", (it) => {
  it.effect("gives each current client version its row's field times, and the next late delivery uses them", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const migration = yield* migrateUpTo("_client_history_field_times.sql")
      yield* sql`
        INSERT INTO crm.clients (id, updated_at, tier, status, field_signed_at, source, raw) VALUES
          ('cli_m', '2026-01-03T00:00:00Z', 'gold', 'active',
           '{"tier": "2026-01-03T00:00:00.000Z", "status": "2026-01-01T00:00:00.000Z"}', 'webhook',
           '{"id": "cli_m", "tier": "gold", "status": "active"}')`
      yield* sql`
        INSERT INTO crm_history.clients (id, valid_from, valid_to, is_current, tier, status, updated_at, raw, content_hash, source)
        VALUES
          ('cli_m', '2026-01-01T00:00:00Z', '2026-01-03T00:00:00Z', false, 'silver', 'active', '2026-01-01T00:00:00Z',
           '{"id": "cli_m", "tier": "silver", "status": "active"}',
           md5('{"id": "cli_m", "tier": "silver", "status": "active"}'::jsonb::text), 'webhook'),
          ('cli_m', '2026-01-03T00:00:00Z', NULL, true, 'gold', 'active', '2026-01-03T00:00:00Z',
           '{"id": "cli_m", "tier": "gold", "status": "active"}',
           md5('{"id": "cli_m", "tier": "gold", "status": "active"}'::jsonb::text), 'webhook')`
      yield* migration.applyIt

      const times = yield* sql<{ is_current: boolean; field_signed_at: unknown }>`
        SELECT is_current, field_signed_at FROM crm_history.clients WHERE id = 'cli_m' ORDER BY valid_from`
      assert.deepStrictEqual(times, [
        { is_current: false, field_signed_at: null },
        {
          is_current: true,
          field_signed_at: { tier: "2026-01-03T00:00:00.000Z", status: "2026-01-01T00:00:00.000Z" }
        }
      ])

      // Then the rest (0028: the current version is the row itself, the same chain in the view).
      yield* migrateFrom(migrationsDirectory)
      const migrated = yield* sql<{ valid_from: Date; is_current: boolean; tier: string }>`
        SELECT valid_from, is_current, tier FROM crm_history.clients WHERE id = 'cli_m' ORDER BY valid_from`
      assert.deepStrictEqual(migrated, [
        { valid_from: new Date("2026-01-01T00:00:00Z"), is_current: false, tier: "silver" },
        { valid_from: new Date("2026-01-03T00:00:00Z"), is_current: true, tier: "gold" }
      ])

      // Signed at 01-02: tier was named again at 01-03, status not since 01-01.
      const warehouse = yield* Effect.provide(Effect.service(Warehouse), Warehouse.layer)
      yield* warehouse.writeClients(
        [
          {
            record: { id: "cli_m", tier: "bronze", status: "vip" },
            signedAt: "2026-01-02T00:00:00.000Z",
            changedFields: ["tier", "status"]
          }
        ],
        { source: "webhook" }
      )
      const chain = yield* sql<{ tier: string; status: string; is_current: boolean }>`
        SELECT tier, status, is_current FROM crm_history.clients WHERE id = 'cli_m' ORDER BY valid_from`
      assert.deepStrictEqual(chain, [
        { tier: "silver", status: "active", is_current: false },
        { tier: "bronze", status: "vip", is_current: false },
        { tier: "gold", status: "vip", is_current: true }
      ])
      const [row] = yield* sql<{
        tier: string
        status: string
      }>`SELECT tier, status FROM crm.clients WHERE id = 'cli_m'`
      assert.deepStrictEqual(row, { tier: "gold", status: "vip" })
    })
  )
})
