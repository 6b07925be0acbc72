/**
 * WarehouseWrites: the statements of `Warehouse.write` and the warehouse's other writes. A batch
 * is written chunk by chunk (`CHUNK_SIZE`), each in one transaction: the parents in one statement,
 * then, for the parents actually written, their child lists (ChildLists) and one merge per
 * reference table they mention. A record PostgreSQL refuses is found by halving its chunk and set
 * aside in `crm_sync.undecodable_records`; the rest of the batch is written. Called inside a
 * transaction of the caller's, the chunk transactions become savepoints of it.
 */
import * as DateTime from "effect/DateTime"
import * as Effect from "effect/Effect"
import { identity } from "effect/Function"
import type { SqlClient } from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql/SqlError"
import * as BatchSql from "./BatchSql.ts"
import type { WriteOutcome } from "./BatchSql.ts"
import { replaceChildren, type Written } from "./ChildLists.ts"
import { isHistoryResource, keeps, placeLateSnapshots } from "./History.ts"
import {
  type AnyTable,
  type Decoded,
  latestPerId,
  mergeSightings,
  onlyId,
  rawOf,
  referenceRow,
  type Rejected
} from "./Rows.ts"
import { type ReferenceResource, type Resource, type Source, Tables } from "./Tables.ts"
import type { ClientChange, Prepared, ReferenceLedger, UpsertResult, WriteOptions } from "./WarehouseTypes.ts"
import { describeRefusal, isRecordLevel, toWarehouseError } from "./WarehouseError.ts"

/** Which resources keep a history (History.ts `HistorySettings`). */
export interface HistoryKept {
  readonly resources: ReadonlySet<Resource>
}

/** How many records go into one transaction; larger inputs are written chunk by chunk. */
export const CHUNK_SIZE = 1000

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

/** The statement that writes a table's rows: built once per table (the tables never change). */
const statements = new Map<AnyTable, string>()
const writeStatement = (table: AnyTable) => {
  let held = statements.get(table)
  if (held === undefined) {
    held = table.kind === "record" ? BatchSql.upsertRecords(table) : BatchSql.mergeReferences(table)
    statements.set(table, held)
  }
  return held
}

const inserts = new Map<AnyTable, string>()
const insertStatement = (table: AnyTable) => {
  let held = inserts.get(table)
  if (held === undefined) inserts.set(table, (held = BatchSql.insertRecords(table)))
  return held
}

const storeRejected = Effect.fnUntraced(function* (sql: SqlClient, rejected: ReadonlyArray<Rejected>, source: Source) {
  if (rejected.length === 0) return
  const rows = rejected.map((r) => ({ resource: r.resource, record_id: r.recordId, raw: r.raw, error: r.error }))
  yield* sql.unsafe(BatchSql.storeUndecodable, [JSON.stringify(rows), source])
})

/**
 * Merges the references the written records mention; returns those the ledger did not know
 * yet (KnownReferences), for the caller to add once they are stored.
 */
const mergeReferences = Effect.fnUntraced(function* (
  sql: SqlClient,
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
  // Reference tables in one order (by name), each one's rows by id (mergeSightings): two writers
  // naming the same households and users lock them in the same order.
  const merged = [...mergeSightings(wanted)].toSorted(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
  for (const [resource, news] of merged) {
    const reference: AnyTable = Tables[resource]
    if (known !== undefined) {
      for (const record of news) if (!known.has(resource, record.id)) learned.push([resource, record.id])
    }
    const rows = news.map((record) => referenceRow(reference, record))
    yield* sql.unsafe(writeStatement(reference), [JSON.stringify(rows), source])
  }
  return learned
})

/** What the parent statement says of each record. */
interface ParentOutcome {
  readonly id: string
  readonly outcome: WriteOutcome
  readonly changed_lists?: ReadonlyArray<string>
  /** Written into a row that stays deleted (a snapshot no newer than the deletion). */
  readonly deleted?: boolean
}

/**
 * A `record` table without child lists: the write returns the rows it wrote, and only the
 * others (none in a first crawl) are read again, to tell older (skipped) from identical.
 */
const writeWithoutChildren = Effect.fnUntraced(function* (
  sql: SqlClient,
  table: AnyTable,
  items: ReadonlyArray<Decoded>,
  rows: string,
  source: Source
) {
  const written = yield* sql.unsafe<{ id: string; inserted: boolean; deleted: boolean }>(insertStatement(table), [
    rows,
    source
  ])
  const outcomes: Array<ParentOutcome> = written.map((row) => ({
    id: row.id,
    outcome: row.inserted ? "inserted" : "updated",
    deleted: row.deleted
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

/** The parents of a chunk: the stored ones locked first (see BatchSql.lockRecords), then written. */
const writeParents = Effect.fnUntraced(function* (
  sql: SqlClient,
  table: AnyTable,
  items: ReadonlyArray<Decoded>,
  source: Source
) {
  const rows = `[${items.map((item) => item.json).join(",")}]`
  if (table.kind === "record" && table.children.length > 0) {
    yield* sql.unsafe(BatchSql.lockRecords(table), [items.map((item) => item.id)])
  }
  const outcomes: ReadonlyArray<ParentOutcome> =
    table.kind === "record" && table.children.length === 0
      ? yield* writeWithoutChildren(sql, table, items, rows, source)
      : yield* sql.unsafe<ParentOutcome>(writeStatement(table), [rows, source])
  return outcomes
})

/**
 * The history of a chunk (History.ts), after its parents: the rows' update triggers ended the
 * versions the writes replaced; here the snapshots the current table refused (older than the
 * row, older copies in the same batch) or wrote into a deleted row go into the middle of their
 * chains.
 */
const writeHistory = Effect.fnUntraced(function* (
  sql: SqlClient,
  resource: Resource,
  items: ReadonlyArray<Decoded>,
  outcomes: ReadonlyArray<ParentOutcome>,
  dropped: ReadonlyMap<string, ReadonlyArray<Decoded>>,
  source: Source
) {
  if (!isHistoryResource(resource)) return
  const placed = new Set(
    outcomes
      .filter(({ outcome, deleted }) => outcome === "skipped" || (outcome === "updated" && deleted === true))
      .map(({ id }) => id)
  )
  const late = items.filter((item) => placed.has(item.id))
  if (dropped.size > 0) for (const item of items) late.push(...(dropped.get(item.id) ?? []))
  if (late.length > 0) yield* placeLateSnapshots(sql, resource, late, source)
})

/** The counts of a chunk's outcomes, and the records written (inserted or updated). */
const writtenOf = (items: ReadonlyArray<Decoded>, outcomes: ReadonlyArray<ParentOutcome>) => {
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
  return { counts, written }
}

/**
 * One chunk in one transaction: lock the stored parents, write the parents, then the children
 * and references of those written.
 */
const writeChunk = (
  sql: SqlClient,
  table: AnyTable,
  items: ReadonlyArray<Decoded>,
  options: WriteOptions,
  history: HistoryKept,
  dropped: ReadonlyMap<string, ReadonlyArray<Decoded>>
) =>
  (options.isolate === false ? identity : sql.withTransaction)(
    Effect.gen(function* () {
      const outcomes = yield* writeParents(sql, table, items, options.source)
      const { counts, written } = writtenOf(items, outcomes)
      const resource = table.table as Resource
      if (table.kind === "record" && keeps(history, resource)) {
        yield* writeHistory(sql, resource, items, outcomes, dropped, options.source)
      }
      if (written.length === 0) return { counts, references: [] }
      yield* replaceChildren(sql, table, written)
      const references = yield* mergeReferences(
        sql,
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
  sql: SqlClient,
  resource: Resource,
  table: AnyTable,
  items: ReadonlyArray<Decoded>,
  options: WriteOptions,
  history: HistoryKept,
  dropped: ReadonlyMap<string, ReadonlyArray<Decoded>>
): Effect.Effect<{ readonly counts: Counts; readonly rejected: ReadonlyArray<Rejected> }, SqlError> =>
  writeChunk(sql, table, items, options, history, dropped).pipe(
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
          writeIsolating(sql, resource, table, items.slice(0, middle), options, history, dropped),
          writeIsolating(sql, resource, table, items.slice(middle), options, history, dropped),
          (a, b) => ({ counts: addCounts(a.counts, b.counts), rejected: [...a.rejected, ...b.rejected] })
        )
      }
    )
  )

/** The older copies `latestPerId` leaves out, by id: the history places them (History.ts `placeLate`). */
const droppedCopies = (
  decoded: ReadonlyArray<Decoded>,
  unique: ReadonlyArray<Decoded>
): ReadonlyMap<string, ReadonlyArray<Decoded>> => {
  const dropped = new Map<string, Array<Decoded>>()
  if (unique.length === decoded.length) return dropped
  const kept = new Set(unique)
  for (const item of decoded) {
    if (kept.has(item)) continue
    const held = dropped.get(item.id)
    if (held === undefined) dropped.set(item.id, [item])
    else held.push(item)
  }
  return dropped
}

export const write = (sql: SqlClient, history: HistoryKept) =>
  Effect.fn("Warehouse.write")(
    function* (prepared: Prepared, options: WriteOptions) {
      const { resource, decoded, rejected } = prepared
      yield* Effect.annotateCurrentSpan({
        resource,
        records: decoded.length + rejected.length,
        source: options.source
      })
      const table: AnyTable = Tables[resource]
      const unique = latestPerId(decoded)
      const dropped = keeps(history, resource) ? droppedCopies(decoded, unique) : new Map<string, never>()
      let counts: Counts = { ...emptyCounts(), skipped: decoded.length - unique.length }
      let refused = 0
      yield* storeRejected(sql, rejected, options.source)
      for (const chunk of chunks(unique, CHUNK_SIZE)) {
        const result = yield* writeIsolating(sql, resource, table, chunk, options, history, dropped)
        counts = addCounts(counts, result.counts)
        refused += result.rejected.length
        yield* storeRejected(sql, result.rejected, options.source)
      }
      return { ...counts, rejected: rejected.length + refused } satisfies UpsertResult
    },
    (effect, prepared) => Effect.mapError(effect, toWarehouseError("upsert", prepared.resource))
  )

export const markDeleted = (sql: SqlClient) =>
  Effect.fn("Warehouse.markDeleted")(
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

export const undelete = (sql: SqlClient) =>
  Effect.fn("Warehouse.undelete")(
    function* (resource: Resource, ids: ReadonlyArray<string>, options: WriteOptions) {
      if (ids.length === 0) return 0
      const rows = yield* sql.unsafe(BatchSql.undelete(Tables[resource] as AnyTable), [ids, options.source])
      return rows.length
    },
    (effect, resource) => Effect.mapError(effect, toWarehouseError("undelete", resource))
  )

export const recordClientChange = (sql: SqlClient) =>
  Effect.fn("Warehouse.recordClientChange")(
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

export const recordClientChanges = (sql: SqlClient) =>
  Effect.fn("Warehouse.recordClientChanges")(
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

export const keepNoteHouseholds = (sql: SqlClient) =>
  Effect.fn("Warehouse.keepNoteHouseholds")(
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
