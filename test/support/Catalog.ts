/**
 * Schema `crm` as a migrated database describes it (information_schema.columns, col_description,
 * its keys), in the shape of the declarations of src/warehouse/resources/, and the differences
 * between the two, each naming its table and column.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { catalogType } from "../../src/warehouse/resources/Declaration.ts"
import type { TableDeclaration } from "../../src/warehouse/Tables.ts"

export interface CatalogColumn {
  readonly name: string
  /** information_schema's data type; a domain as `schema.name`, an array as `<element>[]`. */
  readonly type: string
  readonly notNull: boolean
  readonly generated: boolean
  readonly comment: string | null
}

export interface CatalogTable {
  readonly table: string
  readonly comment: string | null
  readonly columns: ReadonlyArray<CatalogColumn>
  readonly primaryKey: ReadonlyArray<string>
  readonly references: ReadonlyArray<{ readonly column: string; readonly table: string }>
}

/** Every base table of schema `crm` (not the `current_*` views), by name. */
export const readCatalog = Effect.gen(function* () {
  const sql = yield* SqlClient
  const tables = yield* sql<{ table: string; comment: string | null }>`
    SELECT t.table_name AS table, obj_description(format('crm.%I', t.table_name)::regclass, 'pg_class') AS comment
    FROM information_schema.tables t
    WHERE t.table_schema = 'crm' AND t.table_type = 'BASE TABLE' ORDER BY t.table_name`
  const columns = yield* sql<{
    table: string
    name: string
    type: string
    not_null: boolean
    generated: boolean
    comment: string | null
  }>`
    SELECT c.table_name AS table, c.column_name AS name,
           CASE WHEN c.domain_name IS NOT NULL THEN c.domain_schema || '.' || c.domain_name
                WHEN c.data_type = 'ARRAY' THEN substr(c.udt_name, 2) || '[]'
                ELSE c.data_type END AS type,
           c.is_nullable = 'NO' AS not_null, c.is_generated = 'ALWAYS' AS generated,
           col_description(format('crm.%I', c.table_name)::regclass, c.ordinal_position::int) AS comment
    FROM information_schema.columns c
    WHERE c.table_schema = 'crm' ORDER BY c.table_name, c.ordinal_position`
  const keys = yield* sql<{ table: string; column: string; kind: string; parent: string | null }>`
    SELECT c.relname AS table, a.attname AS column, k.contype AS kind, p.relname AS parent
    FROM pg_constraint k
    JOIN pg_class c ON c.oid = k.conrelid
    LEFT JOIN pg_class p ON p.oid = k.confrelid
    CROSS JOIN LATERAL unnest(k.conkey) WITH ORDINALITY AS key(attnum, position)
    JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = key.attnum
    WHERE k.connamespace = 'crm'::regnamespace AND k.contype IN ('p', 'f')
    ORDER BY c.relname, k.contype, key.position`
  return tables.map((table): CatalogTable => ({
    table: table.table,
    comment: table.comment,
    columns: columns
      .filter((column) => column.table === table.table)
      .map(({ name, type, not_null, generated, comment }) => ({ name, type, notNull: not_null, generated, comment })),
    primaryKey: keys.filter((key) => key.table === table.table && key.kind === "p").map((key) => key.column),
    references: keys
      .filter((key) => key.table === table.table && key.kind === "f")
      .map((key) => ({ column: key.column, table: key.parent! }))
  }))
})

const listed = (names: ReadonlyArray<string>) => `(${names.join(", ")})`
const quoted = (text: string | null) => (text === null ? "none" : JSON.stringify(text))

/** How one declared table and its migrated counterpart differ, one line per difference. */
const tableDifferences = (declared: TableDeclaration, migrated: CatalogTable): ReadonlyArray<string> => {
  const at = `crm.${declared.table}`
  const out: Array<string> = []
  if (declared.comment !== migrated.comment) {
    out.push(`${at}: table comment declared ${quoted(declared.comment)}, migrated ${quoted(migrated.comment)}`)
  }
  for (const column of declared.columns) {
    const actual = migrated.columns.find((c) => c.name === column.name)
    const here = `${at}.${column.name}`
    if (actual === undefined) {
      out.push(`${here}: declared ${catalogType(column.type)}, but no migration creates it`)
      continue
    }
    if (catalogType(column.type) !== actual.type) {
      out.push(`${here}: declared ${catalogType(column.type)}, migrated ${actual.type}`)
    }
    if (column.notNull !== actual.notNull) {
      out.push(
        `${here}: declared ${column.notNull ? "NOT NULL" : "nullable"}, migrated ${actual.notNull ? "NOT NULL" : "nullable"}`
      )
    }
    if (column.generated !== actual.generated) {
      out.push(
        `${here}: declared ${column.generated ? "generated" : "written"}, migrated ${actual.generated ? "generated" : "written"}`
      )
    }
    if (column.comment !== actual.comment) {
      out.push(`${here}: comment declared ${quoted(column.comment)}, migrated ${quoted(actual.comment)}`)
    }
  }
  for (const column of migrated.columns) {
    if (!declared.columns.some((c) => c.name === column.name)) {
      out.push(`${at}.${column.name}: migrated (${column.type}), but not declared`)
    }
  }
  if (listed(declared.primaryKey) !== listed(migrated.primaryKey)) {
    out.push(`${at}: primary key declared ${listed(declared.primaryKey)}, migrated ${listed(migrated.primaryKey)}`)
  }
  const references = (list: CatalogTable["references"]) =>
    listed(list.map((reference) => `${reference.column} -> ${reference.table}`).toSorted())
  if (references(declared.references) !== references(migrated.references)) {
    out.push(
      `${at}: references declared ${references(declared.references)}, migrated ${references(migrated.references)}`
    )
  }
  return out
}

/** Every difference between the declarations and the migrated catalog; empty when they agree. */
export const differences = (
  declarations: ReadonlyArray<TableDeclaration>,
  catalog: ReadonlyArray<CatalogTable>
): ReadonlyArray<string> => [
  ...declarations.flatMap((declared) => {
    const migrated = catalog.find((table) => table.table === declared.table)
    return migrated === undefined
      ? [`crm.${declared.table}: declared, but no migration creates it`]
      : tableDifferences(declared, migrated)
  }),
  ...catalog
    .filter((migrated) => !declarations.some((declared) => declared.table === migrated.table))
    .map((migrated) => `crm.${migrated.table}: migrated, but not declared (src/warehouse/resources/)`)
]
