/**
 * The warehouse as analysts meet it in psql, dbt or a BI tool: every table and column of schema
 * `crm` carries a comment (declared in src/warehouse/resources/, held to the migrations by
 * Declarations.integration.test.ts).
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { readCatalog } from "../support/Catalog.ts"
import { TestDatabase } from "../support/TestDatabase.ts"

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
      // Migration 0025: the history's tables, their own columns and the record's.
      assert.include(comment("history_financial_accounts", "valid_to"), "NULL for the current version")
      assert.include(comment("history_financial_accounts", "balance_in_cents"), "cents")
      assert.include(comment("history_annuity_contracts", "values"), "values")
    })
  )
})
