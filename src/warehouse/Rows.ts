/**
 * Rows: how a received record becomes what the warehouse's statements take — decoded with its
 * resource's model, checked for text PostgreSQL cannot store, and turned into its parent row (as
 * JSON), its child lists' parts and the references it names. Pure: `Warehouse.prepare` runs it
 * while the database is busy with the previous batch, and the statements of WarehouseWrites and
 * ChildLists read what it kept.
 */
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import { fastDecoder, timestampMillis } from "../crm/Fields.ts"
import type { ReferenceResource, Row, Sighting, TableDescriptor } from "./Tables.ts"

export type AnyTable = TableDescriptor<any>

/**
 * A record that decoded, with what the SQL needs from it: no more. A crawl holds a few thousand
 * of these between decoding and commit, long enough for V8 to move them to its old generation,
 * and the received object and the decoded record were more than the row built from them: keeping
 * them cost the backfilling process about a tenth of its CPU in garbage collection
 * (docs/sync.md, "Benchmark").
 */
export interface Decoded {
  readonly id: string
  readonly updatedAt: string | null
  /** Its row for the batch statement, as JSON (see `recordRow`); `raw` in it is the received object. */
  readonly json: string
  /** The references it names (users, teams, households), found as it was decoded. */
  readonly sightings: ReadonlyArray<Sighting>
  /** For a table with child lists only: the received object and its decoded record, for the child rows. */
  readonly parts: Parts | undefined
}

export interface Parts {
  readonly raw: Readonly<Record<string, unknown>>
  readonly record: unknown
}

/** A record set aside: stored in `crm_sync.undecodable_records` with its error. */
export interface Rejected {
  readonly resource: string
  readonly recordId: string | null
  readonly raw: unknown
  readonly error: string
}

export const isObject = (u: unknown): u is Readonly<Record<string, unknown>> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

/**
 * Whether a JSON value holds text PostgreSQL cannot store in `jsonb`: U+0000, or a lone UTF-16
 * surrogate. Either would make the whole batch's statement fail, so the record is rejected up
 * front instead.
 */
export const hasUnstorableText = (value: unknown): boolean => {
  if (typeof value === "string") return value.includes("\u0000") || !value.isWellFormed()
  if (Array.isArray(value)) return value.some(hasUnstorableText)
  if (isObject(value)) {
    for (const key in value) if (hasUnstorableText(key) || hasUnstorableText(value[key])) return true
  }
  return false
}

const clean = (s: string) => s.replaceAll("\u0000", "\uFFFD").toWellFormed()

/** A copy that jsonb can store: U+0000 and lone surrogates become U+FFFD (only for rejected records). */
export const storable = (value: unknown): unknown => {
  if (typeof value === "string") return clean(value)
  if (Array.isArray(value)) return value.map(storable)
  if (isObject(value)) return Object.fromEntries(Object.entries(value).map(([k, v]) => [clean(k), storable(v)]))
  // undefined, functions and the like are not JSON: keep the fact, not the value.
  return value === undefined || typeof value === "function" || typeof value === "symbol" ? null : value
}

export const idOfRaw = (raw: unknown, key: string): string | null => {
  if (!isObject(raw)) return null
  const id = raw[key]
  return typeof id === "string" && id !== "" ? id : typeof id === "number" ? String(id) : null
}

const decoders = new Map<AnyTable, (input: unknown) => Result.Result<unknown, Schema.SchemaError>>()
export const decoderOf = (table: AnyTable) => {
  let decode = decoders.get(table)
  if (decode === undefined) {
    const fast = fastDecoder(table.schema)
    const run = Schema.decodeUnknownResult(table.schema)
    // The fast pass stops at the first issue (most records are valid); a record that fails is
    // decoded again with the model for every issue, which its rejection reports.
    decode = (input: unknown) => {
      const first = fast(input)
      return Result.isSuccess(first) ? first : run(input, { errors: "all" })
    }
    decoders.set(table, decode)
  }
  return decode
}

const instant = (timestamp: string | null) =>
  timestamp === null ? -Infinity : (timestampMillis(timestamp) ?? -Infinity)

const byId =
  <A>(id: (a: A) => string) =>
  (a: A, b: A) =>
    id(a) < id(b) ? -1 : id(a) > id(b) ? 1 : 0

/**
 * One record per id (ON CONFLICT cannot touch a row twice in one statement): the newest
 * `updated_at` wins, and of equals the later in the batch. The others count as skipped. Sorted by
 * id, so that concurrent writers lock shared rows in the same order and cannot deadlock.
 */
export const latestPerId = (decoded: ReadonlyArray<Decoded>): ReadonlyArray<Decoded> => {
  const latest = new Map<string, Decoded>()
  for (const item of decoded) {
    const held = latest.get(item.id)
    if (held === undefined || instant(item.updatedAt) >= instant(held.updatedAt)) latest.set(item.id, item)
  }
  return [...latest.values()].toSorted(byId((item) => item.id))
}

/**
 * Sightings per reference table, one per id, later fields laid over earlier ones; sorted by id
 * (households are shared by many records: concurrent writers must lock them in one order).
 */
export const mergeSightings = (
  sightings: ReadonlyArray<Sighting>
): Map<ReferenceResource, Array<Row & { readonly id: string }>> => {
  const byResource = new Map<ReferenceResource, Map<string, Row & { readonly id: string }>>()
  for (const { resource, record } of sightings) {
    let seen = byResource.get(resource)
    if (seen === undefined) byResource.set(resource, (seen = new Map()))
    seen.set(record.id, { ...seen.get(record.id), ...record })
  }
  const out = new Map<ReferenceResource, Array<Row & { readonly id: string }>>()
  for (const [resource, seen] of byResource) out.set(resource, [...seen.values()].toSorted(byId((r) => r.id)))
  return out
}

/** Whether a reference sighting names nothing but the id. */
export const onlyId = (record: Readonly<Record<string, unknown>>): boolean => {
  for (const key in record) if (key !== "id") return false
  return true
}

const isPlainObject = (u: unknown): u is Readonly<Record<string, unknown>> => {
  if (!isObject(u)) return false
  const proto = Object.getPrototypeOf(u)
  return proto === Object.prototype || proto === null
}

/**
 * Whether two values are the same JSON: primitives, arrays and plain objects compared by content.
 * Conservative: anything else (a Date, an `undefined` inside) counts as different.
 */
const sameJson = (a: unknown, b: unknown): boolean => {
  if (a === b) return a !== undefined
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false
    for (let i = 0; i < a.length; i++) if (!sameJson(a[i], b[i])) return false
    return true
  }
  if (!isPlainObject(a) || !isPlainObject(b)) return false
  const keys = Object.keys(a)
  if (keys.length !== Object.keys(b).length) return false
  for (const key of keys) if (!Object.hasOwn(b, key) || !sameJson(a[key], b[key])) return false
  return true
}

/**
 * The parent row of a record for `BatchSql.upsertRecords`: its typed columns are read from `raw`
 * in SQL, so only those whose decoded value is not the received one go in `typed` (a list given as
 * null decodes to `[]`, a computed column is not in `raw`). NULL and absent are the same column.
 */
export const recordRow = (
  table: AnyTable,
  raw: Readonly<Record<string, unknown>>,
  record: unknown,
  id: string,
  updatedAt: string | null
): Row => {
  const row = table.row(record)
  let typed: Record<string, unknown> | undefined
  for (const name in row) {
    const value = row[name]
    const received = Object.hasOwn(raw, name) ? raw[name] : undefined
    if ((value === null || value === undefined) && (received === null || received === undefined)) continue
    if (sameJson(value, received)) continue
    typed ??= {}
    typed[name] = value === undefined ? null : value
  }
  const base = { id, updated_at: updatedAt, raw }
  return typed === undefined ? base : { ...base, typed }
}

/** The received object of a decoded record, read back from its row where `prepare` did not keep it. */
export const rawOf = (item: Decoded): unknown =>
  item.parts?.raw ?? (JSON.parse(item.json) as { readonly raw: unknown }).raw

/** A record's parts, which `prepare` keeps for every table with child lists: only those ask. */
export const partsOf = (item: Decoded): Parts => {
  if (item.parts === undefined)
    throw new Error(`record ${item.id}: its table has child lists, but its parts were not kept`)
  return item.parts
}

export const referenceRow = (table: AnyTable, record: Row & { readonly id: string }): Row => ({
  ...table.row(record),
  id: record.id,
  raw: record
})
