/**
 * `crm-sync backfill [--resource R]`: reads every readable resource from scratch, for every
 * configured connection — the reference data, every business, annuity contract and financial
 * account — at the `bulk` priority, one resource after another. Resumable after a crash (kill -9
 * included): the resources an unfinished backfill completed are not read again, the crawl it was in
 * goes on after its last stored page, and records never duplicate (the warehouse upserts by id). A
 * resource that fails does not stop the others; the backfill then fails, after the summary table.
 * Stopped by a signal, it prints the table of what it did (the resource it was in `interrupted`,
 * with the page where the next backfill goes on) and one line saying how to resume.
 */
import * as Clock from "effect/Clock"
import * as Console from "effect/Console"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Logger from "effect/Logger"
import type { SqlClient } from "effect/sql/SqlClient"
import type { HttpClient } from "effect/http"
import { AppConfig } from "../config/AppConfig.ts"
import { strictest } from "../budget/Buckets.ts"
import type { BucketSpec } from "../budget/Windows.ts"
import { formatDuration } from "../observability/Text.ts"
import { RateBudget } from "../budget/RateBudget.ts"
import { CrmClient, type CrmClientShape } from "../crm/CrmClient.ts"
import type { Credentials } from "../crm/Credentials.ts"
import type { Warehouse } from "../warehouse/Warehouse.ts"
import {
  detectProgressMode,
  estimateMs,
  etaText,
  makeProgressDisplay,
  type ProgressDisplay,
  type ProgressState,
  type ProgressMode
} from "./BackfillProgress.ts"
import {
  type BackfillResource,
  BackfillResourceNames,
  BackfillResources,
  parseBackfillResource
} from "./BackfillResources.ts"
import { type BackfillRow, type BackfillSummary, doneCount, emptyRow, renderSummary } from "./BackfillSummary.ts"
import { BUSINESSES } from "./BusinessPoller.ts"
import { Cursors } from "./Cursors.ts"
import { businessCrawlLease, JobLease, type LeaseError, resourceLease } from "./JobLease.ts"
import { type JobOutcome, JobRuns } from "./JobRuns.ts"
import { openRunPosition } from "./CrawlRuns.ts"
import { crawlCounts, type CrawlResource, PageCrawler } from "./PageCrawler.ts"
import { ReferenceSync } from "./ReferenceSync.ts"
import { SyncError, toSyncError, Usage } from "./SyncError.ts"
import { JobNames, SyncServicesLive } from "./SyncJobs.ts"

export interface BackfillOptions {
  /** One resource only (see `BackfillResources`; `books`, `users`, `teams`, `project_templates` mean `reference`). */
  readonly resource?: string | undefined
  /** `auto` (default): bars on a terminal, log lines otherwise. */
  readonly progress?: ProgressMode | "auto" | undefined
  /** What is printed at the end (default: the summary table); `failed` when a resource failed. */
  readonly render?: ((summary: BackfillSummary, failed: boolean) => string) | undefined
}

/** How often the budget is asked for a fresh ETA (it is a query). */
const ETA_REFRESH_MS = 5_000

/**
 * Keeps the ETA of one resource, asking the budget at most every few seconds: the time the
 * budget's windows need for the requests still to come (RateBudget.timeUntil), or the pace
 * observed so far if that is slower.
 */
const makeEta = (client: CrmClientShape) =>
  Effect.gen(function* () {
    const budget = yield* RateBudget
    const limit = strictest(client.buckets)
    let cached: { readonly at: number; readonly remaining: number; readonly ms: number } | undefined
    return (remaining: number, requestsSoFar: number, elapsedMs: number) =>
      Effect.gen(function* () {
        if (remaining <= 0) return undefined
        const now = yield* Clock.currentTimeMillis
        if (cached === undefined || now - cached.at >= ETA_REFRESH_MS || remaining > cached.remaining) {
          const wait = yield* budget.timeUntil(client.buckets, remaining, "bulk").pipe(
            Effect.map(Duration.toMillis),
            Effect.orElseSucceed(() => 0)
          )
          cached = { at: now, remaining, ms: wait }
        }
        return etaText(estimateMs(remaining, cached.ms, requestsSoFar, elapsedMs), limit.limit, limit.windowMs)
      })
  })

/** How often a resource's line checks whether its requests are waiting on the budget. */
const WAIT_CHECK_MS = 5_000
/** A wait for the next permit shorter than this is pace, not a wait worth a line. */
const WAIT_WORTH_SHOWING_MS = 2_000

const scopeWords: Record<BucketSpec["scope"], string> = { token: "token", company: "company (app)", ip: "egress IP" }

/**
 * The longest any one of the buckets makes the next request wait (a 429's block, a used-up
 * window, the bulk reserve), when it is long enough to show: "waiting 58 min for the token window".
 */
const waitText = (buckets: ReadonlyArray<BucketSpec>) =>
  Effect.gen(function* () {
    const budget = yield* RateBudget
    let longest: { readonly ms: number; readonly bucket: BucketSpec } | undefined
    for (const bucket of buckets) {
      const ms = yield* budget.timeUntil([bucket], 1, "bulk").pipe(
        Effect.map(Duration.toMillis),
        Effect.orElseSucceed(() => 0)
      )
      if (longest === undefined || ms > longest.ms) longest = { ms, bucket }
    }
    return longest === undefined || longest.ms < WAIT_WORTH_SHOWING_MS
      ? undefined
      : `waiting ${formatDuration(longest.ms)} for the ${scopeWords[longest.bucket.scope]} window (${longest.bucket.key})`
  })

/** Records per second. */
const rate = (records: number, ms: number) => (records * 1000) / ms

/** One resource's line on the display, and what its pace and ETA are measured from. */
interface Tracker {
  readonly key: string
  readonly display: ProgressDisplay
  /** Milliseconds since the resource began (at least 1). */
  readonly elapsed: Effect.Effect<number>
  readonly eta: Effect.Success<ReturnType<typeof makeEta>>
  readonly connection: string
  readonly resource: BackfillResource
  readonly startedAt: number
  /** Where it stood at its last update (for a wait's line and an interruption's row). */
  last: ShownAt | undefined
}

interface ShownAt {
  readonly pages: number
  readonly totalPages: number | undefined
  readonly records: number
  readonly fresh: number
  readonly remaining: number
  readonly requests: number
}

/** Shows where a resource stands: `fresh` records read by this invocation set the pace. */
const show = (tracker: Tracker, at: ShownAt) =>
  Effect.gen(function* () {
    tracker.last = at
    yield* tracker.display.update(tracker.key, yield* stateAt(tracker, at))
  })

const stateAt = (tracker: Tracker, at: ShownAt) =>
  Effect.gen(function* () {
    const ms = yield* tracker.elapsed
    return {
      pages: at.pages,
      totalPages: at.totalPages,
      records: at.records,
      recordsPerSecond: rate(at.fresh, ms),
      eta: yield* tracker.eta(at.remaining, at.requests, ms)
    } satisfies ProgressState
  })

/**
 * While the resource runs, its line says so when its requests wait on the budget: the last update
 * came before the wait began, and its ETA (the pace of the pages before) would otherwise stand
 * for the whole wait.
 */
const watchWaits = (client: CrmClientShape, tracker: Tracker) =>
  Effect.gen(function* () {
    while (true) {
      yield* Effect.sleep(Duration.millis(WAIT_CHECK_MS))
      const waiting = yield* waitText(client.buckets)
      if (waiting === undefined) continue
      const at = tracker.last ?? { pages: 0, totalPages: undefined, records: 0, fresh: 0, remaining: 1, requests: 0 }
      const state = yield* stateAt(tracker, at)
      yield* tracker.display.update(tracker.key, {
        ...state,
        status: state.eta === undefined ? waiting : `${waiting} · ${state.eta}`
      })
    }
  })

/** A line with a word instead of figures. */
const showStatus = (tracker: Tracker, status: string) =>
  tracker.display.update(tracker.key, {
    pages: 0,
    totalPages: undefined,
    records: 0,
    recordsPerSecond: 0,
    eta: undefined,
    status
  })

/**
 * A crawl of the whole listing. Businesses are read without `updated_since`, and a complete crawl
 * also leaves the poll cursor at the crawl's start (as good as a poll from there: see
 * BusinessPoller); it waits for the daemon's business crawl, if one runs (JobLease).
 */
const crawlStep = (client: CrmClientShape, resource: CrawlResource, tracker: Tracker) =>
  Effect.gen(function* () {
    const connection = client.connection.name
    const leases = yield* JobLease
    const crawler = yield* PageCrawler
    const cursors = yield* Cursors
    const exclusive = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
      resource === BUSINESSES ? leases.run(businessCrawlLease(connection), effect) : effect
    const summary = yield* exclusive(
      crawler.crawl(client, resource, {
        source: "backfill",
        onProgress: (progress) =>
          show(tracker, {
            pages: progress.page,
            totalPages: progress.totalPages,
            records: progress.seen,
            fresh: progress.seen - progress.startSeen,
            remaining: Math.max(0, progress.totalPages - progress.page),
            requests: progress.requests - progress.startRequests
          }),
        ...(resource === BUSINESSES
          ? {
              onComplete: (run) => cursors.advance(connection, BUSINESSES, run.startedAt, { backfill_run: run.id })
            }
          : {})
      })
    )
    return {
      ...emptyRow(connection, resource),
      ...crawlCounts(summary),
      deleted: summary.deleted,
      resumedFrom: summary.resumed ? summary.startPage : undefined,
      note: summary.note ?? undefined
    }
  })

/** The reference data: me, the books with their users and teams, the project templates. */
const referenceStep = (client: CrmClientShape, resource: BackfillResource, tracker: Tracker) =>
  Effect.gen(function* () {
    const reference = yield* ReferenceSync
    const summary = yield* reference.refresh(client, {
      source: "backfill",
      onProgress: (progress) => {
        // At least one page per book is still to come; that is all that is known in advance.
        const remaining = Math.max(0, progress.books - progress.booksDone)
        return show(tracker, {
          pages: progress.requests,
          totalPages: progress.step === "project_templates" ? progress.requests + remaining : undefined,
          records: progress.records,
          fresh: progress.records,
          remaining,
          requests: progress.requests
        })
      }
    })
    return {
      ...emptyRow(client.connection.name, resource),
      pages: summary.requests,
      requests: summary.requests,
      // Every record written (me, books, their users and teams, templates), as the counts are.
      records: summary.inserted + summary.updated + summary.unchanged + summary.rejected,
      inserted: summary.inserted,
      updated: summary.updated,
      unchanged: summary.unchanged,
      rejected: summary.rejected
    }
  })

/** What a resource's step reports (its status and time are the caller's). */
type StepRow = Omit<BackfillRow, "status" | "seconds">

const step = (
  client: CrmClientShape,
  resource: BackfillResource,
  tracker: Tracker
): Effect.Effect<StepRow, SyncError | LeaseError, ReferenceSync | PageCrawler | Cursors | JobLease> =>
  resource === "reference" ? referenceStep(client, resource, tracker) : crawlStep(client, resource, tracker)

/**
 * One resource of one connection, recorded in job_runs; never fails (the row says). Safe beside a
 * running daemon: every request takes its permit from the shared budget, and the resource is taken
 * under the same lease as the daemon's job for it, so a backfill waits for a crawl in progress
 * instead of doubling it.
 */
const backfillResource = (
  client: CrmClientShape,
  resource: BackfillResource,
  display: ProgressDisplay,
  progress: SessionProgress
) =>
  Effect.gen(function* () {
    const connection = client.connection.name
    const leases = yield* JobLease
    const jobRuns = yield* JobRuns
    const key = `${connection}/${resource}`
    const startedAt = yield* Clock.currentTimeMillis
    const tracker: Tracker = {
      key,
      display,
      elapsed: Effect.map(Clock.currentTimeMillis, (now) => Math.max(1, now - startedAt)),
      eta: yield* makeEta(client),
      connection,
      resource,
      startedAt,
      last: undefined
    }
    progress.current = tracker
    const work = step(client, resource, tracker)
    yield* display.start(key, `${connection === "default" ? "" : `${connection} `}${resource}`)
    const watcher = yield* Effect.forkChild(watchWaits(client, tracker))
    const outcome = yield* leases
      .run(
        resourceLease(connection, resource),
        jobRuns.record(
          JobNames.backfill(resource),
          connection,
          Effect.map(work, (row) => ({ ...row, detail: { ...row }, requests: row.requests }) satisfies JobOutcome)
        ),
        {
          onWait: Effect.andThen(
            showStatus(tracker, "waiting: another process (the daemon?) is syncing it"),
            display.message(`${key}: waiting for another process that is syncing it to finish`)
          )
        }
      )
      .pipe(Effect.result)
    yield* Fiber.interrupt(watcher)
    progress.current = undefined
    const seconds = ((yield* Clock.currentTimeMillis) - startedAt) / 1000
    if (outcome._tag === "Failure") {
      const message = outcome.failure.message
      yield* showStatus(tracker, "failed")
      yield* display.message(`${key} failed: ${message}`)
      const row: BackfillRow = { ...emptyRow(connection, resource), status: "failed", seconds, note: message }
      return { row, error: toSyncError("backfill", { connection, resource })(outcome.failure) }
    }
    const { detail: _detail, ...row } = outcome.success
    yield* display.update(key, {
      pages: row.pages,
      totalPages: row.pages,
      records: row.records,
      recordsPerSecond: rate(row.records, seconds * 1000),
      eta: undefined,
      status: "done"
    })
    return { row: { ...row, status: "done", seconds } satisfies BackfillRow, error: undefined }
  })

/**
 * The resources an unfinished backfill of the same selection already completed, as
 * `connection/resource`: a backfill killed part way is resumed, not started over (job_runs), and
 * the crawl it was in resumes after its last stored page (crawl_runs). JobRuns.backfilledSince
 * has the rule.
 */
const finishedEarlier = (resources: ReadonlyArray<BackfillResource>) =>
  Effect.flatMap(JobRuns, (jobRuns) => jobRuns.backfilledSince(resources))

const usage = (message: string) => new SyncError({ job: "backfill", reason: new Usage({ message }) })

/** The resources `--resource` selects (all by default); a usage error without a connection. */
const selection = Effect.fnUntraced(function* (options: BackfillOptions | undefined) {
  const config = yield* AppConfig
  let resources: ReadonlyArray<BackfillResource> = BackfillResources
  if (options?.resource !== undefined) {
    const parsed = parseBackfillResource(options.resource)
    if (parsed === undefined) {
      return yield* usage(`unknown resource ${options.resource}; expected one of ${BackfillResourceNames.join(", ")}`)
    }
    resources = [parsed]
  }
  if (config.connections.length === 0) {
    return yield* usage(
      "no CRM connection is configured (CRM_BASE_URL and CRM_TOKEN, or connections in CRM_SYNC_CONFIG)"
    )
  }
  return resources
})

/** What a backfill has done so far: the rows of the resources it finished, and the one it is in. */
interface SessionProgress {
  readonly startedAt: number
  readonly rows: Array<BackfillRow>
  current: Tracker | undefined
}

/** The row of the resource a signal stopped, and where the next backfill takes it up. */
const interruptedRow = (
  tracker: Tracker,
  now: number,
  stored: Effect.Success<ReturnType<typeof openRunPosition>>
): BackfillRow => {
  const at = tracker.last
  // The crawl's own record is the truth (its writers may have stored pages after the last
  // update); its counters are the crawl's so far, which the next backfill goes on with (the
  // requests are this backfill's, as in the other rows).
  const pages = stored?.lastPage ?? at?.pages ?? 0
  const totalPages = stored?.totalPages ?? at?.totalPages
  return {
    ...emptyRow(tracker.connection, tracker.resource),
    status: "interrupted",
    pages,
    requests: at?.requests ?? 0,
    records: stored?.seen ?? at?.records ?? 0,
    inserted: stored?.inserted ?? 0,
    updated: stored?.updated ?? 0,
    unchanged: stored?.unchanged ?? 0,
    seconds: (now - tracker.startedAt) / 1000,
    note:
      tracker.resource === "reference"
        ? "stopped part way: the next backfill reads it again"
        : pages === 0
          ? "stopped before its first page: the next backfill reads it"
          : `stopped after page ${pages}${totalPages === undefined ? "" : ` of ${totalPages}`}: the next backfill goes on after it`
  }
}

/**
 * Stopped by a signal: the table of what was done, then one line (stderr) saying how to resume.
 * The command's exit code is the command line's (1: an interrupted backfill is not done).
 */
const reportInterrupted = (
  progress: SessionProgress,
  total: number,
  render: (summary: BackfillSummary, failed: boolean) => string
) =>
  Effect.gen(function* () {
    const now = yield* Clock.currentTimeMillis
    const current = progress.current
    const stored =
      current === undefined || current.resource === "reference"
        ? undefined
        : yield* openRunPosition(current.connection, current.resource, "backfill").pipe(
            Effect.orElseSucceed(() => undefined)
          )
    const rows = current === undefined ? progress.rows : [...progress.rows, interruptedRow(current, now, stored)]
    if (rows.length === 0) {
      // Stopped while it waited for another backfill (or before its first resource).
      return yield* Console.error(
        "crm-sync: backfill interrupted before it read anything; run `crm-sync backfill` again"
      )
    }
    const summary: BackfillSummary = {
      rows,
      requests: rows.reduce((sum, row) => sum + row.requests, 0),
      seconds: (now - progress.startedAt) / 1000,
      interrupted: true
    }
    yield* Console.log(render(summary, true))
    yield* Console.error(
      `crm-sync: backfill interrupted with ${doneCount(summary)} of ${total} resources done; ` +
        "run `crm-sync backfill` again to resume (what is done is not read again)"
    )
  })

/** Every selected resource of every connection, one after another; `done` ones are not read again. */
const backfillAll = (
  display: ProgressDisplay,
  resources: ReadonlyArray<BackfillResource>,
  done: ReadonlySet<string>,
  progress: SessionProgress
) =>
  Effect.gen(function* () {
    const config = yield* AppConfig
    const rows = progress.rows
    const errors: Array<SyncError> = []
    if (done.size > 0) {
      yield* display.message(`resuming an unfinished backfill: ${[...done].join(", ")} already done, not read again`)
    }
    for (const connection of config.connections) {
      const client = yield* CrmClient.make(connection.name).pipe(Effect.orDie)
      for (const resource of resources) {
        if (done.has(`${connection.name}/${resource}`)) {
          rows.push({ ...emptyRow(connection.name, resource), status: "done earlier", seconds: 0 })
          continue
        }
        const { row, error } = yield* backfillResource(client, resource, display, progress)
        rows.push(row)
        if (error !== undefined) errors.push(error)
      }
    }
    return { rows, errors }
  })

/** The resources read with their progress on show; fails with the summary when a resource failed. */
const session = (
  mode: ProgressMode,
  resources: ReadonlyArray<BackfillResource>,
  done: ReadonlySet<string>,
  progress: SessionProgress
) =>
  Effect.scoped(
    Effect.gen(function* () {
      const startedAt = progress.startedAt
      const display = yield* makeProgressDisplay(mode)
      const all = backfillAll(display, resources, done, progress)
      // While bars are drawn, log lines (a crawl's "complete", a retry's warning) go above them.
      const { rows, errors } = yield* display.logger === undefined
        ? all
        : Effect.provideService(all, Logger.CurrentLoggers, new Set([display.logger]))
      const summary: BackfillSummary = {
        rows,
        requests: rows.reduce((sum, row) => sum + row.requests, 0),
        seconds: ((yield* Clock.currentTimeMillis) - startedAt) / 1000
      }
      // The session fails (stays resumable) when a resource failed.
      if (errors.length > 0) return yield* Effect.fail({ summary, errors })
      return summary
    })
  )

/** One backfill recorded in job_runs; prints `render`'s table, and fails after it if a resource failed. */
const recorded = (
  mode: ProgressMode,
  resources: ReadonlyArray<BackfillResource>,
  render: (summary: BackfillSummary, failed: boolean) => string,
  progress: SessionProgress
) =>
  Effect.gen(function* () {
    const jobRuns = yield* JobRuns
    const done = yield* finishedEarlier(resources)
    const outcome = yield* Effect.result(
      jobRuns.record(
        "backfill",
        null,
        Effect.map(session(mode, resources, done, progress), (summary) => ({
          ...summary,
          detail: { rows: summary.rows.map((row) => ({ ...row })) }
        })),
        { resources }
      )
    )
    if (outcome._tag === "Failure") {
      const failure = outcome.failure
      if ("summary" in failure) {
        yield* Console.log(render(failure.summary, true))
        // The table lists every failure; the command's one-line reason is the first.
        return yield* failure.errors[0]!
      }
      return yield* toSyncError("backfill", {})(failure)
    }
    const { detail: _detail, ...summary } = outcome.success
    yield* Console.log(render(summary, false))
    return summary
  })

const run = Effect.fn("backfill")(function* (options?: BackfillOptions) {
  const resources = yield* selection(options)
  const mode = options?.progress === undefined || options.progress === "auto" ? detectProgressMode() : options.progress
  const leases = yield* JobLease
  const config = yield* AppConfig
  const render = options?.render ?? renderSummary
  const progress: SessionProgress = { startedAt: yield* Clock.currentTimeMillis, rows: [], current: undefined }
  // One backfill at a time on a database: two would only race each other for the same leases.
  return yield* leases
    .run("backfill", recorded(mode, resources, render, progress), {
      onWait: Effect.logWarning("backfill: another backfill is running on this database; waiting for it to finish")
    })
    .pipe(Effect.onInterrupt(() => reportInterrupted(progress, resources.length * config.connections.length, render)))
})

/**
 * The backfill: every connection, every resource (or the one named), one after another. Prints the
 * summary table; fails (after printing it) if any resource failed. Needs the database, the
 * warehouse and the CRM client's services; brings the sync services itself.
 */
export const backfill = (options?: BackfillOptions): Effect.Effect<BackfillSummary, SyncError, BackfillRequirements> =>
  run(options).pipe(Effect.mapError(toSyncError("backfill", {})), Effect.provide(SyncServicesLive))

/** What `backfill` needs from the program: config, database, warehouse, and the CRM client's services. */
export type BackfillRequirements = AppConfig | SqlClient | Warehouse | RateBudget | Credentials | HttpClient.HttpClient
