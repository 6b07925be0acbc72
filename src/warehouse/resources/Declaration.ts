/**
 * How a warehouse table is declared, once: each column with its SQL type, nullability and comment,
 * next to how a record fills it. `define` turns a resource's declaration into the descriptor that
 * `BatchSql.ts` writes from (its typed columns and child tables) and into the catalog entry
 * (`TableDeclaration`) from which the column comments and the ERD are generated
 * (scripts/comments.ts, scripts/erd.ts) and against which the migrated database is checked
 * (test/warehouse/Declarations.integration.test.ts). Migrations stay hand-written SQL.
 */
import type { Schema } from "effect"

/** The PostgreSQL types a typed column can have. */
export type PgType = "text" | "text[]" | "integer" | "bigint" | "numeric" | "boolean" | "date" | "timestamptz" | "jsonb"

/** A column's type in the catalog: a typed column's, or the domain of the common `source` column. */
export type SqlType = PgType | "crm.sync_source"

/** A declared type as PostgreSQL's catalog names it (information_schema.columns, format_type). */
export const catalogType = (type: SqlType): string => (type === "timestamptz" ? "timestamp with time zone" : type)

export interface Column<T extends SqlType = PgType> {
  readonly type: T
  readonly comment: string
  /** `NOT NULL` in the migration (a key, or a value every row has). */
  readonly notNull: boolean
  /** Computed by PostgreSQL (`GENERATED ALWAYS AS ... STORED`): declared, never written. */
  readonly generated: boolean
}

export const column = <T extends SqlType = PgType>(
  type: T,
  comment: string,
  options: { readonly notNull?: boolean; readonly generated?: boolean } = {}
): Column<T> => ({ type, comment, notNull: options.notNull ?? false, generated: options.generated ?? false })

export interface DeclaredColumn extends Column<SqlType> {
  readonly name: string
}

/** A table of schema `crm` as the migrations must have made it. */
export interface TableDeclaration {
  readonly table: string
  readonly comment: string
  readonly columns: ReadonlyArray<DeclaredColumn>
  readonly primaryKey: ReadonlyArray<string>
  /** Foreign keys: `column` references `table`'s id. */
  readonly references: ReadonlyArray<{ readonly column: string; readonly table: string }>
}

const declared = (columns: Readonly<Record<string, Column<SqlType>>>): ReadonlyArray<DeclaredColumn> =>
  Object.entries(columns).map(([name, declaration]) => ({ name, ...declaration }))

/** The columns a descriptor writes: the declared ones PostgreSQL does not compute. */
const written = (columns: Readonly<Record<string, Column>>): Readonly<Record<string, PgType>> =>
  Object.fromEntries(Object.entries(columns).flatMap(([name, c]) => (c.generated ? [] : [[name, c.type]])))

/** A table outside the resource descriptors (written by its own module), declared for the catalog. */
export const table = (declaration: {
  readonly table: string
  readonly comment: string
  readonly columns: Readonly<Record<string, Column<SqlType>>>
  readonly primaryKey: ReadonlyArray<string>
}): TableDeclaration => ({ ...declaration, columns: declared(declaration.columns), references: [] })

/** A row as sent to PostgreSQL: column name to JSON value (absent keys become NULL). */
export type Row = Readonly<Record<string, unknown>>

/** The tables holding records that only ever arrive as references (`{id, name}`) inside others. */
export type ReferenceResource = "users" | "teams" | "households"

/**
 * A child table `<parent>_<list>`: its rows are derived from the parent record and replaced, all of
 * them, whenever the parent is written. `list` is the parent's key holding the list: when the
 * received object lacks that key (a meeting read has no `contacts`, spec §2.6), the stored child
 * rows are left as they were; when it is present, even empty, they are replaced.
 */
export interface ChildTable<R> {
  readonly table: string
  /** The column holding the parent's id (`<parent>_id`). */
  readonly parentColumn: string
  readonly list: string
  /** The columns written from `rows`, besides the parent column. */
  readonly columns: Readonly<Record<string, PgType>>
  /** The rows for one parent, without the parent column, each with its `ordinal`. */
  readonly rows: (record: R) => ReadonlyArray<Row>
  readonly declaration: TableDeclaration
}

/** A reference record seen inside another (a meeting's household, a book's user). */
export interface Sighting {
  readonly resource: ReferenceResource
  /** `{id, ...fields}` with only the fields actually known (no nulls): the merge keeps the rest. */
  readonly record: Row & { readonly id: string }
}

export interface TableDescriptor<R> {
  readonly table: string
  /**
   * `record` tables follow their record's `updated_at` (forward-only, older snapshots skipped);
   * `reference` tables merge what each sighting adds (there is no `updated_at` to order them by).
   */
  readonly kind: "record" | "reference"
  readonly schema: Schema.Decoder<R>
  /** The key of the received object holding the id (for records that fail to decode). */
  readonly idKey: string
  readonly id: (record: R) => string
  /** The record's own `updated_at`, or null where the API gives none. */
  readonly updatedAt: (record: R) => string | null
  /** The typed columns written from `row` (the common columns are set by the SQL). */
  readonly columns: Readonly<Record<string, PgType>>
  readonly row: (record: R) => Row
  readonly children: ReadonlyArray<ChildTable<R>>
  readonly sightings: (record: R) => ReadonlyArray<Sighting>
  /**
   * Columns that only some reads return (a meeting's `event_participants`: the single-meeting read
   * has them, event snapshots do not): a snapshot without the key keeps the stored value.
   */
  readonly keptWhenAbsent: ReadonlyArray<string>
  readonly declaration: TableDeclaration
}

/**
 * The columns every resource table has, set by the batch SQL rather than read from the record:
 * `id` first, then the record's typed columns, then these.
 */
export const commonColumns = {
  id: column("text", "The record's id, opaque, as the CRM gives it (spec §2.1).", { notNull: true }),
  updated_at: column(
    "timestamptz",
    "When the record last changed, as the CRM reports it; null where the API gives none, and on tombstones. A write never replaces a newer updated_at with an older one."
  ),
  deleted_at: column(
    "timestamptz",
    "When the CRM deleted the record (its event) or crm-sync learned it was gone (a 404, or absence from two clean listings); null while it exists."
  ),
  synced_at: column("timestamptz", "When crm-sync last wrote this row.", { notNull: true }),
  source: column("crm.sync_source", "What last wrote the row: poll, crawl, webhook, write, backfill or reconcile.", {
    notNull: true
  }),
  raw: column("jsonb", "The record exactly as last received, unknown fields included.")
} as const

export type CommonColumn = keyof typeof commonColumns

/** The comment of the parent column of a child table. */
const parentComment = (parent: string) => `The parent row: ${parent}.id.`

export interface ChildDefinition<R> {
  readonly table: string
  readonly comment: string
  readonly parentColumn: string
  /** The parent column's comment, where more than `The parent row: <parent>.id.` */
  readonly parentComment?: string
  readonly list: string
  readonly columns: Readonly<Record<string, Column>>
  /** The key after the parent column; `ordinal` unless the rows are numbered within a nested list. */
  readonly key?: ReadonlyArray<string>
  readonly rows: (record: R) => ReadonlyArray<Row>
}

const child = <R>(parent: string, definition: ChildDefinition<R>): ChildTable<R> => ({
  table: definition.table,
  parentColumn: definition.parentColumn,
  list: definition.list,
  columns: written(definition.columns),
  rows: definition.rows,
  declaration: {
    table: definition.table,
    comment: definition.comment,
    columns: declared({
      [definition.parentColumn]: column("text", definition.parentComment ?? parentComment(parent), { notNull: true }),
      ...definition.columns
    }),
    primaryKey: [definition.parentColumn, ...(definition.key ?? ["ordinal"])],
    references: [{ column: definition.parentColumn, table: parent }]
  }
})

export interface Definition<R> {
  readonly table: string
  /** The table's comment (`COMMENT ON TABLE`). */
  readonly comment: string
  readonly kind?: "record" | "reference"
  readonly schema: Schema.Decoder<R>
  readonly idKey?: string
  readonly id?: (record: R) => string
  readonly updatedAt?: (record: R) => string | null
  /** Typed columns read straight from the record's field of the same name. */
  readonly fields: { readonly [K in keyof R & string]?: Column }
  /** Typed columns computed from the record (a nested object's id, a flag). */
  readonly derived?: Readonly<Record<string, readonly [Column, (record: R) => unknown]>>
  /**
   * Columns the descriptor does not write: computed by PostgreSQL, or written by a module of their
   * own (a client's `field_signed_at`, ClientWrites.ts). Declared after the typed columns.
   */
  readonly other?: Readonly<Record<string, Column>>
  /** What this table's common columns hold, where it differs from `commonColumns`. */
  readonly common?: { readonly [K in CommonColumn]?: string }
  readonly children?: ReadonlyArray<ChildDefinition<R>>
  readonly sightings?: (record: R) => ReadonlyArray<Sighting>
  readonly keptWhenAbsent?: ReadonlyArray<keyof R & string>
}

export const define = <R>(definition: Definition<R>): TableDescriptor<R> => {
  const fieldNames = Object.keys(definition.fields) as unknown as ReadonlyArray<keyof R & string>
  const derived = Object.entries(definition.derived ?? {})
  const typed: Record<string, Column> = {}
  for (const name of fieldNames) typed[name] = definition.fields[name]!
  for (const [name, [declaration]] of derived) typed[name] = declaration
  const common = (name: CommonColumn): Column<SqlType> => ({
    ...commonColumns[name],
    comment: definition.common?.[name] ?? commonColumns[name].comment
  })
  const { id, ...rest } = Object.fromEntries(
    (Object.keys(commonColumns) as ReadonlyArray<CommonColumn>).map((name) => [name, common(name)])
  )
  return {
    table: definition.table,
    kind: definition.kind ?? "record",
    schema: definition.schema,
    idKey: definition.idKey ?? "id",
    id: definition.id ?? ((record) => (record as { readonly id: string }).id),
    updatedAt:
      definition.updatedAt ?? ((record) => (record as { readonly updated_at?: string | null }).updated_at ?? null),
    columns: written(typed),
    row: (record) => {
      const row: Record<string, unknown> = {}
      for (const name of fieldNames) row[name] = record[name]
      for (const [name, [, get]] of derived) row[name] = get(record)
      return row
    },
    children: (definition.children ?? []).map((c) => child(definition.table, c)),
    sightings: definition.sightings ?? (() => []),
    keptWhenAbsent: definition.keptWhenAbsent ?? [],
    declaration: {
      table: definition.table,
      comment: definition.comment,
      columns: declared({ id: id!, ...typed, ...definition.other, ...rest }),
      primaryKey: ["id"],
      references: []
    }
  }
}
