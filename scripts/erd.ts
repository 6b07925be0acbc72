/**
 * The warehouse's entity-relationship diagram, generated from the catalog of a migrated database:
 * every table of schema `crm` with its key and reference columns, each foreign key as a
 * relationship, and the table's comment. `npm run docs:erd` migrates a throwaway embedded
 * PostgreSQL (or `DATABASE_URL`) and writes the diagram into docs/warehouse.md between its
 * `erd` markers; test/warehouse/Catalog.integration.test.ts fails when the two differ, so the
 * document cannot drift from the migrations.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Redacted } from "effect"
import { Reactivity } from "effect/reactivity"
import { SqlClient } from "effect/sql/SqlClient"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as prettier from "prettier"
import { acquireEmbeddedDatabase } from "../src/warehouse/EmbeddedDatabase.ts"
import { migrate } from "../src/warehouse/Migrations.ts"

export interface CatalogColumn {
  readonly table: string
  readonly column: string
  readonly type: string
  readonly nullable: boolean
  readonly comment: string | null
  readonly primaryKey: boolean
}

export interface CatalogReference {
  readonly child: string
  readonly column: string
  readonly parent: string
}

export interface Catalog {
  readonly tables: ReadonlyArray<{ readonly name: string; readonly comment: string | null }>
  readonly columns: ReadonlyArray<CatalogColumn>
  readonly references: ReadonlyArray<CatalogReference>
}

/**
 * A table's name in the diagram: its own for schema `crm`, `history_<table>` for schema
 * `crm_history` (Mermaid's entity names take no dot).
 */
const NAME = `CASE WHEN c.relnamespace = 'crm'::regnamespace THEN c.relname ELSE 'history_' || c.relname END`
const SCHEMAS = `c.relnamespace IN ('crm'::regnamespace, 'crm_history'::regnamespace)`

/** Schemas `crm` and `crm_history` as the database describes them. */
export const readCatalog = Effect.gen(function* () {
  const sql = yield* SqlClient
  const tables = yield* sql<{ name: string; comment: string | null }>`
    SELECT ${sql.literal(NAME)} AS name, obj_description(c.oid, 'pg_class') AS comment
    FROM pg_class c WHERE ${sql.literal(SCHEMAS)} AND c.relkind = 'r' ORDER BY c.relnamespace, c.relname`
  const columns = yield* sql<{
    table: string
    column: string
    type: string
    nullable: boolean
    comment: string | null
    primary_key: boolean
  }>`
    SELECT ${sql.literal(NAME)} AS table, a.attname AS column, format_type(a.atttypid, a.atttypmod) AS type,
           NOT a.attnotnull AS nullable, col_description(c.oid, a.attnum) AS comment,
           EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conrelid = c.oid AND k.contype = 'p'
                   AND a.attnum = ANY (k.conkey)) AS primary_key
    FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
    WHERE ${sql.literal(SCHEMAS)} AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
    ORDER BY c.relnamespace, c.relname, a.attnum`
  const references = yield* sql<{ child: string; column: string; parent: string }>`
    SELECT c.relname AS child, a.attname AS column, p.relname AS parent
    FROM pg_constraint k
    JOIN pg_class c ON c.oid = k.conrelid JOIN pg_class p ON p.oid = k.confrelid
    JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = k.conkey[1]
    WHERE k.contype = 'f' AND k.connamespace = 'crm'::regnamespace ORDER BY c.relname, a.attname`
  return {
    tables,
    columns: columns.map(({ primary_key, ...column }) => ({ ...column, primaryKey: primary_key })),
    references
  } satisfies Catalog
})

/** Mermaid's attribute type: one word. */
const mermaidType = (type: string) => type.replace(/\[\]$/, "_array").replace(/[^A-Za-z0-9_]+/g, "_")

/** A column worth drawing: a key, or a reference to another record. */
const drawn = (column: CatalogColumn) => column.primaryKey || column.column === "id" || column.column.endsWith("_id")

/** The diagram (Mermaid `erDiagram`) and, under it, each table's comment. */
export const renderErd = (catalog: Catalog): string => {
  const lines = ["```mermaid", "erDiagram"]
  for (const reference of catalog.references) {
    lines.push(`  ${reference.parent} ||--o{ ${reference.child} : "${reference.column}"`)
  }
  for (const table of catalog.tables) {
    const keys = catalog.columns.filter((column) => column.table === table.name && drawn(column))
    const others = catalog.columns.filter((column) => column.table === table.name && !drawn(column)).length
    lines.push(`  ${table.name} {`)
    for (const column of keys) {
      const marks = [
        ...(column.primaryKey ? ["PK"] : []),
        ...(catalog.references.some((r) => r.child === table.name && r.column === column.column) ? ["FK"] : [])
      ]
      lines.push(`    ${mermaidType(column.type)} ${column.column}${marks.length === 0 ? "" : ` ${marks.join(", ")}`}`)
    }
    if (others > 0) lines.push(`    columns more_${others}`)
    lines.push("  }")
  }
  lines.push("```", "", "| table | what it holds |", "| --- | --- |")
  for (const table of catalog.tables) {
    const qualified = table.name.startsWith("history_") ? `crm_history.${table.name.slice(8)}` : `crm.${table.name}`
    lines.push(`| \`${qualified}\` | ${(table.comment ?? "").replace(/\|/g, "\\|")} |`)
  }
  return lines.join("\n")
}

export const ERD_START = "<!-- erd:start (generated by npm run docs:erd from the migrated catalog; do not edit) -->"
export const ERD_END = "<!-- erd:end -->"

export const warehouseDoc = new URL("../docs/warehouse.md", import.meta.url)

/** `document` with its generated part replaced by `erd`, formatted as the repository formats Markdown. */
export const withErd = (document: string, erd: string) =>
  Effect.promise(async () => {
    const start = document.indexOf(ERD_START)
    const end = document.indexOf(ERD_END)
    if (start === -1 || end === -1) throw new Error(`docs/warehouse.md has no ${ERD_START} … ${ERD_END} markers`)
    const text = `${document.slice(0, start + ERD_START.length)}\n\n${erd}\n\n${document.slice(end)}`
    const options = await prettier.resolveConfig(warehouseDoc)
    return prettier.format(text, { ...options, parser: "markdown" })
  })

const main = Effect.gen(function* () {
  const url = process.env.DATABASE_URL
  const folder = url === undefined ? mkdtempSync(join(tmpdir(), "crm-sync-erd-")) : undefined
  yield* Effect.addFinalizer(() =>
    Effect.sync(() => folder !== undefined && rmSync(folder, { recursive: true, force: true }))
  )
  const database = url === undefined ? (yield* acquireEmbeddedDatabase(folder!)).url : Redacted.make(url)
  const sql = yield* PgClient.make({ url: database })
  const catalog = yield* Effect.andThen(migrate, readCatalog).pipe(Effect.provideService(SqlClient, sql))
  const document = readFileSync(warehouseDoc, "utf8")
  writeFileSync(warehouseDoc, yield* withErd(document, renderErd(catalog)))
  console.log(`docs/warehouse.md: ${catalog.tables.length} tables, ${catalog.references.length} relationships`)
}).pipe(Effect.scoped, Effect.provide(Reactivity.layer))

if (import.meta.main) Effect.runPromise(main)
