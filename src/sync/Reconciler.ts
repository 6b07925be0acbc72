/**
 * Reconciler: `crm-sync reconcile` and the daemon's nightly reconciliation. For one connection it
 * reads the listings crm-sync keeps by listing — businesses, annuity contracts, financial accounts
 * (spec §4: `page` and `per_page` only, at `per_page=100`) — and compares every page with the
 * warehouse: records the warehouse lacks (or holds as deleted) are `missing`, records whose stored
 * `updated_at` is older than the API's are `stale`, and both are repaired on the spot by upserting
 * what was read (`source = reconcile`, the warehouse's forward-only write) and undeleting. Each page
 * is compared, repaired and its resume position saved in one transaction.
 *
 * Budget. A run may spend `budget.reconcile_share` of the strictest bucket's window (spec §8), less
 * what earlier reconciliations of the connection spent in the current window (RateBudget.status
 * says when it began). Every request is `bulk` and takes its permit from the shared budget as usual;
 * the allowance only caps how many a run sends. When it runs out, the run stops and its report is
 * `partial`; the position (`crm_sync.cursors`, resource `reconcile`) lets the next run go on from
 * the page after the last one read.
 *
 * Deletion follows the crawler's rules (docs/sync.md): records the API no longer lists are counted
 * (`gone`) only after a resource was read whole in this run, from page 1, with `total_count` the
 * same on every page (a listing that moved under the read can hide records across page boundaries),
 * and only among rows written before the read began; they are marked deleted once a second look
 * missed them too: a second whole read in the same run when the allowance can pay for it, else the
 * next clean pass (each report keeps the ids it found gone); nothing is deleted when more than
 * `sync.deletion_threshold` of the live rows would go at once. A partial read never deletes anything.
 *
 * Before the listings, tasks, meetings and notes the warehouse knows are re-read by id (ByIdReconcile.ts).
 *
 * Every run writes one `crm_sync.reconciliation_reports` row, opened `running` and closed
 * `complete`, `partial` or `failed` with a JSON report per resource, however the run ends.
 *
 * Why not the PageCrawler: a crawl stores every record and notes every id it sees
 * (`crawl_sightings`), over as many windows as it takes; a reconciliation must fit a fixed request
 * allowance, write only what differs, and report what it found, so it reads pages itself.
 */
import { Cause, Clock, Console, Context, Cron, DateTime, Duration, Effect, Layer, Option, Result, Schema } from "effect"
import { updatedAtOf } from "./UpdatedAt.ts"
import { percent } from "../observability/Text.ts"
import { SqlClient } from "effect/sql/SqlClient"
import type { HttpClient } from "effect/http"
import { AppConfig, ConfigInvalid } from "../config/AppConfig.ts"
import { strictest } from "../budget/Buckets.ts"
import { type BudgetError, RateBudget } from "../budget/RateBudget.ts"
import { CrmClient, type CrmClientShape, type ListPage } from "../crm/CrmClient.ts"
import { CrmPermitSpent } from "../crm/CrmTransport.ts"
import type { Credentials } from "../crm/Credentials.ts"
import { type UpsertResult, Warehouse } from "../warehouse/Warehouse.ts"
import { JobLease } from "./JobLease.ts"
import { type JobOutcome, JobRuns } from "./JobRuns.ts"
import { type ByIdReport, reconcileById } from "./ByIdReconcile.ts"
import { CrawlRuns, shortReadSlack } from "./CrawlRuns.ts"
import { Cursors } from "./Cursors.ts"
import { idOf, PER_PAGE } from "./PageCrawler.ts"
import { Crm, Database, type JobFailure, SyncError, toSyncError, Usage } from "./SyncError.ts"
import { SyncServicesLive } from "./SyncJobs.ts"

/** The resources a reconciliation compares, in the order a pass reads them. */
export const ReconcileResources = ["businesses", "annuity_contracts", "financial_accounts"] as const
export type ReconcileResource = (typeof ReconcileResources)[number]

/** The job name in `crm_sync.job_runs`. */
export const RECONCILE_JOB = "reconcile"

/** One reconciliation per connection at a time, on any process. */
export const reconcileLease = (connection: string) => `reconcile:${connection}`

/** The `crm_sync.cursors` row (per connection) holding where the next run resumes. */
const POSITION = "reconcile"

/** Gone ids kept in a report for the next pass to confirm; beyond this, nothing is deleted. */
const MAX_TRACKED_GONE = 10_000

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

const PositionState = Schema.Struct({
  resource: Schema.Literals(ReconcileResources),
  page: Schema.Int.check(Schema.isGreaterThan(0))
})
const GoneRows = Schema.Array(Schema.Struct({ ids: Schema.NullOr(Schema.Array(Schema.String)) }))
const CountRows = Schema.Array(Schema.Struct({ n: Schema.Number }))
const NowRows = Schema.Array(Schema.Struct({ at: Schema.Date }))

const zeroCounts: UpsertResult = { inserted: 0, updated: 0, unchanged: 0, skipped: 0, rejected: 0 }

const listFor = (client: CrmClientShape, resource: ReconcileResource) => {
  const options = { priority: "bulk" } as const
  return (page: number): Effect.Effect<ListPage<unknown>, JobFailure> => {
    const query = { page, per_page: PER_PAGE }
    switch (resource) {
      case "businesses":
        return client.listBusinesses(query, options)
      case "annuity_contracts":
        return client.listAnnuityContracts(query, options)
      case "financial_accounts":
        return client.listFinancialAccounts(query, options)
    }
  }
}

export class Reconciler extends Context.Service<
  Reconciler,
  {
    /**
     * One reconciliation run of one connection, within its allowance; writes its report row and
     * returns the report. A CRM or warehouse failure part way ends the run with a `failed` report
     * (its `error` says why) rather than an error; only a failure to write the report fails.
     * The caller holds `reconcileLease(connection)`.
     */
    readonly reconcile: (client: CrmClientShape) => Effect.Effect<ReconcileReport, SyncError>
  }
>()("crm-sync/sync/Reconciler") {
  static readonly layer = Layer.effect(
    Reconciler,
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const warehouse = yield* Warehouse
      const budget = yield* RateBudget
      const config = yield* AppConfig
      const threshold = config.sync.deletion_threshold
      const share = config.budget.reconcile_share

      const cursors = yield* Cursors
      const crawlRuns = yield* CrawlRuns

      const readPosition = (connection: string) =>
        cursors.state(connection, POSITION).pipe(
          // A position that does not decode (hand-edited, an older shape) means: start over.
          Effect.map((state) => Option.getOrUndefined(Schema.decodeUnknownOption(PositionState)(state)))
        )

      const savePosition = (connection: string, position: Position | null) =>
        cursors.saveState(connection, POSITION, position ?? {})

      /** The run's allowance: the share of the strictest bucket's window, less what this window already gave. */
      const allowanceFor = (client: CrmClientShape) =>
        Effect.gen(function* () {
          const bucket = strictest(client.buckets)
          const [status] = yield* budget.status([bucket])
          const windowStart = status?.windowStart
          // Runs that ended inside the current window count whole: over-counting errs on the safe side.
          const spent =
            windowStart === undefined
              ? 0
              : ((yield* sql`
                  SELECT COALESCE(sum(requests), 0)::int AS n FROM crm_sync.reconciliation_reports
                  WHERE connection = ${client.connection.name}
                    AND COALESCE(finished_at, now()) >= ${DateTime.toDate(windowStart)}`.pipe(
                  Effect.flatMap(Schema.decodeUnknownEffect(CountRows))
                ))[0]?.n ?? 0)
          const perWindow = Math.floor(share * bucket.limit)
          return {
            allowance: Math.max(0, perWindow - spent),
            budget: {
              bucket: bucket.key,
              limit: bucket.limit,
              window_seconds: bucket.windowMs / 1000,
              share,
              used_at_start: status?.used ?? 0,
              spent_earlier: spent
            }
          }
        })

      /** Compares one page with the warehouse and repairs it; saves `next` in the same transaction. */
      const applyPage = (
        connection: string,
        resource: ReconcileResource,
        page: ListPage<unknown>,
        next: Position | null
      ) =>
        sql
          .withTransaction(
            Effect.gen(function* () {
              const byId = new Map<string, unknown>()
              for (const raw of page.data) {
                const id = idOf(raw)
                if (id !== undefined) byId.set(id, raw)
              }
              const ids = [...byId.keys()]
              const states = yield* warehouse.compareListed(
                resource,
                ids.map((id) => ({ id, updatedAt: updatedAtOf(byId.get(id))?.iso ?? null }))
              )
              const differing = states.filter((row) => row.state !== "current")
              const deletedIds = states.filter((row) => row.state === "deleted").map((row) => row.id)
              const counts =
                differing.length === 0
                  ? zeroCounts
                  : yield* warehouse.upsert(
                      resource,
                      differing.map((row) => byId.get(row.id)),
                      { source: "reconcile" }
                    )
              // Listed by the API, so it exists (spec §1: the v1 API has no DELETE; deletion here
              // was by absence, which this listing contradicts).
              const undeleted = yield* warehouse.undelete(resource, deletedIds, { source: "reconcile" })
              yield* savePosition(connection, next)
              return {
                ids,
                missing: states.filter((row) => row.state === "absent").length + deletedIds.length,
                stale: states.filter((row) => row.state === "stale").length,
                repaired: counts.inserted + counts.updated,
                rejected: counts.rejected,
                undeleted
              }
            })
          )
          .pipe(Effect.uninterruptible)

      /** Live rows written before the read began that the read did not see. */
      const absentIds = (resource: ReconcileResource, seen: ReadonlySet<string>, readStartedAt: Date) =>
        warehouse
          .liveWrittenBefore(resource, readStartedAt)
          .pipe(Effect.map((ids) => ids.filter((id) => !seen.has(id))))

      /** The ids the previous clean pass of the resource found gone. */
      const previouslyGone = (connection: string, runId: number, resource: ReconcileResource) =>
        sql`
          SELECT report -> 'resources' -> ${resource}::text -> 'gone_ids' AS ids
          FROM crm_sync.reconciliation_reports
          WHERE connection = ${connection} AND id < ${runId}
            AND report -> 'resources' -> ${resource}::text ->> 'clean' = 'true'
          ORDER BY id DESC LIMIT 1`.pipe(
          Effect.flatMap(Schema.decodeUnknownEffect(GoneRows)),
          Effect.map((rows) => new Set(rows[0]?.ids ?? []))
        )

      /**
       * Absence after a clean pass: the gone rows that a second look also missed — the previous
       * clean pass, or this run's confirming read (`confirmedNow`) — are deleted, within the
       * threshold, unless something wrote them since the read began.
       */
      const settleAbsences = (
        connection: string,
        resource: ReconcileResource,
        gone: ReadonlyArray<string>,
        confirmed: ReadonlyArray<string>,
        readStartedAt: Date,
        live: number,
        notes: Array<string>
      ) =>
        sql.withTransaction(
          Effect.gen(function* () {
            let deleted = 0
            let refused = 0
            if (confirmed.length > 0 && live > 0 && confirmed.length / live > threshold) {
              refused = confirmed.length
              notes.push(
                `deletion refused: ${confirmed.length} of ${live} live records (${percent(confirmed.length / live)}) ` +
                  `missing from two clean reads, more than the threshold of ${percent(threshold)}; nothing deleted`
              )
            } else if (confirmed.length > 0) {
              // A poll or a crawl that wrote one of them since the read began has seen it: it stays.
              const untouched = yield* warehouse.liveWrittenBefore(resource, readStartedAt, {
                ids: confirmed,
                lock: true
              })
              const now = yield* DateTime.now
              deleted = (yield* warehouse.markDeleted(resource, untouched, now, { source: "reconcile" })).deleted
              // Nor do the crawls count misses for them any more; a crawl that lists one again
              // undeletes it (CrawlRuns.recordBatch).
              yield* crawlRuns.forgetMisses(connection, resource, untouched)
            }
            if (gone.length > MAX_TRACKED_GONE) {
              notes.push(`more than ${MAX_TRACKED_GONE} records gone: not tracked for deletion`)
            }
            return {
              gone: gone.length,
              gone_ids: gone.length > MAX_TRACKED_GONE ? null : gone,
              deleted,
              refused,
              note: notes.length === 0 ? null : notes.join("; ")
            }
          })
        )

      const reconcile = Effect.fn("Reconciler.reconcile")(function* (client: CrmClientShape) {
        const connection = client.connection.name
        const toError = toSyncError(RECONCILE_JOB, { connection })
        const fail = (error: JobFailure | BudgetError): SyncError =>
          error._tag === "BudgetError"
            ? new SyncError({ job: RECONCILE_JOB, connection, reason: new Database({ message: error.message }) })
            : toError(error)
        yield* Effect.annotateCurrentSpan({ connection })

        // We hold the lease: a report still `running` belongs to a process that died mid-run.
        yield* sql`
          UPDATE crm_sync.reconciliation_reports
          SET status = 'failed', finished_at = now(),
              report = report || '{"error": "the process ended before the run did"}'::jsonb
          WHERE connection = ${connection} AND status = 'running'`.pipe(Effect.mapError(fail))
        const { allowance, budget: budgetInfo } = yield* allowanceFor(client).pipe(Effect.mapError(fail))
        const resumedFrom = (yield* readPosition(connection).pipe(Effect.mapError(fail))) ?? null
        const [opened] = yield* sql<{ id: number }>`
          INSERT INTO crm_sync.reconciliation_reports (connection, report)
          VALUES (${connection}, ${JSON.stringify({ allowance, budget: budgetInfo, resumed_from: resumedFrom })}::jsonb)
          RETURNING id::int AS id`.pipe(Effect.mapError(fail))
        const runId = opened!.id

        let requests = 0
        let next: Position | null = resumedFrom
        const resources: Partial<Record<ReconcileResource, ResourceReport>> = {}
        let byId: ByIdReport | null = null

        const report = (status: ReportStatus, stopped: Stopped, error: ReportError | null): ReconcileReport => ({
          id: runId,
          connection,
          status,
          stopped,
          allowance,
          requests,
          budget: budgetInfo,
          resumed_from: resumedFrom,
          next,
          resources: { ...resources },
          by_id: byId,
          error
        })

        const close = (final: ReconcileReport) =>
          sql`
            UPDATE crm_sync.reconciliation_reports
            SET status = ${final.status}, finished_at = now(), requests = ${final.requests},
                report = ${JSON.stringify(final)}::jsonb
            WHERE id = ${runId}`.pipe(Effect.mapError(fail))

        /**
         * A second whole read of a listing within the run, ids only (nothing is written): clean when
         * every page gave the same `total_count`. The caller checked the allowance can pay for it.
         */
        const confirmRead = (resource: ReconcileResource) =>
          Effect.gen(function* () {
            const list = listFor(client, resource)
            const seen = new Set<string>()
            let total: number | undefined
            let clean = true
            let pages = 0
            for (let pageNumber = 1; ; pageNumber++) {
              const page = yield* list(pageNumber).pipe(
                Effect.provideService(CrmPermitSpent, () => {
                  requests++
                })
              )
              pages++
              if (total !== undefined && page.pagination.total_count !== total) clean = false
              total = page.pagination.total_count
              for (const raw of page.data) {
                const id = idOf(raw)
                if (id !== undefined) seen.add(id)
              }
              if (page.data.length === 0 || pageNumber >= page.pagination.total_pages) break
            }
            // A listing that held fewer records than it said proves no absence either.
            const whole = total === undefined || seen.size + shortReadSlack(total) >= total
            return { seen, clean: clean && whole, pages }
          })

        /** Reads one resource from `firstPage` until its end or the allowance's; true when it ended. */
        const checkResource = (resource: ReconcileResource, firstPage: number, after: ReconcileResource | undefined) =>
          Effect.gen(function* () {
            const list = listFor(client, resource)
            const [started] = yield* sql`SELECT clock_timestamp() AS at`.pipe(
              Effect.flatMap(Schema.decodeUnknownEffect(NowRows))
            )
            const live = yield* warehouse.count(resource)
            const seen = new Set<string>()
            let current: ResourceReport = {
              api_total: null,
              warehouse_live: live,
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
            }
            let previousTotal: number | undefined
            let drifted = false
            for (let pageNumber = firstPage; ; pageNumber++) {
              if (requests >= allowance) {
                resources[resource] = current
                return false
              }
              // Every permit the page takes counts, retries included, as soon as it is taken: a
              // request that fails has still been spent. The allowance can be overrun only by the
              // retries of its last page.
              const page = yield* list(pageNumber).pipe(
                Effect.provideService(CrmPermitSpent, () => {
                  requests++
                })
              )
              const total = page.pagination.total_count
              if (previousTotal !== undefined && total !== previousTotal) drifted = true
              previousTotal = total
              const last = page.data.length === 0 || pageNumber >= page.pagination.total_pages
              next = !last
                ? { resource, page: pageNumber + 1 }
                : after === undefined
                  ? null
                  : { resource: after, page: 1 }
              const applied = yield* applyPage(connection, resource, page, next)
              for (const id of applied.ids) seen.add(id)
              current = {
                ...current,
                api_total: total,
                missing: current.missing + applied.missing,
                stale: current.stale + applied.stale,
                repaired: current.repaired + applied.repaired,
                undeleted: current.undeleted + applied.undeleted,
                rejected: current.rejected + applied.rejected,
                pages_read: current.pages_read + 1,
                last_page: pageNumber,
                total_pages: page.pagination.total_pages
              }
              resources[resource] = current
              if (last) break
            }
            current = { ...current, complete: true }
            if (firstPage > 1) {
              current = { ...current, note: `read from page ${firstPage} (resumed): absences not counted` }
            } else if (drifted) {
              current = { ...current, note: "the listing changed while it was read: absences not counted" }
            } else if (
              current.api_total !== null &&
              seen.size + shortReadSlack(current.api_total) < current.api_total
            ) {
              current = {
                ...current,
                note: `the listing's total_count said ${current.api_total} records but its pages held ${seen.size}: absences not counted`
              }
            } else {
              const gone = yield* absentIds(resource, seen, started!.at)
              const missedBefore = yield* previouslyGone(connection, runId, resource)
              const unconfirmed = gone.filter((id) => !missedBefore.has(id))
              const notes: Array<string> = []
              // Absent once: read the listing again now (a record hidden by drift across a page
              // boundary shows up), if the allowance can pay for it; else the next run confirms.
              let seenAgain: ReadonlySet<string> | undefined
              if (unconfirmed.length > 0 && gone.length <= MAX_TRACKED_GONE) {
                const pages = current.total_pages ?? current.pages_read
                const left = Math.max(0, allowance - requests)
                if (left >= pages) {
                  const again = yield* confirmRead(resource)
                  current = { ...current, confirm_pages: again.pages }
                  if (again.clean) seenAgain = again.seen
                  else notes.push("the listing changed during the confirming read: the next clean pass confirms")
                } else {
                  notes.push(
                    `${unconfirmed.length} record(s) not listed; confirming in this run needs ${pages} requests and ` +
                      `${left} are left: deleted only if the next clean pass misses them too`
                  )
                }
              }
              // Listed by the confirming read: the first read missed them (drift), they are not gone.
              const stillGone = seenAgain === undefined ? gone : gone.filter((id) => !seenAgain.has(id))
              const confirmed = stillGone.filter((id) => missedBefore.has(id) || seenAgain !== undefined)
              const settled = yield* settleAbsences(
                connection,
                resource,
                stillGone,
                confirmed,
                started!.at,
                live,
                notes
              )
              current = { ...current, clean: true, ...settled }
            }
            resources[resource] = current
            return true
          })

        const pass = Effect.gen(function* () {
          // Known ids of the resources with no listing first, with at most half the allowance: the
          // listings take what it leaves.
          byId = yield* reconcileById(client, Math.floor(allowance / 2)).pipe(
            Effect.provideService(SqlClient, sql),
            Effect.provideService(Warehouse, warehouse),
            Effect.provideService(CrmPermitSpent, () => {
              requests++
            })
          )
          const start = resumedFrom === null ? 0 : ReconcileResources.indexOf(resumedFrom.resource)
          for (let index = start; index < ReconcileResources.length; index++) {
            const resource = ReconcileResources[index]!
            const firstPage = index === start && resumedFrom !== null ? resumedFrom.page : 1
            const ended = yield* checkResource(resource, firstPage, ReconcileResources[index + 1])
            if (!ended) return "allowance" as const
          }
          return "finished" as const
        })

        const outcome = yield* pass.pipe(
          Effect.map((stopped) => ({ stopped, error: null as ReportError | null })),
          Effect.catch((error) => {
            const { reason } = fail(error)
            return Effect.succeed({
              stopped: "error" as Stopped,
              error: { kind: reason._tag, message: reason.message, retryable: reason.retryable }
            })
          }),
          Effect.onInterrupt(() => Effect.ignore(close(report("partial", "interrupted", null))))
        )
        const final = report(
          outcome.stopped === "finished" ? "complete" : outcome.stopped === "error" ? "failed" : "partial",
          outcome.stopped,
          outcome.error
        )
        yield* close(final)
        yield* Effect.logInfo("reconcile: run ended").pipe(
          Effect.annotateLogs({
            connection,
            status: final.status,
            requests,
            allowance,
            error: final.error?.message ?? ""
          })
        )
        return final
      })

      return Reconciler.of({ reconcile })
    })
  )
}

// ---------------------------------------------------------------------------------------------
// The job: one run under the lease, recorded in job_runs
// ---------------------------------------------------------------------------------------------

/** A failed report's error, as the job's failure. */
const failureOf = (report: ReconcileReport) => {
  const error = report.error ?? { kind: "Crm", message: "failed", retryable: true }
  return new SyncError({
    job: RECONCILE_JOB,
    connection: report.connection,
    reason:
      error.kind === "Crm"
        ? new Crm({ message: error.message, retryable: error.retryable })
        : error.kind === "Usage"
          ? new Usage({ message: error.message })
          : new Database({ message: error.message })
  })
}

/** One recorded run for one connection; a `failed` report fails the job (after it is written). */
const runJob = (client: CrmClientShape, onReport: (report: ReconcileReport) => Effect.Effect<void>) =>
  Effect.gen(function* () {
    const reconciler = yield* Reconciler
    const jobRuns = yield* JobRuns
    const connection = client.connection.name
    return yield* jobRuns.record(
      RECONCILE_JOB,
      connection,
      reconciler.reconcile(client).pipe(
        Effect.tap(onReport),
        Effect.flatMap((report) =>
          report.status === "failed"
            ? Effect.fail(failureOf(report))
            : Effect.succeed({
                requests: report.requests,
                detail: {
                  report_id: report.id,
                  status: report.status,
                  allowance: report.allowance,
                  stopped: report.stopped,
                  next: report.next
                }
              } satisfies JobOutcome)
        )
      )
    )
  })

// ---------------------------------------------------------------------------------------------
// `crm-sync reconcile [--connection NAME]`
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

/** The summary table `crm-sync reconcile` prints. */
export const renderReports = (reports: ReadonlyArray<ReconcileReport>): string => {
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
  const body = reports.flatMap((report) =>
    ReconcileResources.map((resource) => {
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
    })
  )
  const widths = header.map((title, column) => Math.max(title.length, ...body.map((cells) => cells[column]!.length)))
  const left = new Set([0, 1, 2])
  const line = (cells: ReadonlyArray<string>) =>
    cells
      .map((cell, column) => (left.has(column) ? cell.padEnd(widths[column]!) : cell.padStart(widths[column]!)))
      .join("  ")
      .trimEnd()
  const runs = reports.map((report) => {
    const where =
      report.next === null ? "" : `; the next run resumes at ${report.next.resource} page ${report.next.page}`
    const error = report.error === null ? "" : `: ${report.error.message}`
    return (
      `${report.connection}: ${report.status}${error} — ${number.format(report.requests)} of ` +
      `${number.format(report.allowance)} allowed requests (${percent(report.budget.share)} of ` +
      `${number.format(report.budget.limit)} per ${Duration.format(Duration.seconds(report.budget.window_seconds))} ` +
      `on ${report.budget.bucket})${where}; report ${report.id}`
    )
  })
  const byIds = reports.flatMap((report) => {
    const byId = report.by_id
    if (byId === null || byId === undefined || byId.known === 0) return []
    const left = byId.not_reached === 0 ? "" : `; ${number.format(byId.not_reached)} left for later runs`
    return [
      `${report.connection}: tasks, meetings, notes by id: ${number.format(byId.checked)} of ` +
        `${number.format(byId.known)} checked, ${number.format(byId.repaired)} repaired, ` +
        `${number.format(byId.deleted)} deleted, ${number.format(byId.unreadable)} unreadable, ` +
        `${number.format(byId.rejected)} rejected${left}`
    ]
  })
  const notes = reports.flatMap((report) =>
    ReconcileResources.flatMap((resource) => {
      const note = report.resources[resource]?.note
      return note === null || note === undefined ? [] : [`  ${report.connection} ${resource}: ${note}`]
    })
  )
  return [
    line(header),
    ...body.map(line),
    "",
    ...runs,
    ...byIds,
    ...(notes.length === 0 ? [] : ["", "notes:", ...notes])
  ].join("\n")
}

const runOnce = Effect.fn("reconcile")(function* (options?: {
  readonly connection?: string | undefined
  readonly render?: ((reports: ReadonlyArray<ReconcileReport>) => string) | undefined
}) {
  const config = yield* AppConfig
  const leases = yield* JobLease
  const targets =
    options?.connection === undefined
      ? config.connections
      : config.connections.filter((connection) => connection.name === options.connection)
  if (targets.length === 0) {
    return yield* new SyncError({
      job: RECONCILE_JOB,
      reason: new Usage({
        message:
          options?.connection === undefined
            ? "no CRM connection is configured (CRM_BASE_URL and CRM_TOKEN, or connections in CRM_SYNC_CONFIG)"
            : `no CRM connection named ${options.connection} is configured`
      })
    })
  }
  const reports: Array<ReconcileReport> = []
  const errors: Array<SyncError> = []
  for (const connection of targets) {
    const client = yield* CrmClient.make(connection.name).pipe(Effect.orDie)
    const outcome = yield* leases
      .run(
        reconcileLease(connection.name),
        runJob(client, (report) => Effect.sync(() => reports.push(report))),
        {
          onWait: Effect.logWarning(
            `reconcile ${connection.name}: another process is reconciling this connection; waiting for it to finish`
          )
        }
      )
      .pipe(Effect.result)
    if (Result.isFailure(outcome))
      errors.push(toSyncError(RECONCILE_JOB, { connection: connection.name })(outcome.failure))
  }
  if (reports.length > 0 || options?.render !== undefined) {
    yield* Console.log((options?.render ?? renderReports)(reports))
  }
  if (errors.length > 0) return yield* errors[0]!
  return reports
})

/**
 * `crm-sync reconcile`: one run for every connection (or the one named), each under its lease and
 * recorded in job_runs; prints the summary table; fails (after printing it) if a run failed.
 */
export const reconcile = (options?: {
  readonly connection?: string | undefined
  /** What is printed at the end (default: a table per connection). */
  readonly render?: ((reports: ReadonlyArray<ReconcileReport>) => string) | undefined
}): Effect.Effect<ReadonlyArray<ReconcileReport>, SyncError, ReconcileRequirements> =>
  runOnce(options).pipe(
    Effect.mapError(toSyncError(RECONCILE_JOB, {})),
    Effect.provide(Reconciler.layer),
    Effect.provide(SyncServicesLive)
  )

/** What `reconcile` needs from the program: config, database, warehouse, and the CRM client's services. */
export type ReconcileRequirements = AppConfig | SqlClient | Warehouse | RateBudget | Credentials | HttpClient.HttpClient

// ---------------------------------------------------------------------------------------------
// The daemon's schedule
// ---------------------------------------------------------------------------------------------

/**
 * `schedules.reconcile: "off"`: the daemon never reconciles; a scheduler outside it runs
 * `crm-sync reconcile` (ops/kubernetes: the CronJob). Never both: they would share the window's
 * reconcile allowance, and the lease makes the second wait for the first.
 */
export const RECONCILE_OFF = "off"

/** `schedules.reconcile`, a cron expression read in UTC (5 fields, or 6 with seconds). */
export const parseSchedule = (expression: string) =>
  Result.match(Cron.parse(expression, "UTC"), {
    onSuccess: Effect.succeed,
    onFailure: (error) =>
      Effect.fail(new ConfigInvalid({ key: "schedules.reconcile", message: `not a cron expression: ${error.message}` }))
  })

/** Runs of the job that count as this occurrence's: another replica may have run it already. */
const ranSince = (connection: string, since: Date) =>
  Effect.map(lastStarted(connection), (at) => at !== null && at >= since.getTime())

/** When this connection's reconciliation last started, if it ever ran (on any replica). */
const lastStarted = (connection: string) =>
  Effect.flatMap(JobRuns, (jobRuns) => jobRuns.lastStarted(RECONCILE_JOB, connection))

/**
 * Replicas wake at the same occurrence: the first takes the lease, the others find its run. Half a
 * period of slack (at most 5 minutes) covers clocks a little apart without swallowing the next
 * occurrence.
 */
const slackBefore = (cron: Cron.Cron, at: Date) =>
  new Date(
    at.getTime() - Math.min(Duration.toMillis(Duration.minutes(5)), (Cron.next(cron, at).getTime() - at.getTime()) / 2)
  )

/** The loop of one connection: sleep until the next occurrence, run under the lease; never fails. */
const scheduleLoop = (client: CrmClientShape, cron: Cron.Cron) =>
  Effect.gen(function* () {
    const leases = yield* JobLease
    const connection = client.connection.name
    /** The run of the occurrence at `at`, unless a replica ran it already. */
    const occurrence = (at: Date) =>
      leases
        .tryRun(
          reconcileLease(connection),
          Effect.flatMap(ranSince(connection, slackBefore(cron, at)), (ran) =>
            ran ? Effect.void : Effect.asVoid(runJob(client, () => Effect.void))
          )
        )
        .pipe(
          Effect.catchCause((cause) =>
            Cause.hasInterruptsOnly(cause)
              ? Effect.failCause(cause)
              : Effect.logWarning("reconcile failed; it runs again at the next occurrence", cause)
          )
        )

    // An occurrence missed while no daemon ran (a restart across 03:00) runs now, once. Only when
    // the reconciliation has run before: a first start waits for the schedule, the backfill and the
    // crawls having the first day's budget.
    const started = yield* Clock.currentTimeMillis
    const missed = Cron.prev(cron, started)
    const last = yield* lastStarted(connection).pipe(Effect.orElseSucceed(() => null))
    if (last !== null && last < slackBefore(cron, missed).getTime()) {
      yield* Effect.logInfo("reconcile: running the occurrence missed while stopped").pipe(
        Effect.annotateLogs({ missed: missed.toISOString() })
      )
      yield* occurrence(missed)
    }

    while (true) {
      const now = yield* Clock.currentTimeMillis
      const at = Cron.next(cron, now)
      yield* Effect.sleep(Duration.millis(Math.max(0, at.getTime() - now)))
      yield* occurrence(at)
    }
  }).pipe(Effect.annotateLogs({ job: RECONCILE_JOB, connection: client.connection.name }))

/** The reconciliation of every connection on `schedules.reconcile` (default `0 3 * * *`, 03:00 UTC). */
export const ReconcileSchedulerLive = Layer.effectDiscard(
  Effect.gen(function* () {
    const config = yield* AppConfig
    if (config.schedules.reconcile === RECONCILE_OFF) {
      yield* Effect.logInfo(
        "reconcile: the daemon's schedule is off (schedules.reconcile = off); run `crm-sync reconcile` from a scheduler"
      )
      return
    }
    const cron = yield* parseSchedule(config.schedules.reconcile)
    for (const connection of config.connections) {
      const client = yield* CrmClient.make(connection.name).pipe(Effect.orDie)
      yield* Effect.logInfo("reconcile scheduled").pipe(
        Effect.annotateLogs({ connection: connection.name, cron: config.schedules.reconcile })
      )
      yield* Effect.forkScoped(scheduleLoop(client, cron))
    }
  })
).pipe(Layer.provide(Reconciler.layer), Layer.provide(SyncServicesLive))
