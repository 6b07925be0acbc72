/**
 * `crm-sync backfill [--resource R]`: reads every readable resource from scratch, for every
 * configured connection — the reference data (me, books with users and teams, project templates),
 * every business (a crawl without `updated_since`, which also leaves the poll cursor at the crawl's
 * start), every annuity contract and every financial account — at the `bulk` priority.
 *
 * Resumable: after a crash (kill -9 included) the next `backfill` resumes the unfinished one — the
 * resources it completed are not read again (job_runs), and the crawl it was in continues after
 * its last stored page (crawl_runs); records never duplicate (the warehouse upserts by id). One
 * backfill at a time per database (a lease). Safe beside a running daemon: every
 * request takes its permit from the shared budget, and each resource is taken under the same lease
 * as the daemon's job for it, so a backfill waits for a crawl in progress instead of doubling it.
 *
 * On a terminal it draws a progress bar per resource with an ETA computed from the requests still
 * needed and the budget's windows (RateBudget.timeUntil), or the observed pace if that is slower;
 * elsewhere it logs a line per resource every 15 seconds. It ends with a summary table on stdout.
 * A resource that fails does not stop the others; the backfill then fails, after the table.
 */
import { Clock, Console, Duration, Effect, Logger } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { AppConfig } from "../config/AppConfig.ts"
import { formatDuration } from "../observability/Text.ts"
import { strictest } from "../budget/Buckets.ts"
import { RateBudget } from "../budget/RateBudget.ts"
import { CrmClient, type CrmClientShape } from "../crm/CrmClient.ts"
import type { Credentials } from "../crm/Credentials.ts"
import type { Warehouse } from "../warehouse/Warehouse.ts"
import type { HttpClient } from "effect/http"
import {
  detectProgressMode,
  estimateMs,
  etaText,
  makeProgressDisplay,
  type ProgressDisplay,
  type ProgressMode
} from "./BackfillProgress.ts"
import { BUSINESSES } from "./BusinessPoller.ts"
import { Cursors } from "./Cursors.ts"
import { businessCrawlLease, JobLease, resourceLease } from "./JobLease.ts"
import { type JobOutcome, JobRuns } from "./JobRuns.ts"
import { type CrawlResource, PageCrawler } from "./PageCrawler.ts"
import { ReferenceSync } from "./ReferenceSync.ts"
import { SyncError, toSyncError, Usage } from "./SyncError.ts"
import { JobNames, SyncServicesLive } from "./SyncJobs.ts"
import {
  type BackfillResource,
  BackfillResourceNames,
  BackfillResources,
  parseBackfillResource
} from "./BackfillResources.ts"

export interface BackfillOptions {
  /** One resource only (see `BackfillResources`; `books`, `users`, `teams`, `project_templates` mean `reference`). */
  readonly resource?: string | undefined
  /** `auto` (default): bars on a terminal, log lines otherwise. */
  readonly progress?: ProgressMode | "auto" | undefined
  /** What is printed at the end (default: the summary table); `failed` when a resource failed. */
  readonly render?: ((summary: BackfillSummary, failed: boolean) => string) | undefined
}

export interface BackfillRow {
  readonly connection: string
  readonly resource: BackfillResource
  /** `done earlier`: completed by an unfinished backfill that this one resumed. */
  readonly status: "done" | "done earlier" | "failed"
  readonly pages: number
  readonly requests: number
  readonly records: number
  readonly inserted: number
  readonly updated: number
  readonly unchanged: number
  readonly rejected: number
  readonly deleted: number
  readonly resumedFrom: number | undefined
  readonly seconds: number
  readonly note: string | undefined
}

export interface BackfillSummary {
  readonly rows: ReadonlyArray<BackfillRow>
  readonly requests: number
  readonly seconds: number
}

/** How often the budget is asked for a fresh ETA (it is a query). */
const ETA_REFRESH_MS = 5_000

const number = new Intl.NumberFormat("en-US")

/** The summary table printed at the end. */
export const renderSummary = (summary: BackfillSummary): string => {
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
  const body = summary.rows.map((row) => [
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
  ])
  const widths = header.map((title, column) => Math.max(title.length, ...body.map((cells) => cells[column]!.length)))
  const left = new Set([0, 1, 2])
  const line = (cells: ReadonlyArray<string>) =>
    cells
      .map((cell, column) => (left.has(column) ? cell.padEnd(widths[column]!) : cell.padStart(widths[column]!)))
      .join("  ")
      .trimEnd()
  const notes = summary.rows.flatMap((row) =>
    row.note === undefined ? [] : [`  ${row.connection} ${row.resource}: ${row.note}`]
  )
  return [
    line(header),
    ...body.map(line),
    "",
    `${summary.rows.filter((row) => row.status !== "failed").length} of ${summary.rows.length} done, ` +
      `${number.format(summary.requests)} requests in ${formatDuration(summary.seconds * 1000)}`,
    ...(notes.length === 0 ? [] : ["", "notes:", ...notes])
  ].join("\n")
}

/** Keeps the ETA of one resource, asking the budget at most every few seconds. */
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

/** Records per second. */
const rate = (records: number, ms: number) => (records * 1000) / ms

const zeroRow = (connection: string, resource: BackfillResource) => ({
  connection,
  resource,
  pages: 0,
  requests: 0,
  records: 0,
  inserted: 0,
  updated: 0,
  unchanged: 0,
  rejected: 0,
  deleted: 0,
  resumedFrom: undefined,
  note: undefined
})

/** One resource of one connection, under its lease, recorded in job_runs; never fails (the row says). */
const backfillResource = (client: CrmClientShape, resource: BackfillResource, display: ProgressDisplay) =>
  Effect.gen(function* () {
    const connection = client.connection.name
    const leases = yield* JobLease
    const jobRuns = yield* JobRuns
    const crawler = yield* PageCrawler
    const reference = yield* ReferenceSync
    const cursors = yield* Cursors
    const key = `${connection}/${resource}`
    const startedAt = yield* Clock.currentTimeMillis
    const eta = yield* makeEta(client)
    const elapsed = Effect.map(Clock.currentTimeMillis, (now) => Math.max(1, now - startedAt))

    const crawl = (crawlResource: CrawlResource) =>
      Effect.gen(function* () {
        // A full listing of businesses also waits for the daemon's business crawl (JobLease).
        const exclusive = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
          crawlResource === BUSINESSES ? leases.run(businessCrawlLease(connection), effect) : effect
        const summary = yield* exclusive(
          crawler.crawl(client, crawlResource, {
            source: "backfill",
            onProgress: (progress) =>
              Effect.gen(function* () {
                const ms = yield* elapsed
                const requestsHere = progress.requests - progress.startRequests
                const remaining = Math.max(0, progress.totalPages - progress.page)
                yield* display.update(key, {
                  pages: progress.page,
                  totalPages: progress.totalPages,
                  records: progress.seen,
                  recordsPerSecond: rate(progress.seen - progress.startSeen, ms),
                  eta: yield* eta(remaining, requestsHere, ms)
                })
              }),
            // A complete business crawl is as good as a poll from its start (see BusinessPoller).
            ...(crawlResource === BUSINESSES
              ? {
                  onComplete: (run) => cursors.advance(connection, BUSINESSES, run.startedAt, { backfill_run: run.id })
                }
              : {})
          })
        )
        return {
          ...zeroRow(connection, resource),
          pages: summary.pages,
          requests: summary.requests,
          records: summary.seen,
          inserted: summary.inserted,
          updated: summary.updated,
          unchanged: summary.unchanged,
          rejected: summary.rejected,
          deleted: summary.deleted,
          resumedFrom: summary.resumed ? summary.startPage : undefined,
          note: summary.note ?? undefined
        }
      })

    const referenceStep = Effect.gen(function* () {
      const summary = yield* reference.refresh(client, {
        source: "backfill",
        onProgress: (progress) =>
          Effect.gen(function* () {
            const ms = yield* elapsed
            // At least one page per book is still to come; that is all that is known in advance.
            const remaining = Math.max(0, progress.books - progress.booksDone)
            yield* display.update(key, {
              pages: progress.requests,
              totalPages: progress.step === "project_templates" ? progress.requests + remaining : undefined,
              records: progress.records,
              recordsPerSecond: rate(progress.records, ms),
              eta: yield* eta(remaining, progress.requests, ms)
            })
          })
      })
      return {
        ...zeroRow(connection, resource),
        pages: summary.requests,
        requests: summary.requests,
        records: summary.books + summary.projectTemplates,
        inserted: summary.inserted,
        updated: summary.updated,
        unchanged: summary.unchanged,
        rejected: summary.rejected
      }
    })

    const work = resource === "reference" ? referenceStep : crawl(resource)
    yield* display.start(key, `${connection === "default" ? "" : `${connection} `}${resource}`)
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
            display.update(key, {
              pages: 0,
              totalPages: undefined,
              records: 0,
              recordsPerSecond: 0,
              eta: undefined,
              status: "waiting: another process (the daemon?) is syncing it"
            }),
            display.message(`${key}: waiting for another process that is syncing it to finish`)
          )
        }
      )
      .pipe(Effect.result)
    const seconds = ((yield* Clock.currentTimeMillis) - startedAt) / 1000
    if (outcome._tag === "Failure") {
      const message = outcome.failure.message
      yield* display.update(key, {
        pages: 0,
        totalPages: undefined,
        records: 0,
        recordsPerSecond: 0,
        eta: undefined,
        status: "failed"
      })
      yield* display.message(`${key} failed: ${message}`)
      const row: BackfillRow = { ...zeroRow(connection, resource), status: "failed", seconds, note: message }
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
 * `connection/resource`: a backfill killed part way is resumed, not started over (and an
 * interrupted crawl resumes page-wise). JobRuns.backfilledSince has the rule.
 */
const finishedEarlier = (resources: ReadonlyArray<BackfillResource>) =>
  Effect.flatMap(JobRuns, (jobRuns) => jobRuns.backfilledSince(resources))

const run = Effect.fn("backfill")(function* (options?: BackfillOptions) {
  const config = yield* AppConfig
  let resources: ReadonlyArray<BackfillResource> = BackfillResources
  if (options?.resource !== undefined) {
    const parsed = parseBackfillResource(options.resource)
    if (parsed === undefined) {
      return yield* new SyncError({
        job: "backfill",
        reason: new Usage({
          message: `unknown resource ${options.resource}; expected one of ${BackfillResourceNames.join(", ")}`
        })
      })
    }
    resources = [parsed]
  }
  if (config.connections.length === 0) {
    return yield* new SyncError({
      job: "backfill",
      reason: new Usage({
        message: "no CRM connection is configured (CRM_BASE_URL and CRM_TOKEN, or connections in CRM_SYNC_CONFIG)"
      })
    })
  }
  const mode = options?.progress === undefined || options.progress === "auto" ? detectProgressMode() : options.progress
  const leases = yield* JobLease
  const jobRuns = yield* JobRuns
  // One backfill at a time on a database: two would only race each other for the same leases.
  return yield* leases.run(
    "backfill",
    Effect.gen(function* () {
      const done = yield* finishedEarlier(resources)
      const startedAt = yield* Clock.currentTimeMillis
      const rows: Array<BackfillRow> = []
      const errors: Array<SyncError> = []
      const work = Effect.scoped(
        Effect.gen(function* () {
          const display = yield* makeProgressDisplay(mode)
          const all = Effect.gen(function* () {
            if (done.size > 0) {
              yield* display.message(
                `resuming an unfinished backfill: ${[...done].join(", ")} already done, not read again`
              )
            }
            for (const connection of config.connections) {
              const client = yield* CrmClient.make(connection.name).pipe(Effect.orDie)
              for (const resource of resources) {
                if (done.has(`${connection.name}/${resource}`)) {
                  rows.push({ ...zeroRow(connection.name, resource), status: "done earlier", seconds: 0 })
                  continue
                }
                const { row, error } = yield* backfillResource(client, resource, display)
                rows.push(row)
                if (error !== undefined) errors.push(error)
              }
            }
          })
          // While bars are drawn, log lines (a crawl's "complete", a retry's warning) go above them.
          yield* display.logger === undefined
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
      const outcome = yield* Effect.result(
        jobRuns.record(
          "backfill",
          null,
          Effect.map(work, (summary) => ({ ...summary, detail: { rows: summary.rows.map((row) => ({ ...row })) } })),
          { resources }
        )
      )
      if (outcome._tag === "Failure") {
        const failure = outcome.failure
        if ("summary" in failure) {
          yield* Console.log((options?.render ?? renderSummary)(failure.summary, true))
          // The table lists every failure; the command's one-line reason is the first.
          return yield* failure.errors[0]!
        }
        return yield* toSyncError("backfill", {})(failure)
      }
      const { detail: _detail, ...summary } = outcome.success
      yield* Console.log((options?.render ?? renderSummary)(summary, false))
      return summary
    }),
    {
      onWait: Effect.logWarning("backfill: another backfill is running on this database; waiting for it to finish")
    }
  )
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
