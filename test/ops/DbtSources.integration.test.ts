/**
 * ops/dbt/sources.yml, for a firm's dbt project: it names every warehouse table that carries
 * `synced_at` (a new table cannot be forgotten), each as it exists after the migrations, with
 * freshness read from `synced_at`.
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { readFileSync } from "node:fs"
import { parse } from "yaml"
import { TestDatabase } from "../support/TestDatabase.ts"

interface DbtTable {
  readonly name: string
  readonly freshness?: unknown
  readonly columns?: ReadonlyArray<{ readonly name: string }>
}
interface DbtSource {
  readonly name: string
  readonly schema: string
  readonly loaded_at_field: string
  readonly freshness: { readonly warn_after: unknown; readonly error_after: unknown }
  readonly tables: ReadonlyArray<DbtTable>
}

const sources = (): ReadonlyArray<DbtSource> =>
  parse(readFileSync(new URL("../../ops/dbt/sources.yml", import.meta.url), "utf8")).sources

layer(TestDatabase)("dbt sources", (it) => {
  it.effect("list every crm table with synced_at, with freshness from synced_at", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const rows = yield* sql<{ table_name: string; column_name: string }>`
        SELECT c.table_name, c.column_name FROM information_schema.columns c
        JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
        WHERE c.table_schema = 'crm' AND t.table_type = 'BASE TABLE'`
      const columns = new Map<string, Set<string>>()
      for (const row of rows)
        columns.set(row.table_name, (columns.get(row.table_name) ?? new Set()).add(row.column_name))
      const synced = [...columns].filter(([, names]) => names.has("synced_at")).map(([table]) => table)

      const [crm] = sources()
      assert.strictEqual(crm!.schema, "crm")
      assert.strictEqual(crm!.loaded_at_field, "synced_at")
      assert.isDefined(crm!.freshness.warn_after)
      assert.sameMembers(
        crm!.tables.map((table) => table.name),
        synced
      )
      for (const table of crm!.tables) {
        for (const column of table.columns ?? []) {
          assert.isTrue(columns.get(table.name)!.has(column.name), `${table.name}.${column.name} exists`)
        }
      }

      // The history: every table and view of schema crm_history.
      const history = sources().find((source) => source.name === "crm_history")
      const relations = yield* sql<{ table_name: string }>`
        SELECT table_name FROM information_schema.tables WHERE table_schema = 'crm_history'`
      assert.strictEqual(history?.schema, "crm_history")
      assert.sameMembers(
        history!.tables.map((table) => table.name),
        relations.map((row) => row.table_name)
      )
    })
  )
})
