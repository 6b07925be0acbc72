/**
 * The types a warehouse write or read speaks in (and the sum of two writes' outcomes), shared by
 * the façade (Warehouse.ts) and the files it delegates to (WarehouseReads.ts, WarehouseWrites.ts,
 * ClientWrites.ts, TranscriptWrites.ts), which import them from here rather than from the façade.
 * Warehouse.ts re-exports them for the rest of the program.
 */
import type * as DateTime from "effect/DateTime"
import type { Decoded, Rejected } from "./Rows.ts"
import type { ReferenceResource, Resource, ResourceRecord, Source } from "./Tables.ts"

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

export interface WriteOptions {
  readonly source: Source
  /** Reference rows a long run of writes (a crawl) already knows exist (see `KnownReferences`). */
  readonly known?: ReferenceLedger
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

/** One `client.updated` delivery (spec §6.3). */
export interface ClientChange {
  readonly hookId: string
  readonly clientId: string
  readonly changedFields: ReadonlyArray<string>
  readonly receivedAt: DateTime.Utc
  readonly subscriptionId?: string | null | undefined
  readonly bookId?: string | null | undefined
}

/**
 * One read of a meeting's transcript: the response as received (undefined: the read answered 404),
 * and when the read started, by the database's clock (`Warehouse.readStarted`).
 */
export interface TranscriptRead {
  readonly meetingId: string
  readonly raw: unknown
  readonly readAt: string
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
  /** A meeting with a stored, live transcript (its by-id check reads the transcript too). */
  readonly live_transcript: boolean
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

/**
 * Records of one resource decoded and turned into rows: all the work of a write that needs no
 * database, so a caller can do it while the database is busy with the previous batch.
 */
export interface Prepared {
  readonly resource: Resource
  readonly decoded: ReadonlyArray<Decoded>
  readonly rejected: ReadonlyArray<Rejected>
}
