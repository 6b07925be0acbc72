/**
 * What a backfill reports: a row per connection and resource — its counters, how it ended, where a
 * resumed crawl began — and the summary table `crm-sync backfill` prints at the end. Pure: the rows
 * are stored as they are in the backfill's job_runs detail.
 */
import { formatDuration, textTable } from "../observability/Text.ts"
import type { BackfillResource } from "./BackfillResources.ts"
import { noSyncCounts, type SyncCounts } from "./SyncCounts.ts"

export interface BackfillRow extends SyncCounts {
  readonly connection: string
  readonly resource: BackfillResource
  /**
   * `done earlier`: completed by an unfinished backfill that this one resumed; `interrupted`: the
   * resource it was reading when a signal stopped it (the next backfill resumes it).
   */
  readonly status: "done" | "done earlier" | "failed" | "interrupted"
  readonly deleted: number
  readonly resumedFrom: number | undefined
  readonly seconds: number
  readonly note: string | undefined
}

export interface BackfillSummary {
  readonly rows: ReadonlyArray<BackfillRow>
  readonly requests: number
  readonly seconds: number
  /** Set when a signal stopped the backfill before every resource was read. */
  readonly interrupted?: true
}

/** A row with nothing read yet (its status and time are the caller's). */
export const emptyRow = (connection: string, resource: BackfillResource) => ({
  connection,
  resource,
  ...noSyncCounts,
  deleted: 0,
  resumedFrom: undefined,
  note: undefined
})

const number = new Intl.NumberFormat("en-US")

const header = [
  "connection",
  "resource",
  "status",
  "pages",
  "requests",
  "records",
  "inserted",
  "updated",
  "unchanged",
  "rejected",
  "deleted",
  "time"
]

const cells = (row: BackfillRow) => [
  row.connection,
  row.resource,
  row.resumedFrom === undefined ? row.status : `${row.status} (resumed at page ${row.resumedFrom})`,
  number.format(row.pages),
  number.format(row.requests),
  number.format(row.records),
  number.format(row.inserted),
  number.format(row.updated),
  number.format(row.unchanged),
  number.format(row.rejected),
  number.format(row.deleted),
  formatDuration(row.seconds * 1000)
]

/** How many rows are done (now or by an earlier backfill). */
export const doneCount = (summary: BackfillSummary): number =>
  summary.rows.filter((row) => row.status === "done" || row.status === "done earlier").length

/** The summary table printed at the end. */
export const renderSummary = (summary: BackfillSummary): string => {
  const notes = summary.rows.flatMap((row) =>
    row.note === undefined ? [] : [`  ${row.connection} ${row.resource}: ${row.note}`]
  )
  return [
    ...textTable(header, summary.rows.map(cells), 3),
    "",
    `${doneCount(summary)} of ${summary.rows.length} done` +
      (summary.interrupted === true ? " (interrupted)" : "") +
      ", " +
      `${number.format(summary.requests)} requests in ${formatDuration(summary.seconds * 1000)}`,
    ...(notes.length === 0 ? [] : ["", "notes:", ...notes])
  ].join("\n")
}
