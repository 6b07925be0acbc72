/**
 * PageCrawler: reads a whole listing into the warehouse — annuity contracts and financial accounts
 * (spec §4: only `page` and `per_page` exist for them), and businesses when there is no poll cursor
 * yet or a backfill asks — resuming an unfinished crawl after its last stored page. PageFetcher
 * reads and decodes pages ahead; one writer stores them in page order, several queued pages to one
 * transaction when it falls behind (`storeBatch`), and no transaction of a crawl ever waits for
 * anything of this process: a SIGTERM lets the batch in hand commit, and a crash loses at most
 * pages not yet committed. A clean finish applies deletion by absence (CrawlRuns). The caller holds
 * the resource's lease (`resourceLease` of JobLease).
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as DateTime from "effect/DateTime"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Queue from "effect/Queue"
import * as Result from "effect/Result"
import * as Schedule from "effect/Schedule"
import { SqlClient } from "effect/sql/SqlClient"
import { isSqlError, type SqlError } from "effect/sql/SqlError"
import { AppConfig } from "../config/AppConfig.ts"
import type { CrmClientShape } from "../crm/CrmClient.ts"
import {
  addUpsertResults,
  combine,
  KnownReferences,
  noWrites,
  refusedRecord,
  type Source,
  type UpsertResult,
  Warehouse
} from "../warehouse/Warehouse.ts"
import { type CrawlRun, CrawlRuns, type FinishResult, type RunTotals } from "./CrawlRuns.ts"
import { describeFailure } from "./JobRuns.ts"
import { type Fetched, type FetchQueue, startFetching } from "./PageFetcher.ts"
import { type SyncCounts, writeCounts } from "./SyncCounts.ts"
import { recordOutcomes, recordRefused } from "./SyncMetrics.ts"
import { type JobFailure, type SyncError, toSyncError } from "./SyncError.ts"

/** The resources read by full-page crawls. */
export const CrawlResources = ["businesses", "annuity_contracts", "financial_accounts"] as const
export type CrawlResource = (typeof CrawlResources)[number]

/** Pages at most in one write transaction (when the writer has fallen behind the fetcher). */
const MAX_BATCH_PAGES = 10

/** Where a crawl stands, after each stored batch. */
export interface CrawlProgress {
  readonly connection: string
  readonly resource: CrawlResource
  /** Highest page stored. */
  readonly page: number
  readonly totalPages: number
  readonly totalCount: number
  /** Unique records seen by this crawl so far (a resumed crawl counts its earlier pages). */
  readonly seen: number
  /** Requests this crawl has sent (a resumed crawl counts its earlier ones). */
  readonly requests: number
  /** The first page this invocation read (1, or where it resumed). */
  readonly startPage: number
  /** `seen` and `requests` when this invocation began (non-zero for a resumed crawl). */
  readonly startSeen: number
  readonly startRequests: number
}

export interface CrawlOptions {
  /** `crawl` for the daemon's scheduled crawls, `backfill` for the backfill's. */
  readonly source: Extract<Source, "crawl" | "backfill">
  /** Called after every stored batch (the backfill's progress bars). */
  readonly onProgress?: (progress: CrawlProgress) => Effect.Effect<void>
  /**
   * Runs inside the transaction that completes a clean crawl (a business crawl moves the poll
   * cursor to the crawl's start there).
   */
  readonly onComplete?: (run: CrawlRun) => Effect.Effect<void, SqlError>
}

export interface CrawlSummary {
  readonly connection: string
  readonly resource: CrawlResource
  readonly runId: number
  readonly resumed: boolean
  readonly startPage: number
  readonly pages: number
  readonly totalCount: number
  /** Requests of this invocation, and of the whole crawl (a resumed one counts the earlier ones). */
  readonly requests: number
  readonly runRequests: number
  readonly seen: number
  readonly inserted: number
  readonly updated: number
  readonly unchanged: number
  readonly rejected: number
  readonly duplicates: number
  readonly rechecks: number
  readonly undeleted: number
  readonly absent: number
  readonly deleted: number
  readonly refused: number
  readonly note: string | null
}

/** A crawl's counters: its pages, this invocation's requests, and the unique records it saw. */
export const crawlCounts = (summary: CrawlSummary): SyncCounts => ({
  pages: summary.pages,
  requests: summary.requests,
  records: summary.seen,
  inserted: summary.inserted,
  updated: summary.updated,
  unchanged: summary.unchanged,
  rejected: summary.rejected
})

/** What the writer of one crawl works with, and what it stored so far. */
interface Writer {
  readonly connection: string
  readonly resource: CrawlResource
  readonly run: CrawlRun
  readonly queue: FetchQueue
  /** Households and other references the crawl's records name, once merged. */
  readonly known: KnownReferences
  counts: UpsertResult
  requests: number
  seen: number
  lastPage: number
}

/** What a crawl works with: the layer's services and `sync.deletion_threshold`. */
interface Deps {
  readonly sql: SqlClient
  readonly warehouse: Warehouse["Service"]
  readonly runs: CrawlRuns["Service"]
  readonly threshold: number
}

/** The next batch from the fetcher (every page it holds, up to `MAX_BATCH_PAGES`); undefined when the pages ended. */
const takeBatch = (queue: FetchQueue) =>
  Effect.gen(function* () {
    const taken = yield* Effect.result(Queue.takeBetween(queue, 1, MAX_BATCH_PAGES))
    if (Result.isFailure(taken)) {
      if (Cause.isDone(taken.failure)) return undefined
      return yield* Effect.fail(taken.failure)
    }
    return taken.success
  })

/**
 * One try at a batch's transaction. The first takes no savepoint per chunk (`isolate: false`); if
 * PostgreSQL refuses a record it rolls back, and the second sets the refused records aside one by
 * one. Nothing in it waits for anything of this process: once the transaction has begun, every
 * step is a statement (see `storeBatch`).
 */
const writeBatch = (
  deps: Deps,
  run: CrawlRun,
  batch: ReadonlyArray<Fetched>,
  ledger: ReturnType<KnownReferences["open"]>,
  isolate: boolean
) =>
  deps.sql.withTransaction(
    Effect.gen(function* () {
      const prepared = combine(
        run.resource,
        batch.map((item) => item.prepared)
      )
      const counts = yield* deps.warehouse.write(prepared, { source: run.source, known: ledger, isolate })
      const ids = batch.flatMap((item) => item.ids)
      const unique = new Set(ids).size
      const inOrder = batch.filter((item) => !item.recheck)
      const latest = (inOrder.length > 0 ? inOrder : batch).at(-1)!
      const { undeleted } = yield* deps.runs.recordBatch(run, {
        lastPage: inOrder.length > 0 ? Math.max(...inOrder.map((item) => item.page)) : 0,
        totalPages: latest.pagination.total_pages,
        totalCount: latest.pagination.total_count,
        ids,
        unique,
        counts,
        requests: batch.length,
        rechecks: batch.length - inOrder.length
      })
      return { counts, latest, fresh: unique, undeleted }
    })
  )

/**
 * Whether a batch's transaction failed on the load rather than on its data: a deadlock, a lock
 * wait past `lock_timeout`, a serialization failure, a lost connection. The same batch may pass
 * on the next try.
 */
const isTransient = (error: JobFailure): boolean =>
  error._tag === "WarehouseError"
    ? error.retryable
    : error._tag === "CrawlRunsError"
      ? isSqlError(error.cause) && error.cause.isRetryable
      : isSqlError(error) && error.isRetryable

/** A batch whose transaction failed on the load is tried again a few times, a little later each time. */
const transientRetry = Schedule.exponential("100 millis").pipe(Schedule.jittered, Schedule.upTo({ times: 3 }))

/**
 * Stores a batch of fetched pages in one transaction, all or nothing and uninterruptibly: the
 * records (the warehouse's forward-only upsert: an unchanged record is not rewritten), their ids
 * noted as seen (CrawlRuns), any that had been deleted by absence undeleted, and
 * `crawl_runs.last_page` advanced; returns what it did. A crawl stores one batch at a time, so its
 * commits are in page order (a crash never leaves `last_page` past a page not stored), and a
 * batch's transaction never waits for anything of this process — an earlier batch, a turn, a
 * permit: every wait it meets is a lock PostgreSQL sees, so a cycle of waits between crawls is a
 * deadlock PostgreSQL detects and breaks, never a stall (docs/sync.md, "Locks"). Rows are locked in
 * id order (the warehouse writes each table's rows sorted by id). A transaction that fails on the
 * load (`isTransient`: a deadlock, `lock_timeout`) is tried again; the fetcher meanwhile reads
 * ahead (`FETCH_AHEAD` pages), and what queued up goes into the next batch.
 */
const storeBatch = (deps: Deps, run: CrawlRun, known: KnownReferences, batch: ReadonlyArray<Fetched>) =>
  Effect.gen(function* () {
    const ledger = known.open()
    return yield* writeBatch(deps, run, batch, ledger, false).pipe(
      Effect.catchIf(
        (error) => error._tag === "WarehouseError" && refusedRecord(error),
        () =>
          Effect.andThen(
            Effect.sync(() => ledger.discard()),
            writeBatch(deps, run, batch, ledger, true)
          )
      ),
      Effect.onExit((exit) => Effect.sync(() => (Exit.isSuccess(exit) ? ledger.settle() : ledger.discard())))
    )
  }).pipe(
    Effect.uninterruptible,
    Effect.tapError((error) =>
      isTransient(error)
        ? Effect.logInfo("crawl: a batch failed on a lock wait or a lost connection (tried up to four times)").pipe(
            Effect.annotateLogs({ error: error.message })
          )
        : Effect.void
    ),
    Effect.retry({ schedule: transientRetry, while: isTransient })
  )

/** Where the crawl stands after a stored batch. */
const progressOf = (writer: Writer, latest: Fetched): CrawlProgress => ({
  connection: writer.connection,
  resource: writer.resource,
  page: writer.lastPage,
  totalPages: latest.pagination.total_pages,
  totalCount: latest.pagination.total_count,
  seen: writer.seen,
  requests: writer.run.requests + writer.requests,
  startPage: writer.run.nextPage,
  startSeen: writer.run.seen,
  startRequests: writer.run.requests
})

/** The crawl's writer: takes what the fetcher queued and stores it, batch after batch, until the pages end. */
const write = (deps: Deps, writer: Writer, options: CrawlOptions) =>
  Effect.gen(function* () {
    while (true) {
      const batch = yield* takeBatch(writer.queue)
      if (batch === undefined) return
      const stored = yield* storeBatch(deps, writer.run, writer.known, batch)
      yield* recordOutcomes(writer.resource, { ...writeCounts(stored.counts), undeleted: stored.undeleted })
      writer.counts = addUpsertResults(writer.counts, stored.counts)
      writer.requests += batch.length
      writer.seen += stored.fresh
      writer.lastPage = Math.max(writer.lastPage, ...batch.filter((i) => !i.recheck).map((i) => i.page))
      if (options.onProgress !== undefined) yield* options.onProgress(progressOf(writer, stored.latest))
    }
  })

/** A clean finish: deletion by absence (CrawlRuns), and the caller's `onComplete`, in one transaction. */
const finish = (deps: Deps, run: CrawlRun, options: CrawlOptions) =>
  deps.sql
    .withTransaction(
      Effect.gen(function* () {
        const now = yield* DateTime.now
        const result = yield* deps.runs.finishClean(run, {
          threshold: deps.threshold,
          deleteRecords: (ids) =>
            Effect.map(
              deps.warehouse.markDeleted(run.resource, ids, now, { source: run.source }),
              (deleted) => deleted.deleted
            )
        })
        if (options.onComplete !== undefined) yield* options.onComplete(run)
        return result
      })
    )
    .pipe(Effect.uninterruptible)

const summaryOf = (writer: Writer, finished: FinishResult, final: RunTotals): CrawlSummary => ({
  connection: writer.connection,
  resource: writer.resource,
  runId: writer.run.id,
  resumed: writer.run.resumed,
  startPage: writer.run.nextPage,
  pages: final.last_page,
  totalCount: final.total_count ?? 0,
  requests: writer.requests,
  runRequests: final.requests,
  seen: final.seen,
  inserted: final.inserted,
  updated: final.updated,
  unchanged: final.unchanged,
  rejected: writer.counts.rejected,
  duplicates: final.duplicates,
  rechecks: final.rechecks,
  undeleted: final.undeleted,
  absent: finished.absent,
  deleted: finished.deleted,
  refused: finished.refused,
  note: finished.note
})

const logComplete = (summary: CrawlSummary, elapsedMs: number) =>
  (summary.refused > 0 ? Effect.logWarning : Effect.logInfo)("crawl: complete").pipe(
    Effect.annotateLogs({
      run: summary.runId,
      pages: summary.pages,
      requests: summary.requests,
      seen: summary.seen,
      inserted: summary.inserted,
      updated: summary.updated,
      unchanged: summary.unchanged,
      deleted: summary.deleted,
      seconds: Math.round(elapsedMs / 100) / 10,
      ...(summary.note === null ? {} : { note: summary.note })
    })
  )

const crawl = (deps: Deps) =>
  Effect.fn("PageCrawler.crawl")(
    function* (
      client: CrmClientShape,
      resource: CrawlResource,
      options: CrawlOptions
    ): Effect.fn.Return<CrawlSummary, JobFailure> {
      const connection = client.connection.name
      yield* Effect.annotateCurrentSpan({ connection, resource, source: options.source })
      const run = yield* deps.runs.open(connection, resource, options.source)
      const startedAt = yield* Clock.currentTimeMillis
      if (run.resumed) {
        yield* Effect.logInfo("crawl: resuming").pipe(Effect.annotateLogs({ run: run.id, page: run.nextPage }))
      }
      const writer: Writer = {
        connection,
        resource,
        run,
        queue: yield* startFetching(client, resource, run),
        known: new KnownReferences(),
        counts: noWrites,
        requests: 0,
        seen: run.seen,
        lastPage: run.nextPage - 1
      }
      const finished = yield* write(deps, writer, options).pipe(
        Effect.andThen(finish(deps, run, options)),
        // A failure (not an interruption: that leaves the run to be resumed) marks the run failed.
        Effect.onError((cause) =>
          Cause.hasInterruptsOnly(cause) ? Effect.void : Effect.ignore(deps.runs.fail(run, describeFailure(cause)))
        )
      )
      yield* recordOutcomes(resource, { deleted: finished.deleted })
      yield* recordRefused(resource, finished.refused)
      const summary = summaryOf(writer, finished, yield* deps.runs.totals(run))
      yield* logComplete(summary, (yield* Clock.currentTimeMillis) - startedAt)
      return summary
    },
    (effect, client, resource) =>
      Effect.mapError(effect, toSyncError("crawl", { connection: client.connection.name, resource }))
  )

export class PageCrawler extends Context.Service<
  PageCrawler,
  {
    /**
     * Crawls one resource of one connection to the end (resuming an unfinished crawl of the same
     * source), stores every page, and on a clean finish applies deletion by absence.
     */
    readonly crawl: (
      client: CrmClientShape,
      resource: CrawlResource,
      options: CrawlOptions
    ) => Effect.Effect<CrawlSummary, SyncError>
  }
>()("crm-sync/sync/PageCrawler") {
  static readonly layer = Layer.effect(
    PageCrawler,
    Effect.gen(function* () {
      const deps: Deps = {
        sql: yield* SqlClient,
        warehouse: yield* Warehouse,
        runs: yield* CrawlRuns,
        threshold: (yield* AppConfig).sync.deletion_threshold
      }
      return PageCrawler.of({ crawl: crawl(deps) })
    })
  )
}
