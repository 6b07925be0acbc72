/**
 * The warehouse as analysts meet it in psql, dbt or a BI tool: every table and column of schema
 * `crm` carries a comment, and docs/warehouse.md's diagram is the one generated from the migrated
 * catalog (`npm run docs:erd`), so neither can fall behind a migration.
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { readFileSync } from "node:fs"
import { readCatalog, renderErd, warehouseDoc, withErd } from "../../scripts/erd.ts"
import { TestDatabase } from "../support/TestDatabase.ts"

layer(TestDatabase, { timeout: 60_000, excludeTestServices: true })("the warehouse catalog", (it) => {
  it.effect("every crm table and column has a comment", () =>
    Effect.gen(function* () {
      const catalog = yield* readCatalog
      assert.isAtLeast(catalog.tables.length, 30)
      assert.deepStrictEqual(
        catalog.tables.filter((table) => (table.comment ?? "").trim() === "").map((table) => table.name),
        []
      )
      assert.deepStrictEqual(
        catalog.columns
          .filter((column) => (column.comment ?? "").trim() === "")
          .map((column) => `${column.table}.${column.column}`),
        []
      )
      const balance = catalog.columns.find(
        (column) => column.table === "financial_accounts" && column.column === "balance_in_cents"
      )
      assert.include(balance?.comment ?? "", "cents")
      // Migration 0020: what a client's updated_at and a deleted task's deleted_at hold.
      const comment = (table: string, column: string) =>
        catalog.columns.find((c) => c.table === table && c.column === column)?.comment ?? ""
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

  it.effect("docs/warehouse.md holds the diagram generated from the catalog (npm run docs:erd)", () =>
    Effect.gen(function* () {
      const catalog = yield* readCatalog
      const document = readFileSync(warehouseDoc, "utf8")
      const expected = yield* withErd(document, renderErd(catalog))
      assert.strictEqual(document, expected, "docs/warehouse.md is out of date: run npm run docs:erd")
      for (const reference of catalog.references) {
        assert.include(document, `${reference.parent} ||--o{ ${reference.child}`)
      }
    })
  )
})
