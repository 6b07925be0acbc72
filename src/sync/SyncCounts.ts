/**
 * The counters a sync run reports — pages and requests spent, records read, and what the warehouse
 * did with them — shared by the poll's summary and the backfill's rows, with the one rule that
 * turns a warehouse write into them: a snapshot older than the stored row (`skipped`) counts as
 * unchanged.
 */
import type { UpsertResult } from "../warehouse/Warehouse.ts"

/** What the warehouse did with the records a run read. */
export interface WriteCounts {
  readonly inserted: number
  readonly updated: number
  readonly unchanged: number
  readonly rejected: number
}

/** A run's counters: what it spent, read and wrote. */
export interface SyncCounts extends WriteCounts {
  readonly pages: number
  readonly requests: number
  readonly records: number
}

export const noSyncCounts: SyncCounts = {
  pages: 0,
  requests: 0,
  records: 0,
  inserted: 0,
  updated: 0,
  unchanged: 0,
  rejected: 0
}

/** A write's outcome as reported: skipped (older) snapshots are unchanged ones. */
export const writeCounts = (result: UpsertResult): WriteCounts => ({
  inserted: result.inserted,
  updated: result.updated,
  unchanged: result.unchanged + result.skipped,
  rejected: result.rejected
})

export const addWriteCounts = (a: WriteCounts, b: WriteCounts): WriteCounts => ({
  inserted: a.inserted + b.inserted,
  updated: a.updated + b.updated,
  unchanged: a.unchanged + b.unchanged,
  rejected: a.rejected + b.rejected
})
