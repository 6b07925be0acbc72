/**
 * The `COMMENT ON` statements of schema `crm`, generated from the table declarations
 * (src/warehouse/resources/): a table's comment, then each column's, in the form migration 0017
 * wrote them. Migrations stay hand-written: `npm run sql:comments -- <table> ...` prints the
 * statements of the named tables (all when none is named) to paste into a new migration, and
 * test/warehouse/Declarations.integration.test.ts fails while a migration and a declaration
 * disagree. A table's `crm.current_<table>` view copies the comments when the migration ends with
 * `SELECT crm_sync.refresh_current_views();`.
 */
import { Declarations, type TableDeclaration } from "../src/warehouse/Tables.ts"

const literal = (text: string) => `'${text.replace(/'/g, "''")}'`

/** The statements for these tables, one a line. */
export const commentStatements = (tables: ReadonlyArray<TableDeclaration>): string =>
  tables
    .flatMap((table) => [
      `COMMENT ON TABLE crm.${table.table} IS ${literal(table.comment)};`,
      ...table.columns.map(
        (column) => `COMMENT ON COLUMN crm.${table.table}."${column.name}" IS ${literal(column.comment)};`
      )
    ])
    .join("\n")

const main = (names: ReadonlyArray<string>) => {
  const unknown = names.filter((name) => !Declarations.some((table) => table.table === name))
  if (unknown.length > 0) {
    console.error(`not a declared table of schema crm: ${unknown.join(", ")}`)
    process.exitCode = 2
    return
  }
  const tables = names.length === 0 ? Declarations : Declarations.filter((table) => names.includes(table.table))
  console.log(commentStatements(tables))
}

if (import.meta.main) main(process.argv.slice(2))
