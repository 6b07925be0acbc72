/**
 * The warehouse as analysts meet it in psql, dbt or a BI tool: every table and column of schema
 * `crm` carries a comment (declared in src/warehouse/resources/, held to the migrations by
 * Declarations.integration.test.ts), and so does every table and column of schema `crm_history`.
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { readCatalog } from "../support/Catalog.ts"
import { SqlClient, TestDatabase } from "../support/TestDatabase.ts"

layer(TestDatabase, { timeout: 60_000, excludeTestServices: true })("the warehouse catalog", (it) => {
  it.effect("every crm table and column has a comment", () =>
    Effect.gen(function* () {
      const catalog = yield* readCatalog
      assert.isAtLeast(catalog.length, 30)
      assert.deepStrictEqual(
        catalog.filter((table) => (table.comment ?? "").trim() === "").map((table) => table.table),
        []
      )
      assert.deepStrictEqual(
        catalog.flatMap((table) =>
          table.columns
            .filter((column) => (column.comment ?? "").trim() === "")
            .map((column) => `${table.table}.${column.name}`)
        ),
        []
      )
      const comment = (table: string, column: string) =>
        catalog.find((t) => t.table === table)?.columns.find((c) => c.name === column)?.comment ?? ""
      assert.include(comment("financial_accounts", "balance_in_cents"), "cents")
      // Migration 0020: what a client's updated_at and a deleted task's deleted_at hold.
      assert.include(comment("clients", "updated_at"), "first signed time")
      assert.include(comment("tasks", "deleted_at"), "in the CRM's clock")
      // Migration 0023: a client's fields are ordered one by one.
      assert.include(comment("clients", "field_signed_at"), "changed_fields")
    })
  )

  it.effect("every crm_history table, view and column has a comment (migrations 0025, 0028)", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const columns = yield* sql<{ table_name: string; column_name: string; comment: string | null }>`
        SELECT c.table_name, c.column_name,
               col_description(format('%I.%I', c.table_schema, c.table_name)::regclass, c.ordinal_position) AS comment
        FROM information_schema.columns c
        JOIN information_schema.tables t USING (table_schema, table_name)
        WHERE c.table_schema = 'crm_history' AND t.table_type IN ('BASE TABLE', 'VIEW')`
      assert.isAtLeast(new Set(columns.map((row) => row.table_name)).size, 11)
      assert.deepStrictEqual(
        columns.filter((row) => (row.comment ?? "").trim() === "").map((row) => `${row.table_name}.${row.column_name}`),
        []
      )
      const comment = (table: string, column: string) =>
        columns.find((row) => row.table_name === table && row.column_name === column)?.comment ?? ""
      assert.include(comment("financial_accounts", "valid_to"), "NULL for the current version")
      assert.include(comment("financial_accounts", "is_current"), "the row of crm.financial_accounts")
      assert.include(comment("financial_accounts_ended", "valid_to"), "When the next version took effect")
      assert.include(comment("financial_accounts", "balance_in_cents"), "cents")
      assert.include(comment("annuity_contracts", "values"), "values")
    })
  )
})
