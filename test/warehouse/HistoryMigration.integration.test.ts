/**
 * The migration that starts the history (0025) on a warehouse with data: one current version per
 * live row, from its `updated_at` (its `synced_at` where it has none); deleted rows get none. Then
 * 0028 makes the row its own current version (the view shows the same chains, a deleted row as its
 * tombstone), and the next change of a record ends that version.
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { migrateFrom, migrationsDirectory } from "../../src/warehouse/Migrations.ts"
import { Warehouse } from "../../src/warehouse/Warehouse.ts"
import { resourceFixture } from "../fixtures/Fixtures.ts"
import { migrateUpTo } from "../support/MigrationSteps.ts"
import { EmptyTestDatabase } from "../support/TestDatabase.ts"

layer(EmptyTestDatabase, { timeout: 60_000 })("the history migration", (it) => {
  it.effect("opens one version per live row as of its updated_at", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const migration = yield* migrateUpTo("_history.sql")
      yield* sql`
        INSERT INTO crm.financial_accounts (id, updated_at, deleted_at, balance_in_cents, source, raw) VALUES
          ('fa_live', '2026-01-05T10:00:00Z', NULL, 500, 'crawl', '{"id": "fa_live", "balance_in_cents": 500}'),
          ('fa_gone', '2026-01-04T10:00:00Z', '2026-01-06T00:00:00Z', 1, 'crawl', '{"id": "fa_gone"}')`
      yield* sql`
        INSERT INTO crm.households (id, name, source, synced_at, raw)
        VALUES ('hh_m', 'Smith', 'crawl', '2026-01-02T00:00:00Z', '{"id": "hh_m", "name": "Smith"}')`
      yield* migration.applyIt

      const accounts = yield* sql<{ id: string; valid_from: Date; is_current: boolean; balance_in_cents: string }>`
        SELECT id, valid_from, is_current, balance_in_cents::text AS balance_in_cents FROM crm_history.financial_accounts`
      assert.deepStrictEqual(accounts, [
        { id: "fa_live", valid_from: new Date("2026-01-05T10:00:00Z"), is_current: true, balance_in_cents: "500" }
      ])
      const households = yield* sql<{ valid_from: Date; name: string }>`
        SELECT valid_from, name FROM crm_history.households WHERE id = 'hh_m'`
      assert.deepStrictEqual(households, [{ valid_from: new Date("2026-01-02T00:00:00Z"), name: "Smith" }])

      yield* migrateFrom(migrationsDirectory)
      const after = yield* sql<{ id: string; valid_from: Date; is_current: boolean; deleted: boolean }>`
        SELECT id, valid_from, is_current, deleted FROM crm_history.financial_accounts ORDER BY id`
      assert.deepStrictEqual(after, [
        { id: "fa_gone", valid_from: new Date("2026-01-06T00:00:00Z"), is_current: true, deleted: true },
        { id: "fa_live", valid_from: new Date("2026-01-05T10:00:00Z"), is_current: true, deleted: false }
      ])
      const [ended] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM crm_history.financial_accounts_ended`
      assert.strictEqual(ended?.n, 0)

      const warehouse = yield* Effect.provide(Effect.service(Warehouse), Warehouse.layer)
      yield* warehouse.upsert(
        "financial_accounts",
        [{ ...resourceFixture("financial_account"), id: "fa_live", updated_at: "2026-01-07T00:00:00Z" }],
        { source: "crawl" }
      )
      const chain = yield* sql<{ valid_to: Date | null; is_current: boolean }>`
        SELECT valid_to, is_current FROM crm_history.financial_accounts WHERE id = 'fa_live' ORDER BY valid_from`
      assert.deepStrictEqual(chain, [
        { valid_to: new Date("2026-01-07T00:00:00Z"), is_current: false },
        { valid_to: null, is_current: true }
      ])
    })
  )
})
