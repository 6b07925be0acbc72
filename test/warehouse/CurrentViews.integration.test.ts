/**
 * The analysts' views: crm.current_<table> for every table with deleted_at, the table's columns
 * and comments, without the deleted rows; readable by the reader role's grants like the tables.
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { tableStats } from "../../src/warehouse/Warehouse.ts"
import { TestDatabase } from "../support/TestDatabase.ts"

layer(TestDatabase)("current-row views", (it) => {
  it.effect("each table with deleted_at has crm.current_<table>: its columns, its comments, no deleted rows", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const columns = yield* sql<{ relation: string; kind: string; columns: string; comments: number }>`
        SELECT c.relname AS relation, c.relkind::text AS kind,
               string_agg(a.attname, ',' ORDER BY a.attnum) AS columns,
               count(col_description(c.oid, a.attnum))::int AS comments
        FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        WHERE c.relnamespace = 'crm'::regnamespace AND c.relkind IN ('r', 'v')
        GROUP BY c.relname, c.relkind`
      const tables = new Map(columns.filter((row) => row.kind === "r").map((row) => [row.relation, row]))
      const views = new Map(columns.filter((row) => row.kind === "v").map((row) => [row.relation, row]))
      const withDeletedAt = [...tables.values()].filter((row) => row.columns.split(",").includes("deleted_at"))
      assert.isAbove(withDeletedAt.length, 10)
      assert.sameMembers(
        [...views.keys()],
        withDeletedAt.map((row) => `current_${row.relation}`)
      )
      for (const table of withDeletedAt) {
        const view = views.get(`current_${table.relation}`)!
        assert.strictEqual(
          view.columns,
          table.columns,
          `current_${table.relation} has the columns of ${table.relation}`
        )
        assert.strictEqual(view.comments, table.comments, `current_${table.relation} carries the column comments`)
      }

      yield* sql`INSERT INTO crm.books (id, name, source, deleted_at) VALUES
                   ('book_view_live', 'Live', 'backfill', NULL), ('book_view_gone', 'Gone', 'backfill', now())`
      const current = yield* sql<{ id: string }>`
        SELECT id FROM crm.current_books WHERE id LIKE 'book_view_%' ORDER BY id`
      assert.deepStrictEqual(
        current.map((row) => row.id),
        ["book_view_live"]
      )
      const [comment] = yield* sql<{ comment: string }>`
        SELECT obj_description('crm.current_books'::regclass, 'pg_class') AS comment`
      assert.include(comment!.comment, "not deleted")

      // `status` counts the tables, not the views over them.
      const stats = yield* tableStats
      assert.isTrue(stats.some((row) => row.table === "books"))
      assert.isFalse(stats.some((row) => row.table.startsWith("current_")))
    })
  )
})
