/**
 * The table declarations (src/warehouse/resources/) against the migrated database: every table of
 * schema `crm` and every column with its type, nullability, generation and comment, the keys and
 * the references, as declared; and the `COMMENT ON` statements generated from the declarations
 * (scripts/comments.ts) are the comments the migrations hold. A failure names the table and column.
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { commentStatements } from "../../scripts/comments.ts"
import { splitStatements } from "../../src/warehouse/Migrations.ts"
import { Declarations } from "../../src/warehouse/Tables.ts"
import { type CatalogTable, differences, readCatalog } from "../support/Catalog.ts"
import { TestDatabase } from "../support/TestDatabase.ts"

/** Removes every comment of schema crm's tables and columns. */
const clearComments = `DO $$
DECLARE r record;
BEGIN
  FOR r IN SELECT c.relname, a.attname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
           WHERE c.relnamespace = 'crm'::regnamespace AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped LOOP
    EXECUTE format('COMMENT ON COLUMN crm.%I.%I IS NULL', r.relname, r.attname);
  END LOOP;
  FOR r IN SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'crm'::regnamespace AND c.relkind = 'r' LOOP
    EXECUTE format('COMMENT ON TABLE crm.%I IS NULL', r.relname);
  END LOOP;
END
$$`

/** Every comment of the catalog, one line each: `crm.<table>[.<column>]: <comment>`. */
const comments = (catalog: ReadonlyArray<CatalogTable>): ReadonlyArray<string> =>
  catalog.flatMap((table) => [
    `crm.${table.table}: ${table.comment}`,
    ...table.columns.map((column) => `crm.${table.table}.${column.name}: ${column.comment}`)
  ])

layer(TestDatabase, { timeout: 60_000, excludeTestServices: true })("the table declarations", (it) => {
  it.effect("are the tables the migrations make: columns, types, nullability, comments and keys", () =>
    Effect.gen(function* () {
      const catalog = yield* readCatalog
      assert.isAtLeast(catalog.length, 38)
      assert.deepStrictEqual(differences(Declarations, catalog), [])
    })
  )

  it.effect("generate the COMMENT ON statements that give the migrated comments", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const migrated = comments(yield* readCatalog)
      yield* sql.unsafe(clearComments)
      assert.isTrue(comments(yield* readCatalog).every((line) => line.endsWith(": null")))
      for (const statement of splitStatements(commentStatements(Declarations))) yield* sql.unsafe(statement)
      const generated = comments(yield* readCatalog)
      assert.strictEqual(generated.length, migrated.length)
      assert.deepStrictEqual(
        generated.filter((line) => !migrated.includes(line)),
        [],
        "generated comments that are not the migrated ones"
      )
    })
  )
})
