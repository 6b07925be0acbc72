/**
 * Reconciler: `crm-sync reconcile` and the daemon's nightly reconciliation (ReconcileSchedule.ts).
 * For one connection it re-reads by id the tasks, meetings and notes the warehouse knows
 * (ByIdReconcile.ts), then reads the listings of businesses, annuity contracts and financial
 * accounts and compares every page with the warehouse, repairing what is missing or stale on the
 * spot; what a clean read no longer lists is deleted once a second look misses it too. A run spends
 * at most its allowance of the budget, resumes where a partial one stopped, and writes one
 * `crm_sync.reconciliation_reports` row (ReconcileReport.ts) however it ends.
 */
import * as Console from "effect/Console"
import * as Context from "effect/Context"
import * as DateTime from "effect/DateTime"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql/SqlClient"
import type { HttpClient } from "effect/http"
import { AppConfig } from "../config/AppConfig.ts"
import { strictest } from "../budget/Buckets.ts"
import { type BudgetError, RateBudget } from "../budget/RateBudget.ts"
import { CrmClient, type CrmClientShape, type ListPage } from "../crm/CrmClient.ts"
import { CrmPermitSpent } from "../crm/CrmTransport.ts"
import type { Credentials } from "../crm/Credentials.ts"
import { noWrites, Warehouse } from "../warehouse/Warehouse.ts"
import { type ByIdReport, reconcileById } from "./ByIdReconcile.ts"
import { CrawlRuns, shortReadSlack } from "./CrawlRuns.ts"
import { type AbsenceDeps, countAbsences, type WholeRead } from "./ReconcileAbsences.ts"
import { Cursors } from "./Cursors.ts"
import { JobLease } from "./JobLease.ts"
import { type JobOutcome, JobRuns } from "./JobRuns.ts"
import { idOf, listPage } from "./PageFetcher.ts"
import {
  emptyResourceReport,
  type Position,
  type ReconcileReport,
  type ReconcileResource,
  ReconcileResources,
  renderReports,
  type ReportError,
  type ResourceReport,
  statusOf,
  type Stopped,
  withNamed
} from "./ReconcileReport.ts"
import { Crm, Database, type JobFailure, SyncError, toSyncError, Usage } from "./SyncError.ts"
import { SyncServicesLive } from "./SyncJobs.ts"
import { updatedAtOf } from "./UpdatedAt.ts"

/** The job name in `crm_sync.job_runs`. */
export const RECONCILE_JOB = "reconcile"

/** One reconciliation per connection at a time, on any process. */
export const reconcileLease = (connection: string) => `reconcile:${connection}`

/** The `crm_sync.cursors` row (per connection) holding where the next run resumes. */
const POSITION = "reconcile"

const PositionState = Schema.Struct({
  resource: Schema.Literals(ReconcileResources),
  page: Schema.Int.check(Schema.isGreaterThan(0))
})
const GoneRows = Schema.Array(Schema.Struct({ ids: Schema.NullOr(Schema.Array(Schema.String)) }))
const CountRows = Schema.Array(Schema.Struct({ n: Schema.Number }))
const NowRows = Schema.Array(Schema.Struct({ at: Schema.Date }))

/** What a reconciliation works with: the layer's services and settings. */
interface Deps extends AbsenceDeps {
  readonly budget: RateBudget["Service"]
  readonly cursors: Cursors["Service"]
  /** `budget.reconcile_share`. */
  readonly share: number
}

/** One run as it goes: what it may spend and has spent, where the next run begins, what it found. */
interface Run {
  readonly id: number
  readonly client: CrmClientShape
  readonly connection: string
  readonly allowance: number
  readonly budget: ReconcileReport["budget"]
  readonly resumedFrom: Position | null
  requests: number
  next: Position | null
  readonly resources: Partial<Record<ReconcileResource, ResourceReport>>
  byId: ByIdReport | null
}

/**
 * Every permit the effect takes counts as the run's, retries included, as soon as it is taken: a
 * request that fails has still been spent.
 */
const counted = (run: Run) =>
  Effect.provideService(CrmPermitSpent, () => {
    run.requests++
  })

const readPosition = (deps: Deps, connection: string) =>
  deps.cursors.state(connection, POSITION).pipe(
    // A position that does not decode (hand-edited, an older shape) means: start over.
    Effect.map((state) => Option.getOrUndefined(Schema.decodeUnknownOption(PositionState)(state)))
  )

const savePosition = (deps: Deps, connection: string, position: Position | null) =>
  deps.cursors.saveState(connection, POSITION, position ?? {})

/**
 * The run's allowance: `budget.reconcile_share` of the strictest bucket's window (spec §8), less
 * what earlier reconciliations of the connection spent in the current window (RateBudget.status
 * says when it began). Every request is `bulk` and takes its permit from the shared budget as
 * usual; the allowance only caps how many a run sends.
 */
const allowanceFor = (deps: Deps, client: CrmClientShape) =>
  Effect.gen(function* () {
    const bucket = strictest(client.buckets)
    const [status] = yield* deps.budget.status([bucket])
    const windowStart = status?.windowStart
    // Runs that ended inside the current window count whole: over-counting errs on the safe side.
    const spent =
      windowStart === undefined
        ? 0
        : ((yield* deps.sql`
            SELECT COALESCE(sum(requests), 0)::int AS n FROM crm_sync.reconciliation_reports
            WHERE connection = ${client.connection.name}
              AND COALESCE(finished_at, now()) >= ${DateTime.toDate(windowStart)}`.pipe(
            Effect.flatMap(Schema.decodeUnknownEffect(CountRows))
          ))[0]?.n ?? 0)
    const perWindow = Math.floor(deps.share * bucket.limit)
    return {
      allowance: Math.max(0, perWindow - spent),
      budget: {
        bucket: bucket.key,
        limit: bucket.limit,
        window_seconds: bucket.windowMs / 1000,
        share: deps.share,
        used_at_start: status?.used ?? 0,
        spent_earlier: spent
      }
    }
  })

/**
 * Compares one page with the warehouse and repairs it, in one transaction that also saves `next`:
 * records the warehouse lacks (or holds as deleted) are missing, records whose stored
 * `updated_at` is older than the API's are stale, and both are upserted as read (`source =
 * reconcile`, the warehouse's forward-only write) and undeleted.
 */
const applyPage = (
  deps: Deps,
  connection: string,
  resource: ReconcileResource,
  page: ListPage<unknown>,
  next: Position | null
) =>
  deps.sql
    .withTransaction(
      Effect.gen(function* () {
        const byId = new Map<string, unknown>()
        for (const raw of page.data) {
          const id = idOf(raw)
          if (id !== undefined) byId.set(id, raw)
        }
        const ids = [...byId.keys()]
        const states = yield* deps.warehouse.compareListed(
          resource,
          ids.map((id) => ({ id, updatedAt: updatedAtOf(byId.get(id))?.iso ?? null }))
        )
        const differing = states.filter((row) => row.state !== "current")
        const deletedIds = states.filter((row) => row.state === "deleted").map((row) => row.id)
        const counts =
          differing.length === 0
            ? noWrites
            : yield* deps.warehouse.upsert(
                resource,
                differing.map((row) => byId.get(row.id)),
                { source: "reconcile" }
              )
        // Listed by the API, so it exists (spec §1: the v1 API has no DELETE; deletion here
        // was by absence, which this listing contradicts).
        const undeleted = yield* deps.warehouse.undelete(resource, deletedIds, { source: "reconcile" })
        yield* savePosition(deps, connection, next)
        return {
          ids,
          missing: states.filter((row) => row.state === "absent").length + deletedIds.length,
          stale: states.filter((row) => row.state === "stale").length,
          repaired: counts.inserted + counts.updated,
          repairedIds: differing.map((row) => row.id),
          rejected: counts.rejected,
          undeleted
        }
      })
    )
    .pipe(Effect.uninterruptible)

/** A resource's report with one more page compared. */
const withPage = (
  report: ResourceReport,
  applied: Effect.Success<ReturnType<typeof applyPage>>,
  pageNumber: number,
  pagination: ListPage<unknown>["pagination"]
): ResourceReport => ({
  ...report,
  api_total: pagination.total_count,
  missing: report.missing + applied.missing,
  stale: report.stale + applied.stale,
  repaired: report.repaired + applied.repaired,
  repaired_ids: withNamed(report.repaired_ids, applied.repairedIds),
  undeleted: report.undeleted + applied.undeleted,
  rejected: report.rejected + applied.rejected,
  pages_read: report.pages_read + 1,
  last_page: pageNumber,
  total_pages: pagination.total_pages
})

/** The ids the previous clean pass of the resource found gone. */
const previouslyGone = (deps: Deps, run: Run, resource: ReconcileResource) =>
  deps.sql`
    SELECT report -> 'resources' -> ${resource}::text -> 'gone_ids' AS ids
    FROM crm_sync.reconciliation_reports
    WHERE connection = ${run.connection} AND id < ${run.id}
      AND report -> 'resources' -> ${resource}::text ->> 'clean' = 'true'
    ORDER BY id DESC LIMIT 1`.pipe(
    Effect.flatMap(Schema.decodeUnknownEffect(GoneRows)),
    Effect.map((rows) => new Set(rows[0]?.ids ?? []))
  )

/**
 * A second whole read of a listing within the run, ids only (nothing is written): clean when
 * every page gave the same `total_count`. The caller checked the allowance can pay for it.
 */
const confirmRead = (run: Run, resource: ReconcileResource) =>
  Effect.gen(function* () {
    const seen = new Set<string>()
    let total: number | undefined
    let clean = true
    let pages = 0
    for (let pageNumber = 1; ; pageNumber++) {
      const page = yield* listPage(run.client, resource, pageNumber).pipe(counted(run))
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

/**
 * Reads one resource's listing (spec §4: `page` and `per_page` only, at `per_page=100`) from
 * `firstPage` until its end, or until the allowance is spent (undefined: the run stops there, its
 * report `partial`, and the position saved with each page lets the next run go on from the page
 * after the last one read). The allowance can be overrun only by the retries of its last page.
 * Why not the PageCrawler: a crawl stores every record and notes every id it sees
 * (`crawl_sightings`), over as many windows as it takes; a reconciliation must fit a fixed request
 * allowance, write only what differs, and report what it found, so it reads pages itself.
 */
const readListing = (
  deps: Deps,
  run: Run,
  resource: ReconcileResource,
  firstPage: number,
  after: ReconcileResource | undefined
) =>
  Effect.gen(function* () {
    const [started] = yield* deps.sql`SELECT clock_timestamp() AS at`.pipe(
      Effect.flatMap(Schema.decodeUnknownEffect(NowRows))
    )
    const live = yield* deps.warehouse.count(resource)
    const seen = new Set<string>()
    let report = emptyResourceReport(live, firstPage)
    let previousTotal: number | undefined
    let drifted = false
    for (let pageNumber = firstPage; ; pageNumber++) {
      if (run.requests >= run.allowance) {
        run.resources[resource] = report
        return undefined
      }
      const page = yield* listPage(run.client, resource, pageNumber).pipe(counted(run))
      const total = page.pagination.total_count
      if (previousTotal !== undefined && total !== previousTotal) drifted = true
      previousTotal = total
      const last = page.data.length === 0 || pageNumber >= page.pagination.total_pages
      run.next = !last ? { resource, page: pageNumber + 1 } : after === undefined ? null : { resource: after, page: 1 }
      const applied = yield* applyPage(deps, run.connection, resource, page, run.next)
      for (const id of applied.ids) seen.add(id)
      report = withPage(report, applied, pageNumber, page.pagination)
      run.resources[resource] = report
      if (last) break
    }
    return { report: { ...report, complete: true }, seen, drifted, startedAt: started!.at, live } satisfies WholeRead
  })

/** Reads, repairs and counts the absences of one resource; false when the allowance ran out first. */
const checkResource = (
  deps: Deps,
  run: Run,
  resource: ReconcileResource,
  firstPage: number,
  after: ReconcileResource | undefined
) =>
  Effect.gen(function* () {
    const read = yield* readListing(deps, run, resource, firstPage, after)
    if (read === undefined) return false
    run.resources[resource] = yield* countAbsences(deps, run.connection, resource, read, {
      missedBefore: previouslyGone(deps, run, resource),
      requestsLeft: Math.max(0, run.allowance - run.requests),
      readAgain: confirmRead(run, resource)
    })
    return true
  })

/** The by-id part, then every listing from where the run resumed; why the pass stopped. */
const pass = (deps: Deps, run: Run) =>
  Effect.gen(function* () {
    // Known ids of the resources with no listing first, with at most half the allowance: the
    // listings take what it leaves.
    run.byId = yield* reconcileById(run.client, Math.floor(run.allowance / 2)).pipe(
      Effect.provideService(SqlClient, deps.sql),
      Effect.provideService(Warehouse, deps.warehouse),
      counted(run)
    )
    const resumed = run.resumedFrom
    const start = resumed === null ? 0 : ReconcileResources.indexOf(resumed.resource)
    for (let index = start; index < ReconcileResources.length; index++) {
      const resource = ReconcileResources[index]!
      const firstPage = index === start && resumed !== null ? resumed.page : 1
      const ended = yield* checkResource(deps, run, resource, firstPage, ReconcileResources[index + 1])
      if (!ended) return "allowance" as const
    }
    return "finished" as const
  })

/** The run's report as it stands. */
const reportOf = (run: Run, stopped: Stopped, error: ReportError | null): ReconcileReport => ({
  id: run.id,
  connection: run.connection,
  status: statusOf(stopped),
  stopped,
  allowance: run.allowance,
  requests: run.requests,
  budget: run.budget,
  resumed_from: run.resumedFrom,
  next: run.next,
  resources: { ...run.resources },
  by_id: run.byId,
  error
})

/** We hold the lease: a report still `running` belongs to a process that died mid-run. */
const closeAbandoned = (deps: Deps, connection: string) => deps.sql`
  UPDATE crm_sync.reconciliation_reports
  SET status = 'failed', finished_at = now(),
      report = report || '{"error": "the process ended before the run did"}'::jsonb
  WHERE connection = ${connection} AND status = 'running'`

/** Opens the run's report row (`running`); its id is the run's. */
const openReport = (deps: Deps, connection: string, opening: Record<string, unknown>) =>
  Effect.map(
    deps.sql<{ id: number }>`
      INSERT INTO crm_sync.reconciliation_reports (connection, report)
      VALUES (${connection}, ${JSON.stringify(opening)}::jsonb)
      RETURNING id::int AS id`,
    (rows) => rows[0]!.id
  )

const closeReport = (deps: Deps, final: ReconcileReport) => deps.sql`
  UPDATE crm_sync.reconciliation_reports
  SET status = ${final.status}, finished_at = now(), requests = ${final.requests},
      report = ${JSON.stringify(final)}::jsonb
  WHERE id = ${final.id}`

/** A failure as the job's error; the budget's (its windows are rows in the database) is the database's. */
const failureFor =
  (connection: string) =>
  (error: JobFailure | BudgetError): SyncError =>
    error._tag === "BudgetError"
      ? new SyncError({ job: RECONCILE_JOB, connection, reason: new Database({ message: error.message }) })
      : toSyncError(RECONCILE_JOB, { connection })(error)

/**
 * One run: its report row is opened `running` and closed `complete`, `partial` or `failed` with a
 * report per resource, however the run ends (an interruption closes it `partial`).
 */
const reconcileRun = (deps: Deps) =>
  Effect.fn("Reconciler.reconcile")(function* (client: CrmClientShape) {
    const connection = client.connection.name
    const fail = failureFor(connection)
    yield* Effect.annotateCurrentSpan({ connection })
    yield* closeAbandoned(deps, connection).pipe(Effect.mapError(fail))
    const { allowance, budget } = yield* allowanceFor(deps, client).pipe(Effect.mapError(fail))
    const resumedFrom = (yield* readPosition(deps, connection).pipe(Effect.mapError(fail))) ?? null
    const id = yield* openReport(deps, connection, { allowance, budget, resumed_from: resumedFrom }).pipe(
      Effect.mapError(fail)
    )
    const run: Run = {
      id,
      client,
      connection,
      allowance,
      budget,
      resumedFrom,
      requests: 0,
      next: resumedFrom,
      resources: {},
      byId: null
    }
    const outcome = yield* pass(deps, run).pipe(
      Effect.map((stopped) => ({ stopped, error: null as ReportError | null })),
      Effect.catch((error) => {
        const { reason } = fail(error)
        return Effect.succeed({
          stopped: "error" as Stopped,
          error: { kind: reason._tag, message: reason.message, retryable: reason.retryable }
        })
      }),
      Effect.onInterrupt(() => Effect.ignore(closeReport(deps, reportOf(run, "interrupted", null))))
    )
    const final = reportOf(run, outcome.stopped, outcome.error)
    yield* closeReport(deps, final).pipe(Effect.mapError(fail))
    yield* Effect.logInfo("reconcile: run ended").pipe(
      Effect.annotateLogs({
        connection,
        status: final.status,
        requests: run.requests,
        allowance,
        error: final.error?.message ?? ""
      })
    )
    return final
  })

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
      const config = yield* AppConfig
      const deps: Deps = {
        sql: yield* SqlClient,
        warehouse: yield* Warehouse,
        budget: yield* RateBudget,
        cursors: yield* Cursors,
        crawlRuns: yield* CrawlRuns,
        threshold: config.sync.deletion_threshold,
        share: config.budget.reconcile_share
      }
      return Reconciler.of({ reconcile: reconcileRun(deps) })
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
export const runJob = (client: CrmClientShape, onReport: (report: ReconcileReport) => Effect.Effect<void>) =>
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
