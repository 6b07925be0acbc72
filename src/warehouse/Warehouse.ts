/**
 * Warehouse: every write crm-sync makes to schema `crm`, for every resource, driven by the table
 * descriptors of `Tables.ts` and the SQL of `BatchSql.ts`.
 *
 * `upsert` takes records as received (unknown JSON), decodes each with its resource's model and
 * writes the batch: one statement for the parents, then, for the parents actually written, one
 * delete and one insert per child table and one merge per reference table they mention, all in one
 * transaction (per chunk of `CHUNK_SIZE`). A record that does not decode, or that PostgreSQL
 * refuses, is stored in `crm_sync.undecodable_records` with its error and counted as `rejected`;
 * the rest of the batch is written. Nothing is dropped and one bad record never fails a batch.
 *
 * Called inside a transaction of the caller's (the webhook processor settles its inbox rows with
 * the writes), the chunk transactions become savepoints of it.
 */
import { Context, DateTime, Effect, identity, Layer, Option, Result, Schema } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { ConstraintError, isSqlError, type SqlError, UniqueViolation, UnknownError } from "effect/sql/SqlError"
import { fastDecoder, timestampMillis } from "../crm/Fields.ts"
import * as BatchSql from "./BatchSql.ts"
import type { WriteOutcome } from "./BatchSql.ts"
import {
  type ReferenceResource,
  type Resource,
  type ResourceRecord,
  type Row,
  type Sighting,
  type Source,
  type TableDescriptor,
  Tables
} from "./Tables.ts"

export type { Resource, ResourceRecord, Source } from "./Tables.ts"
export { Resources, Sources, isResource } from "./Tables.ts"

/** How many records go into one transaction; larger inputs are written chunk by chunk. */
export const CHUNK_SIZE = 1000

/** Per-record outcome counts of one `upsert`; they add up to the number of records given. */
export interface UpsertResult {
  /** New rows. */
  readonly inserted: number
  /** Rows replaced by a newer (or same-time but different) snapshot. */
  readonly updated: number
  /** Same `updated_at` and identical `raw`: nothing written. */
  readonly unchanged: number
  /** Older than the stored row (or superseded by a newer copy in the same batch): nothing written. */
  readonly skipped: number
  /** Undecodable or refused by PostgreSQL: stored in `crm_sync.undecodable_records`. */
  readonly rejected: number
}

/** An `UpsertResult` of no records. */
export const noWrites: UpsertResult = { inserted: 0, updated: 0, unchanged: 0, skipped: 0, rejected: 0 }

/** Two writes' outcomes together. */
export const addUpsertResults = (a: UpsertResult, b: UpsertResult): UpsertResult => ({
  inserted: a.inserted + b.inserted,
  updated: a.updated + b.updated,
  unchanged: a.unchanged + b.unchanged,
  skipped: a.skipped + b.skipped,
  rejected: a.rejected + b.rejected
})

export interface UpsertOptions extends WriteOptions {
  /** Per record, the time its snapshot stands for when it has no `updated_at` (see `prepare`). */
  readonly orderedAt?: ReadonlyArray<string | null>
}

export interface WriteOptions {
  readonly source: Source
  /** Reference rows a long run of writes (a crawl) already knows exist (see `KnownReferences`). */
  readonly known?: ReferenceLedger
  /**
   * Runs once, after the records (and their child rows) are written and before any reference row
   * is merged: a caller running two writes side by side holds the later one here until the
   * earlier one committed, so the two never wait on each other's reference rows (PageCrawler).
   */
  readonly beforeReferences?: Effect.Effect<void>
  /**
   * false: the caller runs the write inside a transaction of its own and, when PostgreSQL refuses
   * a record (`refusedRecord`), rolls it back and writes again without this. The write then takes
   * no savepoint per chunk — two statements fewer — and a refused record fails it instead of being
   * set aside. Default true.
   */
  readonly isolate?: boolean
}

/** What a write asks of `KnownReferences`: which references need no merging, and what it merged. */
export interface ReferenceLedger {
  has(resource: ReferenceResource, id: string): boolean
  add(references: Iterable<readonly [ReferenceResource, string]>): void
}

/**
 * The reference rows (users, teams, households) one run of writes has already merged, so that a
 * sighting that only names one (`{id}`, as every financial account names its household) is not
 * merged again batch after batch: merging a bare id into an existing row changes nothing. Each
 * transaction writes through a ledger of its own (`open`); its references become known only when
 * the caller says that transaction committed (`settle`), and `discard` forgets them. Scope one to
 * a single crawl: it does not see other writers. Ids are kept per resource, so that asking about
 * one builds no key string (once per record of a crawl).
 */
export class KnownReferences {
  readonly #settled = new Map<ReferenceResource, Set<string>>()
  /** The ledger of one transaction. */
  open(): ReferenceLedger & { settle(): void; discard(): void } {
    const settled = this.#settled
    let pending: Array<readonly [ReferenceResource, string]> = []
    return {
      has: (resource, id) => settled.get(resource)?.has(id) === true,
      add: (references) => {
        for (const reference of references) pending.push(reference)
      },
      settle: () => {
        for (const [resource, id] of pending) {
          let ids = settled.get(resource)
          if (ids === undefined) settled.set(resource, (ids = new Set()))
          ids.add(id)
        }
        pending = []
      },
      discard: () => {
        pending = []
      }
    }
  }
}

export interface DeleteResult {
  /** Rows that were live and are now marked deleted. */
  readonly deleted: number
  /** Ids never seen before, now recorded as deleted (tombstones). */
  readonly tombstoned: number
}

/** One `client.updated` delivery (spec §6.3). */
export interface ClientChange {
  readonly hookId: string
  readonly clientId: string
  readonly changedFields: ReadonlyArray<string>
  readonly receivedAt: DateTime.Utc
  readonly subscriptionId?: string | null | undefined
  readonly bookId?: string | null | undefined
}

/** How a listed record compares with its row (`Warehouse.compareListed`). */
export type ListedState = "absent" | "deleted" | "stale" | "current"

/** A live task, meeting or note as the by-id reconciliation reads it. */
export interface KnownRecord {
  readonly resource: "tasks" | "meetings" | "notes"
  readonly id: string
  readonly notable_type: string | null
  readonly notable_id: string | null
  readonly household_id: string | null
  /** When crm-sync last wrote the row, epoch milliseconds. */
  readonly synced_ms: number
}

/** A stored row, with its record decoded from `raw` (null for a tombstone). */
export interface StoredRecord<R extends Resource> {
  readonly id: string
  readonly updatedAt: Date | null
  readonly deletedAt: Date | null
  readonly syncedAt: Date
  readonly source: Source
  readonly raw: unknown
  readonly record: ResourceRecord<R> | null
}

export interface UndecodableRecord {
  readonly resource: string
  readonly recordId: string | null
  readonly raw: unknown
  readonly error: string
  readonly source: Source
  readonly occurrences: number
  readonly firstSeenAt: Date
  readonly lastSeenAt: Date
}

export class WarehouseError extends Schema.TaggedError<WarehouseError>()("WarehouseError", {
  operation: Schema.String,
  resource: Schema.String,
  message: Schema.String,
  /** Whether trying again may succeed (a lost connection, a deadlock), per the driver. */
  retryable: Schema.Boolean,
  cause: Schema.Defect()
}) {}

// ---------------------------------------------------------------------------------------------
// Decoding and rejection (pure)
// ---------------------------------------------------------------------------------------------

type AnyTable = TableDescriptor<any>

/**
 * A record that decoded, with what the SQL needs from it: no more. A crawl holds a few thousand
 * of these between decoding and commit, long enough for V8 to move them to its old generation,
 * and the received object and the decoded record were more than the row built from them: keeping
 * them cost the backfilling process about a tenth of its CPU in garbage collection
 * (docs/sync.md, "Benchmark").
 */
interface Decoded {
  readonly id: string
  readonly updatedAt: string | null
  /** Its row for the batch statement, as JSON (see `recordRow`); `raw` in it is the received object. */
  readonly json: string
  /** The references it names (users, teams, households), found as it was decoded. */
  readonly sightings: ReadonlyArray<Sighting>
  /** For a table with child lists only: the received object and its decoded record, for the child rows. */
  readonly parts: Parts | undefined
}

interface Parts {
  readonly raw: Readonly<Record<string, unknown>>
  readonly record: unknown
}

/**
 * Records of one resource decoded and turned into rows: all the work of a write that needs no
 * database, so a caller can do it while the database is busy with the previous batch.
 */
export interface Prepared {
  readonly resource: Resource
  readonly decoded: ReadonlyArray<Decoded>
  readonly rejected: ReadonlyArray<Rejected>
}

/** A record the parent statement wrote, and which of its lists differ from the stored ones. */
interface Written {
  readonly item: Decoded
  readonly inserted: boolean
  readonly changedLists: ReadonlySet<string>
}

interface Rejected {
  readonly resource: string
  readonly recordId: string | null
  readonly raw: unknown
  readonly error: string
}

const isObject = (u: unknown): u is Readonly<Record<string, unknown>> =>
  typeof u === "object" && u !== null && !Array.isArray(u)

/**
 * Whether a JSON value holds text PostgreSQL cannot store in `jsonb`: U+0000, or a lone UTF-16
 * surrogate. Either would make the whole batch's statement fail, so the record is rejected up
 * front instead.
 */
const hasUnstorableText = (value: unknown): boolean => {
  if (typeof value === "string") return value.includes("\u0000") || !value.isWellFormed()
  if (Array.isArray(value)) return value.some(hasUnstorableText)
  if (isObject(value)) {
    for (const key in value) if (hasUnstorableText(key) || hasUnstorableText(value[key])) return true
  }
  return false
}

const clean = (s: string) => s.replaceAll("\u0000", "\uFFFD").toWellFormed()

/** A copy that jsonb can store: U+0000 and lone surrogates become U+FFFD (only for rejected records). */
const storable = (value: unknown): unknown => {
  if (typeof value === "string") return clean(value)
  if (Array.isArray(value)) return value.map(storable)
  if (isObject(value)) return Object.fromEntries(Object.entries(value).map(([k, v]) => [clean(k), storable(v)]))
  // undefined, functions and the like are not JSON: keep the fact, not the value.
  return value === undefined || typeof value === "function" || typeof value === "symbol" ? null : value
}

const idOfRaw = (raw: unknown, key: string): string | null => {
  if (!isObject(raw)) return null
  const id = raw[key]
  return typeof id === "string" && id !== "" ? id : typeof id === "number" ? String(id) : null
}

const decoders = new Map<AnyTable, (input: unknown) => Result.Result<unknown, Schema.SchemaError>>()
const decoderOf = (table: AnyTable) => {
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

/**
 * Decodes each received record with its resource's model, splitting the good from the rejected,
 * and turns the good into rows (`Warehouse.write` takes the result).
 */
/**
 * `orderedAt`, aligned with `records`: the time a snapshot stands for where the record carries no
 * `updated_at` of its own (a client, spec §2.9: its delivery's signed time), so the forward-only
 * guard can order such snapshots too. A record's own `updated_at` always wins.
 */
export const prepare = (
  resource: Resource,
  records: ReadonlyArray<unknown>,
  orderedAt?: ReadonlyArray<string | null>
): Prepared => {
  const table: AnyTable = Tables[resource]
  const decode = decoderOf(table)
  const decoded: Array<Decoded> = []
  const rejected: Array<Rejected> = []
  for (const [index, raw] of records.entries()) {
    const recordId = idOfRaw(raw, table.idKey)
    if (!isObject(raw)) {
      rejected.push({ resource, recordId, raw: storable(raw), error: "not a JSON object" })
      continue
    }
    const unstorable = () =>
      rejected.push({
        resource,
        recordId,
        raw: storable(raw),
        error:
          "contains text PostgreSQL cannot store (U+0000 or an unpaired surrogate); stored with U+FFFD in its place"
      })
    const result = decode(raw)
    if (Result.isFailure(result)) {
      if (hasUnstorableText(raw)) unstorable()
      else rejected.push({ resource, recordId, raw, error: result.failure.message })
      continue
    }
    const record = result.success
    const id = table.id(record)
    const updatedAt = table.updatedAt(record) ?? orderedAt?.[index] ?? null
    const row =
      table.kind === "record" ? recordRow(table, raw, record, id, updatedAt) : { ...table.row(record), id, raw }
    const json = JSON.stringify(row)
    // JSON.stringify writes U+0000 and unpaired surrogates, keys included, as \u escapes: a row
    // without any needs no walk through its values.
    if (json.includes("\\u") && hasUnstorableText(raw)) {
      unstorable()
      continue
    }
    decoded.push({
      id,
      updatedAt,
      json,
      sightings: table.sightings(record),
      parts: table.children.length > 0 ? { raw, record } : undefined
    })
  }
  return { resource, decoded, rejected }
}

/** Several prepared batches of one resource as one (a crawl's queued pages). */
export const combine = (resource: Resource, batches: ReadonlyArray<Prepared>): Prepared =>
  batches.length === 1
    ? batches[0]!
    : {
        resource,
        decoded: batches.flatMap((batch) => batch.decoded),
        rejected: batches.flatMap((batch) => batch.rejected)
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
const latestPerId = (decoded: ReadonlyArray<Decoded>): ReadonlyArray<Decoded> => {
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
const mergeSightings = (
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
const onlyId = (record: Readonly<Record<string, unknown>>): boolean => {
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
const recordRow = (
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
const rawOf = (item: Decoded): unknown => item.parts?.raw ?? (JSON.parse(item.json) as { readonly raw: unknown }).raw

/** A record's parts, which `prepare` keeps for every table with child lists: only those ask. */
const partsOf = (item: Decoded): Parts => {
  if (item.parts === undefined)
    throw new Error(`record ${item.id}: its table has child lists, but its parts were not kept`)
  return item.parts
}

const referenceRow = (table: AnyTable, record: Row & { readonly id: string }): Row => ({
  ...table.row(record),
  id: record.id,
  raw: record
})

// ---------------------------------------------------------------------------------------------
// Errors PostgreSQL raises about the data of one record (rather than the connection or the load)
// ---------------------------------------------------------------------------------------------

const sqlStateOf = (error: SqlError): string | undefined => {
  const cause = error.reason.cause
  return isObject(cause) && typeof cause.code === "string" ? cause.code : undefined
}

/**
 * Data exceptions (22), integrity violations (23), limits such as an oversized index entry (54)
 * and errors raised by triggers (P0): trying the same record again fails the same way, so the
 * batch is split to find it. Anything else (connection, deadlock, timeout) fails the call.
 */
const isRecordLevel = (error: SqlError): boolean => {
  if (error.reason instanceof ConstraintError || error.reason instanceof UniqueViolation) return true
  if (!(error.reason instanceof UnknownError)) return false
  const code = sqlStateOf(error)
  return code !== undefined && /^(22|23|54|P0)/.test(code)
}

/** Whether a write failed because PostgreSQL refused a record's data (see `WriteOptions.isolate`). */
export const refusedRecord = (error: WarehouseError): boolean => isSqlError(error.cause) && isRecordLevel(error.cause)

const describeRefusal = (error: SqlError): string => {
  const cause = error.reason.cause
  const detail = isObject(cause) && typeof cause.message === "string" ? cause.message : error.message
  return `PostgreSQL refused the record (SQLSTATE ${sqlStateOf(error) ?? "unknown"}): ${detail}`
}

// The message names the operation, the table and the SQLSTATE, never a value: PostgreSQL's own
// text can quote the data, and it stays in `cause`.
const toWarehouseError = (operation: string, resource: string) => (error: SqlError) =>
  new WarehouseError({
    operation,
    resource,
    message: `${operation} ${resource} failed (SQLSTATE ${sqlStateOf(error) ?? "none"}${error.reason.isRetryable ? ", retryable" : ""})`,
    retryable: error.reason.isRetryable,
    cause: error
  })

// ---------------------------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------------------------

interface Counts {
  inserted: number
  updated: number
  unchanged: number
  skipped: number
}

const emptyCounts = (): Counts => ({ inserted: 0, updated: 0, unchanged: 0, skipped: 0 })

const addCounts = (a: Counts, b: Counts): Counts => ({
  inserted: a.inserted + b.inserted,
  updated: a.updated + b.updated,
  unchanged: a.unchanged + b.unchanged,
  skipped: a.skipped + b.skipped
})

const chunks = <A>(items: ReadonlyArray<A>, size: number): ReadonlyArray<ReadonlyArray<A>> => {
  const out: Array<ReadonlyArray<A>> = []
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size))
  return out
}

export class Warehouse extends Context.Service<
  Warehouse,
  {
    /**
     * Decodes and writes records of one resource as received (unknown JSON objects), forward only
     * (see BatchSql.ts). Never fails over a bad record: it is stored in undecodable_records.
     */
    readonly upsert: (
      resource: Resource,
      records: ReadonlyArray<unknown>,
      options: UpsertOptions
    ) => Effect.Effect<UpsertResult, WarehouseError>
    /** `upsert` of records already decoded by `prepare` (possibly several batches `combine`d). */
    readonly write: (prepared: Prepared, options: WriteOptions) => Effect.Effect<UpsertResult, WarehouseError>
    /**
     * Marks records deleted at `at` (soft delete; unknown ids get a tombstone). Until a snapshot
     * whose `updated_at` is after `at` arrives, the record stays deleted.
     */
    readonly markDeleted: (
      resource: Resource,
      ids: ReadonlyArray<string>,
      at: DateTime.Utc,
      options: WriteOptions
    ) => Effect.Effect<DeleteResult, WarehouseError>
    /** Clears `deleted_at` of the given ids (a crawl saw them again); returns how many were deleted. */
    readonly undelete: (
      resource: Resource,
      ids: ReadonlyArray<string>,
      options: WriteOptions
    ) => Effect.Effect<number, WarehouseError>
    /** Records one `client.updated` delivery's `changed_fields`; false when its hook-id was already recorded. */
    readonly recordClientChange: (change: ClientChange) => Effect.Effect<boolean, WarehouseError>
    /** `recordClientChange` of a whole batch in one statement (a hook-id recorded before adds nothing). */
    readonly recordClientChanges: (changes: ReadonlyArray<ClientChange>) => Effect.Effect<void, WarehouseError>
    /**
     * Gives notes without a household the one their delivery's envelope names (spec §6.3: a note
     * envelope's top-level `household_id` is retained after deletion).
     */
    readonly keepNoteHouseholds: (
      parents: ReadonlyArray<{ readonly id: string; readonly householdId: string }>
    ) => Effect.Effect<void, WarehouseError>
    /**
     * How listed records compare with their rows: `absent` (no row), `deleted`, `stale` (the
     * listing's `updated_at` is newer) or `current`.
     */
    readonly compareListed: (
      resource: Resource,
      listed: ReadonlyArray<{ readonly id: string; readonly updatedAt: string | null }>
    ) => Effect.Effect<ReadonlyArray<{ readonly id: string; readonly state: ListedState }>, WarehouseError>
    /**
     * Ids of live rows last written before `before` — of the whole table, or of `ids` only; with
     * `lock`, those rows are locked (FOR UPDATE) until the caller's transaction ends.
     */
    readonly liveWrittenBefore: (
      resource: Resource,
      before: Date,
      options?: { readonly ids?: ReadonlyArray<string>; readonly lock?: boolean }
    ) => Effect.Effect<ReadonlyArray<string>, WarehouseError>
    /** The live tasks, meetings and notes of `books`, with where a note hangs (by-id reconciliation). */
    readonly knownInBooks: (books: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<KnownRecord>, WarehouseError>
    /** Rows of a resource table (live ones only unless `includeDeleted`). */
    readonly count: (
      resource: Resource,
      options?: { readonly includeDeleted?: boolean }
    ) => Effect.Effect<number, WarehouseError>
    /** One stored row with its record decoded from `raw`. */
    readonly findById: <R extends Resource>(
      resource: R,
      id: string
    ) => Effect.Effect<Option.Option<StoredRecord<R>>, WarehouseError>
    /** One stored row, every column as the driver returns it (for checks and tools). */
    readonly row: (resource: Resource, id: string) => Effect.Effect<Option.Option<Row>, WarehouseError>
    /** The stored undecodable records, newest first (of one resource, or all). */
    readonly undecodable: (resource?: Resource) => Effect.Effect<ReadonlyArray<UndecodableRecord>, WarehouseError>
  }
>()("crm-sync/warehouse/Warehouse") {
  static readonly layer = Layer.effect(
    Warehouse,
    Effect.gen(function* () {
      const sql = yield* SqlClient

      const statements = new Map<AnyTable, { readonly write: string }>()
      const inserts = new Map<AnyTable, string>()
      const writeStatement = (table: AnyTable) => {
        let held = statements.get(table)
        if (held === undefined) {
          const write = table.kind === "record" ? BatchSql.upsertRecords(table) : BatchSql.mergeReferences(table)
          statements.set(table, (held = { write }))
        }
        return held.write
      }

      const storeRejected = Effect.fnUntraced(function* (rejected: ReadonlyArray<Rejected>, source: Source) {
        if (rejected.length === 0) return
        const rows = rejected.map((r) => ({ resource: r.resource, record_id: r.recordId, raw: r.raw, error: r.error }))
        yield* sql.unsafe(BatchSql.storeUndecodable, [JSON.stringify(rows), source])
      })

      /**
       * Rewrites the child tables of the parents just written. A list absent from the received
       * object leaves its rows alone (Tables.ts); a list equal to the stored one (same JSON) has
       * the same rows already, so only changed lists are rewritten; a new parent has no rows to
       * delete (children cascade with their parent, so none can be left from an earlier one).
       */
      const replaceChildren = Effect.fnUntraced(function* (table: AnyTable, written: ReadonlyArray<Written>) {
        for (const child of table.children) {
          const parents = written.filter(
            (w) => Object.hasOwn(partsOf(w.item).raw, child.list) && w.changedLists.has(child.list)
          )
          if (parents.length === 0) continue
          const replaced = parents.filter((w) => !w.inserted).map((w) => w.item.id)
          if (replaced.length > 0) yield* sql.unsafe(BatchSql.deleteChildren(child), [replaced])
          const rows = parents.flatMap((w) =>
            child.rows(partsOf(w.item).record).map((row) => ({ ...row, [child.parentColumn]: w.item.id }))
          )
          if (rows.length > 0) yield* sql.unsafe(BatchSql.insertChildren(child), [JSON.stringify(rows)])
        }
      })

      /**
       * Merges the references the written records mention; returns those the ledger did not know
       * yet (KnownReferences), for the caller to add once they are stored.
       */
      const mergeReferences = Effect.fnUntraced(function* (
        written: ReadonlyArray<Decoded>,
        source: Source,
        known: ReferenceLedger | undefined
      ) {
        const sightings = written.flatMap((item) => item.sightings)
        // A sighting of a known reference that names only its id would change nothing.
        const wanted =
          known === undefined
            ? sightings
            : sightings.filter(({ resource, record }) => !onlyId(record) || !known.has(resource, record.id))
        const learned: Array<readonly [ReferenceResource, string]> = []
        for (const [resource, news] of mergeSightings(wanted)) {
          const reference: AnyTable = Tables[resource]
          if (known !== undefined) {
            for (const record of news) if (!known.has(resource, record.id)) learned.push([resource, record.id])
          }
          const rows = news.map((record) => referenceRow(reference, record))
          yield* sql.unsafe(writeStatement(reference), [JSON.stringify(rows), source])
        }
        return learned
      })

      /**
       * A `record` table without child lists: the write returns the rows it wrote, and only the
       * others (none in a first crawl) are read again, to tell older (skipped) from identical.
       */
      const writeWithoutChildren = Effect.fnUntraced(function* (
        table: AnyTable,
        items: ReadonlyArray<Decoded>,
        rows: string,
        source: Source
      ) {
        let held = inserts.get(table)
        if (held === undefined) inserts.set(table, (held = BatchSql.insertRecords(table)))
        const written = yield* sql.unsafe<{ id: string; inserted: boolean }>(held, [rows, source])
        const outcomes: Array<{ id: string; outcome: WriteOutcome }> = written.map((row) => ({
          id: row.id,
          outcome: row.inserted ? "inserted" : "updated"
        }))
        if (written.length === items.length) return outcomes
        const done = new Set(written.map((row) => row.id))
        const rest = items.filter((item) => !done.has(item.id))
        const skipped = new Set(
          (yield* sql.unsafe<{ id: string }>(BatchSql.classifyUnwritten(table), [
            JSON.stringify(rest.map((item) => ({ id: item.id, updated_at: item.updatedAt })))
          ])).map((row) => row.id)
        )
        for (const item of rest) outcomes.push({ id: item.id, outcome: skipped.has(item.id) ? "skipped" : "unchanged" })
        return outcomes
      })

      /**
       * One chunk in one transaction: lock the stored parents (see BatchSql.lockRecords), write the
       * parents, then the children and references of those written.
       */
      const writeChunk = (table: AnyTable, items: ReadonlyArray<Decoded>, options: WriteOptions) =>
        (options.isolate === false ? identity : sql.withTransaction)(
          Effect.gen(function* () {
            const rows = `[${items.map((item) => item.json).join(",")}]`
            if (table.kind === "record" && table.children.length > 0) {
              yield* sql.unsafe(BatchSql.lockRecords(table), [items.map((item) => item.id)])
            }
            const outcomes: ReadonlyArray<{
              readonly id: string
              readonly outcome: WriteOutcome
              readonly changed_lists?: ReadonlyArray<string>
            }> =
              table.kind === "record" && table.children.length === 0
                ? yield* writeWithoutChildren(table, items, rows, options.source)
                : yield* sql.unsafe<{
                    id: string
                    outcome: WriteOutcome
                    changed_lists?: ReadonlyArray<string>
                  }>(writeStatement(table), [rows, options.source])
            const counts = emptyCounts()
            const byId = new Map(items.map((item) => [item.id, item]))
            const written: Array<Written> = []
            for (const { id, outcome, changed_lists } of outcomes) {
              counts[outcome] += 1
              if (outcome !== "inserted" && outcome !== "updated") continue
              written.push({
                item: byId.get(id)!,
                inserted: outcome === "inserted",
                changedLists: new Set(changed_lists ?? [])
              })
            }
            if (written.length === 0) return { counts, references: [] }
            yield* replaceChildren(table, written)
            if (options.beforeReferences !== undefined) yield* options.beforeReferences
            const references = yield* mergeReferences(
              written.map((w) => w.item),
              options.source,
              options.known
            )
            return { counts, references }
          })
        ).pipe(
          Effect.map(({ counts, references }) => {
            options.known?.add(references)
            return counts
          })
        )

      /**
       * Writes a chunk; if PostgreSQL refuses something about the data, halves it and tries each
       * half in its own transaction until the refused records stand alone, then rejects them.
       */
      const writeIsolating = (
        resource: Resource,
        table: AnyTable,
        items: ReadonlyArray<Decoded>,
        options: WriteOptions
      ): Effect.Effect<{ readonly counts: Counts; readonly rejected: ReadonlyArray<Rejected> }, SqlError> =>
        writeChunk(table, items, options).pipe(
          Effect.map((counts) => ({ counts, rejected: [] as ReadonlyArray<Rejected> })),
          Effect.catchIf(
            (error) => options.isolate !== false && isRecordLevel(error),
            (error) => {
              if (items.length === 1) {
                const item = items[0]!
                return Effect.succeed({
                  counts: emptyCounts(),
                  rejected: [{ resource, recordId: item.id, raw: rawOf(item), error: describeRefusal(error) }]
                })
              }
              const middle = Math.ceil(items.length / 2)
              return Effect.zipWith(
                writeIsolating(resource, table, items.slice(0, middle), options),
                writeIsolating(resource, table, items.slice(middle), options),
                (a, b) => ({ counts: addCounts(a.counts, b.counts), rejected: [...a.rejected, ...b.rejected] })
              )
            }
          )
        )

      const write = Effect.fn("Warehouse.write")(
        function* (prepared: Prepared, options: WriteOptions) {
          const { resource, decoded, rejected } = prepared
          yield* Effect.annotateCurrentSpan({
            resource,
            records: decoded.length + rejected.length,
            source: options.source
          })
          const table: AnyTable = Tables[resource]
          const unique = latestPerId(decoded)
          let counts: Counts = { ...emptyCounts(), skipped: decoded.length - unique.length }
          let refused = 0
          yield* storeRejected(rejected, options.source)
          for (const chunk of chunks(unique, CHUNK_SIZE)) {
            const result = yield* writeIsolating(resource, table, chunk, options)
            counts = addCounts(counts, result.counts)
            refused += result.rejected.length
            yield* storeRejected(result.rejected, options.source)
          }
          return { ...counts, rejected: rejected.length + refused } satisfies UpsertResult
        },
        (effect, prepared) => Effect.mapError(effect, toWarehouseError("upsert", prepared.resource))
      )

      const upsert = (resource: Resource, records: ReadonlyArray<unknown>, options: UpsertOptions) =>
        Effect.suspend(() => write(prepare(resource, records, options.orderedAt), options))

      const markDeleted = Effect.fn("Warehouse.markDeleted")(
        function* (resource: Resource, ids: ReadonlyArray<string>, at: DateTime.Utc, options: WriteOptions) {
          if (ids.length === 0) return { deleted: 0, tombstoned: 0 }
          const [result] = yield* sql.unsafe<{ deleted: number; tombstoned: number }>(
            BatchSql.markDeleted(Tables[resource] as AnyTable),
            [ids, DateTime.formatIso(at), options.source]
          )
          return { deleted: result?.deleted ?? 0, tombstoned: result?.tombstoned ?? 0 }
        },
        (effect, resource) => Effect.mapError(effect, toWarehouseError("markDeleted", resource))
      )

      const undelete = Effect.fn("Warehouse.undelete")(
        function* (resource: Resource, ids: ReadonlyArray<string>, options: WriteOptions) {
          if (ids.length === 0) return 0
          const rows = yield* sql.unsafe(BatchSql.undelete(Tables[resource] as AnyTable), [ids, options.source])
          return rows.length
        },
        (effect, resource) => Effect.mapError(effect, toWarehouseError("undelete", resource))
      )

      const recordClientChange = Effect.fn("Warehouse.recordClientChange")(
        function* (change: ClientChange) {
          const rows = yield* sql<{ hook_id: string }>`
            INSERT INTO crm.client_changes (hook_id, client_id, changed_fields, subscription_id, book_id, received_at)
            SELECT ${change.hookId}, ${change.clientId},
                   ARRAY(SELECT jsonb_array_elements_text(${JSON.stringify(change.changedFields)}::jsonb)),
                   ${change.subscriptionId ?? null}, ${change.bookId ?? null}, ${DateTime.formatIso(change.receivedAt)}::timestamptz
            ON CONFLICT (hook_id) DO NOTHING
            RETURNING hook_id`
          return rows.length > 0
        },
        Effect.mapError(toWarehouseError("recordClientChange", "client_changes"))
      )

      const recordClientChanges = Effect.fn("Warehouse.recordClientChanges")(
        function* (changes: ReadonlyArray<ClientChange>) {
          if (changes.length === 0) return
          yield* sql`
            INSERT INTO crm.client_changes (hook_id, client_id, changed_fields, subscription_id, book_id, received_at)
            SELECT c.hook_id, c.client_id, ARRAY(SELECT jsonb_array_elements_text(c.changed_fields)),
                   c.subscription_id, c.book_id, c.received_at
            FROM jsonb_to_recordset(${JSON.stringify(
              changes.map((change) => ({
                hook_id: change.hookId,
                client_id: change.clientId,
                changed_fields: change.changedFields,
                subscription_id: change.subscriptionId ?? null,
                book_id: change.bookId ?? null,
                received_at: DateTime.formatIso(change.receivedAt)
              }))
            )}::jsonb) AS c(hook_id text, client_id text, changed_fields jsonb, subscription_id text, book_id text, received_at timestamptz)
            ON CONFLICT (hook_id) DO NOTHING`
        },
        Effect.mapError(toWarehouseError("recordClientChanges", "client_changes"))
      )

      const keepNoteHouseholds = Effect.fn("Warehouse.keepNoteHouseholds")(
        function* (parents: ReadonlyArray<{ readonly id: string; readonly householdId: string }>) {
          if (parents.length === 0) return
          yield* sql`
            UPDATE crm.notes AS n SET household_id = p.household_id
            FROM (SELECT DISTINCT ON (id) id, household_id
                  FROM jsonb_to_recordset(${JSON.stringify(parents.map((p) => ({ id: p.id, household_id: p.householdId })))}::jsonb)
                    AS r(id text, household_id text)) AS p
            WHERE n.id = p.id AND n.household_id IS NULL`
        },
        Effect.mapError(toWarehouseError("keepNoteHouseholds", "notes"))
      )

      const compareListed = Effect.fn("Warehouse.compareListed")(
        function* (
          resource: Resource,
          listed: ReadonlyArray<{ readonly id: string; readonly updatedAt: string | null }>
        ) {
          if (listed.length === 0) return []
          const table = sql.literal(`crm."${Tables[resource].table}"`)
          // The statement's own literals and columns: its rows have this shape.
          return yield* sql<{ id: string; state: ListedState }>`
            SELECT v.id, CASE
              WHEN w.id IS NULL THEN 'absent'
              WHEN w.deleted_at IS NOT NULL THEN 'deleted'
              WHEN v.updated_at IS NOT NULL
                AND (w.updated_at IS NULL OR w.updated_at < v.updated_at::timestamptz) THEN 'stale'
              ELSE 'current' END AS state
            FROM unnest(${listed.map((item) => item.id)}::text[], ${listed.map((item) => item.updatedAt)}::text[])
              AS v(id, updated_at)
            LEFT JOIN ${table} w ON w.id = v.id`
        },
        (effect, resource) => Effect.mapError(effect, toWarehouseError("compareListed", resource))
      )

      const liveWrittenBefore = Effect.fn("Warehouse.liveWrittenBefore")(
        function* (
          resource: Resource,
          before: Date,
          options?: { readonly ids?: ReadonlyArray<string>; readonly lock?: boolean }
        ) {
          const table = sql.literal(`crm."${Tables[resource].table}"`)
          const rows =
            options?.ids === undefined
              ? yield* sql<{ id: string }>`SELECT id FROM ${table} WHERE deleted_at IS NULL AND synced_at < ${before}`
              : yield* sql<{ id: string }>`
                  SELECT id FROM ${table}
                  WHERE id = ANY(${options.ids}::text[]) AND deleted_at IS NULL AND synced_at < ${before}
                  ${options.lock === true ? sql.literal("FOR UPDATE") : sql.literal("")}`
          return rows.map((row) => row.id)
        },
        (effect, resource) => Effect.mapError(effect, toWarehouseError("liveWrittenBefore", resource))
      )

      const knownInBooks = Effect.fn("Warehouse.knownInBooks")(
        function* (books: ReadonlyArray<string>) {
          return yield* sql<KnownRecord>`
            SELECT 'tasks'::text AS resource, id, NULL::text AS notable_type, NULL::text AS notable_id,
                   NULL::text AS household_id, (extract(epoch FROM synced_at) * 1000)::float8 AS synced_ms
              FROM crm."tasks" WHERE deleted_at IS NULL AND book_id = ANY(${books}::text[])
            UNION ALL
            SELECT 'meetings', id, NULL, NULL, NULL, (extract(epoch FROM synced_at) * 1000)::float8
              FROM crm."meetings" WHERE deleted_at IS NULL AND book_id = ANY(${books}::text[])
            UNION ALL
            SELECT 'notes', id, notable_type, notable_id, household_id, (extract(epoch FROM synced_at) * 1000)::float8
              FROM crm."notes" WHERE deleted_at IS NULL AND book_id = ANY(${books}::text[])`
        },
        Effect.mapError(toWarehouseError("knownInBooks", "tasks"))
      )

      const count = Effect.fn("Warehouse.count")(
        function* (resource: Resource, options?: { readonly includeDeleted?: boolean }) {
          const table = `crm."${Tables[resource].table}"`
          const where = options?.includeDeleted === true ? "" : ` WHERE "deleted_at" IS NULL`
          const [row] = yield* sql.unsafe<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}${where}`)
          return row?.n ?? 0
        },
        (effect, resource) => Effect.mapError(effect, toWarehouseError("count", resource))
      )

      const row = Effect.fn("Warehouse.row")(
        function* (resource: Resource, id: string) {
          const rows = yield* sql.unsafe<Row>(`SELECT * FROM crm."${Tables[resource].table}" WHERE "id" = $1`, [id])
          return Option.fromNullishOr(rows[0])
        },
        (effect, resource) => Effect.mapError(effect, toWarehouseError("row", resource))
      )

      const findById = <R extends Resource>(resource: R, id: string) =>
        row(resource, id).pipe(
          Effect.map(
            Option.map((stored): StoredRecord<R> => {
              const decoded =
                stored.raw === null || stored.raw === undefined
                  ? undefined
                  : decoderOf(Tables[resource] as AnyTable)(stored.raw)
              return {
                id: stored.id as string,
                updatedAt: (stored.updated_at as Date | null) ?? null,
                deletedAt: (stored.deleted_at as Date | null) ?? null,
                syncedAt: stored.synced_at as Date,
                source: stored.source as Source,
                raw: stored.raw ?? null,
                record:
                  decoded !== undefined && Result.isSuccess(decoded) ? (decoded.success as ResourceRecord<R>) : null
              }
            })
          )
        )

      const undecodable = Effect.fn("Warehouse.undecodable")(
        function* (resource?: Resource) {
          const rows = yield* sql<{
            resource: string
            record_id: string | null
            raw: unknown
            error: string
            source: Source
            occurrences: number
            first_seen_at: Date
            last_seen_at: Date
          }>`
            SELECT resource, record_id, raw, error, source, occurrences, first_seen_at, last_seen_at
            FROM crm_sync.undecodable_records
            WHERE ${resource === undefined ? sql`TRUE` : sql`resource = ${resource}`}
            ORDER BY last_seen_at DESC, id DESC`
          return rows.map((r): UndecodableRecord => ({
            resource: r.resource,
            recordId: r.record_id,
            raw: r.raw,
            error: r.error,
            source: r.source,
            occurrences: r.occurrences,
            firstSeenAt: r.first_seen_at,
            lastSeenAt: r.last_seen_at
          }))
        },
        Effect.mapError(toWarehouseError("undecodable", "undecodable_records"))
      )

      return Warehouse.of({
        write,
        upsert,
        markDeleted,
        undelete,
        recordClientChange,
        recordClientChanges,
        keepNoteHouseholds,
        compareListed,
        liveWrittenBefore,
        knownInBooks,
        count,
        findById,
        row,
        undecodable
      })
    })
  )
}

// ---------------------------------------------------------------------------------------------
// Reads for status, lag metrics and the plan
// ---------------------------------------------------------------------------------------------

/**
 * Each resource table (those of schema `crm` with the contract's `synced_at` and `deleted_at`):
 * its rows, how many are deleted, and when crm-sync last wrote one.
 */
export const tableStats = Effect.gen(function* () {
  const sql = yield* SqlClient
  const tables = yield* sql<{ table_name: string }>`
    SELECT c.table_name FROM information_schema.columns c
    WHERE c.table_schema = 'crm' AND c.column_name = 'synced_at'
      AND EXISTS (SELECT 1 FROM information_schema.columns d
                  WHERE d.table_schema = 'crm' AND d.table_name = c.table_name AND d.column_name = 'deleted_at')
    ORDER BY c.table_name`
  const stats: Array<{ table: string; rows: number; deleted: number; last_sync: Date | null }> = []
  for (const { table_name } of tables) {
    const [row] = yield* sql<{ rows: number; deleted: number; last_sync: Date | null }>`
      SELECT count(*)::int AS rows, count(deleted_at)::int AS deleted, max(synced_at) AS last_sync
      FROM ${sql(`crm.${table_name}`)}`
    stats.push({
      table: table_name,
      rows: row?.rows ?? 0,
      deleted: row?.deleted ?? 0,
      last_sync: row?.last_sync ?? null
    })
  }
  return stats
})

/** Live rows of a resource table, by its table name. */
export const liveRows = (table: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const [row] = yield* sql<{
      n: number
    }>`SELECT count(*)::int AS n FROM ${sql(`crm.${table}`)} WHERE deleted_at IS NULL`
    return row?.n ?? 0
  })

/** Records the warehouse refused, by resource. */
export const undecodableCounts = Effect.gen(function* () {
  const sql = yield* SqlClient
  return yield* sql<{ resource: string; records: number }>`
    SELECT resource, count(*)::int AS records FROM crm_sync.undecodable_records GROUP BY resource`
})
