/**
 * Warehouse: every write crm-sync makes to schema `crm`, for every resource, driven by the table
 * descriptors of `Tables.ts` and the SQL of `BatchSql.ts`, and what it reads back.
 *
 * `upsert` decodes records as received (unknown JSON) with their resource's model (`prepare`) and
 * writes the batch (WarehouseWrites). A record that does not decode, or that PostgreSQL refuses,
 * is stored in `crm_sync.undecodable_records` with its error and counted as `rejected`: nothing is
 * dropped and one bad record never fails a batch.
 */
import * as Context from "effect/Context"
import * as DateTime from "effect/DateTime"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import { SqlClient } from "effect/sql/SqlClient"
import { isSqlError } from "effect/sql/SqlError"
import { type ClientDelivery, type DecodedClient, decodedClient, writeClients } from "./ClientWrites.ts"
import * as History from "./History.ts"
import { HistorySettings, keeps } from "./History.ts"
import {
  type AnyTable,
  type Decoded,
  decoderOf,
  hasUnstorableText,
  idOfRaw,
  isObject,
  recordRow,
  type Rejected,
  storable
} from "./Rows.ts"
import { type ReferenceResource, type Resource, type Row, Tables } from "./Tables.ts"
import * as Transcripts from "./TranscriptWrites.ts"
import { isRecordLevel, toWarehouseError, type WarehouseError } from "./WarehouseError.ts"
import * as Reads from "./WarehouseReads.ts"
import * as Writes from "./WarehouseWrites.ts"
import type {
  ClientChange,
  KnownRecord,
  ListedState,
  Prepared,
  ReferenceLedger,
  StoredRecord,
  TranscriptRead,
  UndecodableRecord,
  UpsertResult,
  WriteOptions
} from "./WarehouseTypes.ts"

export type { ClientDelivery } from "./ClientWrites.ts"
export type { Resource, ResourceRecord, Source } from "./Tables.ts"
export { Resources, Sources, isResource } from "./Tables.ts"
export type {
  ClientChange,
  KnownRecord,
  ListedState,
  Prepared,
  ReferenceLedger,
  StoredRecord,
  TranscriptRead,
  UndecodableRecord,
  UpsertResult,
  WriteOptions
} from "./WarehouseTypes.ts"
export { addUpsertResults, noWrites } from "./WarehouseTypes.ts"

export interface UpsertOptions extends WriteOptions {
  /** Per record, the time its snapshot stands for when it has no `updated_at` (see `prepare`). */
  readonly orderedAt?: ReadonlyArray<string | null>
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

/**
 * Decodes each received record with its resource's model, splitting the good from the rejected,
 * and turns the good into rows (`Warehouse.write` takes the result). `orderedAt`, aligned with
 * `records`: the time a snapshot stands for where the record carries no `updated_at` of its own
 * (a client, spec §2.9: its delivery's signed time), so the forward-only guard can order such
 * snapshots too. A record's own `updated_at` always wins.
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

/** Whether a write failed because PostgreSQL refused a record's data (see `WriteOptions.isolate`). */
export const refusedRecord = (error: WarehouseError): boolean => isSqlError(error.cause) && isRecordLevel(error.cause)

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
    /**
     * Writes client deliveries field by field (ClientWrites.ts): a `client.updated` writes the
     * fields it names, each ordered by its own first signed time, and fills fields never known; a
     * `client.created` only fills. Several deliveries of one client fold in signed order.
     */
    readonly writeClients: (
      deliveries: ReadonlyArray<ClientDelivery>,
      options: WriteOptions
    ) => Effect.Effect<UpsertResult, WarehouseError>
    /** `upsert` of records already decoded by `prepare` (possibly several batches `combine`d). */
    readonly write: (prepared: Prepared, options: WriteOptions) => Effect.Effect<UpsertResult, WarehouseError>
    /**
     * Marks records deleted at `at`, or at their stored `updated_at` when that is later (soft
     * delete; unknown ids get a tombstone). Until a snapshot whose `updated_at` is after that
     * arrives, the record stays deleted. Give the CRM's time where there is one (a deletion's
     * signed time): the snapshots it is compared with carry the CRM's clock.
     * Deleting meetings retires their transcripts in the same transaction (TranscriptWrites.ts).
     */
    readonly markDeleted: (
      resource: Resource,
      ids: ReadonlyArray<string>,
      at: DateTime.Utc,
      options: WriteOptions
    ) => Effect.Effect<DeleteResult, WarehouseError>
    /**
     * The database's clock (ISO 8601, microseconds), taken just before a transcript read: the
     * order in which `writeTranscripts` applies reads, whichever commits last.
     */
    readonly readStarted: Effect.Effect<string, WarehouseError>
    /**
     * Writes transcript reads, the read started last winning: a transcript is upserted; none (a
     * null transcript, a 404) retires the stored one (marked deleted, its text and segments removed).
     */
    readonly writeTranscripts: (
      reads: ReadonlyArray<TranscriptRead>,
      options: WriteOptions
    ) => Effect.Effect<{ readonly written: number; readonly retired: number }, WarehouseError>
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
    /**
     * Deletes the history's versions that ended longer than `retention` ago (config
     * `history.retention`), a slice at a time; returns how many went.
     */
    readonly pruneHistory: (retention: Duration.Duration) => Effect.Effect<number, WarehouseError>
    /** The stored undecodable records, newest first (of one resource, or all). */
    readonly undecodable: (resource?: Resource) => Effect.Effect<ReadonlyArray<UndecodableRecord>, WarehouseError>
  }
>()("crm-sync/warehouse/Warehouse") {
  static readonly layer = Layer.effect(
    Warehouse,
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const history = yield* HistorySettings
      // The rows' update triggers read which resources keep their ended versions (History.ts).
      yield* History.writeSettings(sql, history).pipe(
        Effect.catch((error) =>
          Effect.logWarning("the history settings could not be stored; the warehouse keeps the previous ones").pipe(
            Effect.annotateLogs({ error: error.message })
          )
        )
      )
      const write = Writes.write(sql, history)
      const clients = writeClients(sql, keeps(history, "clients"))
      const row = Reads.row(sql)
      const markDeleted = Writes.markDeleted(sql)
      const retireTranscripts = Transcripts.retireTranscripts(sql)
      const writeTranscripts = Transcripts.writeTranscripts(
        sql,
        (records, orderedAt, source) => write(prepare("meeting_transcripts", records, orderedAt), { source }),
        retireTranscripts
      )
      return Warehouse.of({
        write,
        upsert: (resource, records, options) =>
          Effect.suspend(() => write(prepare(resource, records, options.orderedAt), options)),
        writeClients: (deliveries, options) =>
          Effect.suspend(() => {
            const decoded: Array<DecodedClient> = []
            const rejected: Array<Rejected> = []
            for (const delivery of deliveries) {
              const prepared = prepare("clients", [delivery.record])
              rejected.push(...prepared.rejected)
              for (const item of prepared.decoded) decoded.push(decodedClient(item, delivery))
            }
            return clients(decoded, rejected, options.source)
          }),
        markDeleted: (resource, ids, at, options) =>
          resource !== "meetings"
            ? markDeleted(resource, ids, at, options)
            : Transcripts.withTranscriptsRetired(
                sql,
                retireTranscripts,
                markDeleted(resource, ids, at, options),
                ids,
                options.source
              ),
        readStarted: Transcripts.readStarted(sql),
        writeTranscripts: (reads, options) => writeTranscripts(reads, options.source),
        undelete: Writes.undelete(sql),
        recordClientChange: Writes.recordClientChange(sql),
        recordClientChanges: Writes.recordClientChanges(sql),
        keepNoteHouseholds: Writes.keepNoteHouseholds(sql),
        compareListed: Reads.compareListed(sql),
        liveWrittenBefore: Reads.liveWrittenBefore(sql),
        knownInBooks: Reads.knownInBooks(sql),
        count: Reads.count(sql),
        findById: Reads.findById(row),
        row,
        undecodable: Reads.undecodable(sql),
        pruneHistory: (retention) =>
          History.prune(sql)(retention).pipe(Effect.mapError(toWarehouseError("pruneHistory", "crm_history")))
      })
    })
  )
}

// ---------------------------------------------------------------------------------------------
// Reads for status, lag metrics and the plan
// ---------------------------------------------------------------------------------------------

/**
 * Each resource table (those of schema `crm` with the contract's `synced_at` and `deleted_at`; not
 * the `current_*` views): its rows, how many are deleted, and when crm-sync last wrote one.
 */
export const tableStats = Effect.gen(function* () {
  const sql = yield* SqlClient
  const tables = yield* sql<{ table_name: string }>`
    SELECT c.table_name FROM information_schema.columns c
    JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
    WHERE c.table_schema = 'crm' AND c.column_name = 'synced_at' AND t.table_type = 'BASE TABLE'
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
