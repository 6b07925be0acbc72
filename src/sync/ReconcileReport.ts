/**
 * What a reconciliation reports: per resource, what it found (missing, stale, gone) and repaired;
 * per run, its allowance and what it spent, where it began and where the next run resumes. Stored
 * as the JSON of `crm_sync.reconciliation_reports.report` (hence snake_case; Reconciler.ts writes
 * it), and printed by `crm-sync reconcile` as a table per resource with a line per run.
 */
import * as Duration from "effect/Duration"
import { percent, textTable } from "../observability/Text.ts"
import type { ByIdReport } from "./ByIdReconcile.ts"
import type { SyncError } from "./SyncError.ts"

/** The resources a reconciliation compares, in the order a pass reads them. */
export const ReconcileResources = ["businesses", "annuity_contracts", "financial_accounts"] as const
export type ReconcileResource = (typeof ReconcileResources)[number]

/** Where a pass stands: the next page of a resource to read. */
export interface Position {
  readonly resource: ReconcileResource
  readonly page: number
}

/** What one run found and did for one resource (snake_case: it is stored as JSON). */
export interface ResourceReport {
  /** `total_count` of the last page read. */
  readonly api_total: number | null
  /** Live rows in the warehouse when the resource's check began. */
  readonly warehouse_live: number
  /** Listed by the API, absent from the warehouse or marked deleted there. */
  readonly missing: number
  /** Stored with an older `updated_at` than the API's. */
  readonly stale: number
  /** Live in the warehouse, not listed by the API (counted only on a clean pass). */
  readonly gone: number
  /** Rows written with the API's version (inserted or updated). */
  readonly repaired: number
  /** The ids of the records written (missing or stale), the first `MAX_NAMED_REPAIRS`. */
  readonly repaired_ids?: ReadonlyArray<string>
  /** Rows that had been marked deleted and are live again. */
  readonly undeleted: number
  /** Records the warehouse refused (stored in `crm_sync.undecodable_records`). */
  readonly rejected: number
  /** Gone rows marked deleted (missed by this clean pass and the previous one). */
  readonly deleted: number
  /** Gone rows that would have been deleted but for `sync.deletion_threshold`. */
  readonly refused: number
  readonly pages_read: number
  readonly first_page: number
  readonly last_page: number
  readonly total_pages: number | null
  /** Read to its last page in this run. */
  readonly complete: boolean
  /** Pages of the second read that confirmed absences in this run (none: not needed or not affordable). */
  readonly confirm_pages?: number
  /** Read whole from page 1 in this run with stable totals: absences were counted. */
  readonly clean: boolean
  readonly note: string | null
  /** The gone ids of a clean pass, for the next one to confirm. */
  readonly gone_ids?: ReadonlyArray<string> | null
}

export type ReportStatus = "complete" | "partial" | "failed"

/** Why a run ended: the pass finished, the allowance ran out, the process stopped, or an error. */
export type Stopped = "finished" | "allowance" | "interrupted" | "error"

/** The report of one run: the JSON of `crm_sync.reconciliation_reports.report`. */
export interface ReconcileReport {
  readonly id: number
  readonly connection: string
  readonly status: ReportStatus
  readonly stopped: Stopped
  /** Requests this run may send, and sent. */
  readonly allowance: number
  readonly requests: number
  readonly budget: {
    readonly bucket: string
    readonly limit: number
    readonly window_seconds: number
    readonly share: number
    /** Requests of the bucket's current window already used when the run began (by anyone). */
    readonly used_at_start: number
    /** Requests earlier reconciliations of this connection spent in the current window. */
    readonly spent_earlier: number
  }
  /** Where this run began, when it went on from an earlier partial one. */
  readonly resumed_from: Position | null
  /** Where the next run begins (null: from the start). */
  readonly next: Position | null
  readonly resources: Partial<Record<ReconcileResource, ResourceReport>>
  /** Tasks, meetings and notes re-read by id (ByIdReconcile.ts); null before that part ran. */
  readonly by_id: ByIdReport | null
  /** Why a `failed` run failed (the CRM after the client's retries, or the database). */
  readonly error: ReportError | null
}

export interface ReportError {
  readonly kind: SyncError["reason"]["_tag"]
  readonly message: string
  readonly retryable: boolean
}

/** How many repaired records a report names per resource (the count has them all). */
export const MAX_NAMED_REPAIRS = 100
/** How many of them the printed summary shows. */
const PRINTED_REPAIRS = 20

/** The names kept so far plus a page's, up to the limit. */
export const withNamed = (kept: ReadonlyArray<string> | undefined, more: ReadonlyArray<string>) =>
  [...(kept ?? []), ...more].slice(0, MAX_NAMED_REPAIRS)

/** A resource's report before its first page: nothing found yet. */
export const emptyResourceReport = (warehouseLive: number, firstPage: number): ResourceReport => ({
  api_total: null,
  warehouse_live: warehouseLive,
  missing: 0,
  stale: 0,
  gone: 0,
  repaired: 0,
  undeleted: 0,
  rejected: 0,
  deleted: 0,
  refused: 0,
  pages_read: 0,
  first_page: firstPage,
  last_page: firstPage - 1,
  total_pages: null,
  complete: false,
  clean: false,
  note: null
})

/** A run's status from why it stopped: only a finished pass is complete, an error fails it. */
export const statusOf = (stopped: Stopped): ReportStatus =>
  stopped === "finished" ? "complete" : stopped === "error" ? "failed" : "partial"

// ---------------------------------------------------------------------------------------------
// The summary `crm-sync reconcile` prints
// ---------------------------------------------------------------------------------------------

const number = new Intl.NumberFormat("en-US")

const cell = (value: number | null | undefined) => (value === null || value === undefined ? "-" : number.format(value))

const resourceStatus = (report: ReconcileReport, resource: ReconcileResource): string => {
  const checked = report.resources[resource]
  if (checked === undefined) {
    const start = report.resumed_from === null ? 0 : ReconcileResources.indexOf(report.resumed_from.resource)
    return ReconcileResources.indexOf(resource) < start ? "covered earlier" : "not reached"
  }
  if (!checked.complete) return checked.pages_read === 0 ? "not reached" : `partial (to page ${checked.last_page})`
  return checked.first_page > 1 ? `complete (from page ${checked.first_page})` : "complete"
}

const header = [
  "connection",
  "resource",
  "status",
  "pages",
  "api",
  "warehouse",
  "missing",
  "stale",
  "gone",
  "repaired",
  "deleted"
]

/** A resource's row; gone records are counted only on a clean pass. */
const resourceCells = (report: ReconcileReport, resource: ReconcileResource) => {
  const checked = report.resources[resource]
  return [
    report.connection,
    resource,
    resourceStatus(report, resource),
    cell(checked?.pages_read),
    cell(checked?.api_total),
    cell(checked?.warehouse_live),
    cell(checked?.missing),
    cell(checked?.stale),
    checked?.clean === true ? cell(checked.gone) : "-",
    cell(checked === undefined ? undefined : checked.repaired + checked.undeleted),
    cell(checked?.deleted)
  ]
}

/** How a run ended, what it spent of its allowance, and where the next one resumes. */
const runLine = (report: ReconcileReport) => {
  const where = report.next === null ? "" : `; the next run resumes at ${report.next.resource} page ${report.next.page}`
  const error = report.error === null ? "" : `: ${report.error.message}`
  return (
    `${report.connection}: ${report.status}${error} — ${number.format(report.requests)} of ` +
    `${number.format(report.allowance)} allowed requests (${percent(report.budget.share)} of ` +
    `${number.format(report.budget.limit)} per ${Duration.format(Duration.seconds(report.budget.window_seconds))} ` +
    `on ${report.budget.bucket})${where}; report ${report.id}`
  )
}

/** What the by-id part did, when the connection knows any task, meeting or note. */
const byIdLines = (report: ReconcileReport) => {
  const byId = report.by_id
  if (byId === null || byId === undefined || byId.known === 0) return []
  const left = byId.not_reached === 0 ? "" : `; ${number.format(byId.not_reached)} left for later runs`
  return [
    `${report.connection}: tasks, meetings, notes by id: ${number.format(byId.checked)} of ` +
      `${number.format(byId.known)} checked, ${number.format(byId.repaired)} repaired, ` +
      `${number.format(byId.deleted)} deleted, ${number.format(byId.unreadable)} unreadable, ` +
      `${number.format(byId.rejected)} rejected${left}`
  ]
}

/** "bz_1, bz_2 and 3 more": the first names, and how many the count holds beyond them. */
const namedList = (ids: ReadonlyArray<string>, total: number) => {
  const shown = ids.slice(0, PRINTED_REPAIRS)
  const more = Math.max(total, ids.length) - shown.length
  return `${shown.join(", ")}${more > 0 ? ` and ${number.format(more)} more` : ""}`
}

/** The records each resource's check wrote, by id: what a person may want to look at. */
const repairedLines = (report: ReconcileReport) => [
  ...ReconcileResources.flatMap((resource) => {
    const checked = report.resources[resource]
    const ids = checked?.repaired_ids ?? []
    return ids.length === 0 ? [] : [`  ${report.connection} ${resource}: ${namedList(ids, checked!.repaired)}`]
  }),
  ...((report.by_id?.repaired_ids?.length ?? 0) === 0
    ? []
    : [`  ${report.connection} by id: ${namedList(report.by_id!.repaired_ids!, report.by_id!.repaired)}`])
]

const noteLines = (report: ReconcileReport) =>
  ReconcileResources.flatMap((resource) => {
    const note = report.resources[resource]?.note
    return note === null || note === undefined ? [] : [`  ${report.connection} ${resource}: ${note}`]
  })

/** The summary table `crm-sync reconcile` prints. */
export const renderReports = (reports: ReadonlyArray<ReconcileReport>): string => {
  const rows = reports.flatMap((report) => ReconcileResources.map((resource) => resourceCells(report, resource)))
  const notes = reports.flatMap(noteLines)
  const repaired = reports.flatMap(repairedLines)
  return [
    ...textTable(header, rows, 3),
    "",
    ...reports.map(runLine),
    ...reports.flatMap(byIdLines),
    ...(repaired.length === 0 ? [] : ["", "repaired:", ...repaired]),
    ...(notes.length === 0 ? [] : ["", "notes:", ...notes])
  ].join("\n")
}
