/**
 * PageCrawler: reads a whole listing into the warehouse — annuity contracts and financial accounts
 * (spec §4: only `page` and `per_page` exist for them), and businesses when there is no poll cursor
 * yet or a backfill asks — resuming an unfinished crawl after its last stored page. PageFetcher
 * reads and decodes pages ahead; two writers store them, several queued pages to one transaction
 * when they fall behind, committing in page order (`storeBatch`): a SIGTERM lets the pages in hand
 * commit, and a crash loses at most pages not yet committed. A clean finish applies deletion by
 * absence (CrawlRuns). The caller holds the resource's lease (`resourceLease` of JobLease).
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as DateTime from "effect/DateTime"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Queue from "effect/Queue"
import * as Result from "effect/Result"
import * as Semaphore from "effect/Semaphore"
import { SqlClient } from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql/SqlError"
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
import { type CrawlRun, CrawlRuns, CrawlRunsError, type FinishResult, type RunTotals } from "./CrawlRuns.ts"
import { describeFailure } from "./JobRuns.ts"
import { type Fetched, type FetchQueue, startFetching } from "./PageFetcher.ts"
import { writeCounts } from "./SyncCounts.ts"
import { recordOutcomes, recordRefused } from "./SyncMetrics.ts"
import { type JobFailure, type SyncError, toSyncError } from "./SyncError.ts"

/** The resources read by full-page crawls. */
export const CrawlResources = ["businesses", "annuity_contracts", "financial_accounts"] as const
export type CrawlResource = (typeof CrawlResources)[number]

/** Pages at most in one write transaction (only when the writers have fallen behind the fetcher). */
const MAX_BATCH_PAGES = 10
/**
 * Write transactions at once. While one stores its records, the other finishes its bookkeeping
 * and commits: PostgreSQL works on one batch while this process waits on the other's round trips.
 * From an unthrottled sandbox two wrote 100,000 records about 10% faster than one
 * (`test/bench/crawl.ts`). Commits stay in page order (see `storeBatch`).
 */
const WRITERS = 2
/** The longest a batch waits for an earlier one to commit (see `outcomeOf`). */
const BATCH_WAIT = "60 seconds"

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

/**
 * How a batch handed to a writer ended: committed; rolled back on an error; or never written
 * because the crawl was being interrupted (a shutdown) — which the batches after it must end as
 * too, rather than as an error that would mark a merely interrupted crawl failed.
 */
type BatchOutcome = "committed" | "failed" | "interrupted"

/** A batch handed to a writer: its place in commit order, its record ids, and its outcome. */
interface InFlight {
  readonly ids: ReadonlySet<string>
  readonly done: Deferred.Deferred<BatchOutcome>
}

/** A batch as a writer took it, with the earlier batches it must wait for. */
interface Taken {
  readonly batch: ReadonlyArray<Fetched>
  /** The ids of its records, in order, duplicates included. */
  readonly ids: ReadonlyArray<string>
  readonly self: InFlight
  /** Earlier batches still in flight that hold one of its records. */
  readonly overlapping: ReadonlyArray<InFlight>
  /** The batch just before it in commit order. */
  readonly previous: InFlight | undefined
}

/** What the writers of one crawl share: the batches in commit order, and what they stored so far. */
interface Writers {
  readonly connection: string
  readonly resource: CrawlResource
  readonly run: CrawlRun
  readonly queue: FetchQueue
  /** Households and other references the crawl's records name, once merged. */
  readonly known: KnownReferences
  /** Batches handed to a writer and not yet committed or rolled back, in commit order. */
  readonly inFlight: Array<InFlight>
  last: InFlight | undefined
  /** Taking a batch and its place in commit order happen together. */
  readonly intake: Semaphore.Semaphore
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

/**
 * How a batch ended. A wait longer than `BATCH_WAIT` counts as failed: it breaks a cycle of waits
 * that runs through another process (this batch's rows wanted by a transaction that holds what the
 * batch before needs), which PostgreSQL cannot see; the crawl then stops, resumable, instead of
 * hanging.
 */
const outcomeOf = (batch: InFlight): Effect.Effect<BatchOutcome> =>
  Deferred.await(batch.done).pipe(
    Effect.timeoutOption(BATCH_WAIT),
    Effect.map((outcome) => (outcome._tag === "Some" ? outcome.value : "failed"))
  )

/**
 * Goes on only after a commit of the batch in `outcome`: a batch before this one that was not
 * stored stops this one too — as an error, or as an interruption if it was interrupted.
 */
const requireCommitted = (outcome: BatchOutcome) =>
  outcome === "committed"
    ? Effect.void
    : outcome === "interrupted"
      ? Effect.interrupt
      : Effect.fail(
          new CrawlRunsError({
            operation: "PageCrawler.store",
            message:
              "an earlier batch of this crawl was not stored (it failed, or took over a minute); nor is this one",
            cause: null
          })
        )

/** The next batch from the fetcher and its place in commit order; undefined when the pages ended. */
const takeBatch = (writers: Writers) =>
  writers.intake.withPermits(1)(
    Effect.gen(function* () {
      const taken = yield* Effect.result(Queue.takeBetween(writers.queue, 1, MAX_BATCH_PAGES))
      if (Result.isFailure(taken)) {
        if (Cause.isDone(taken.failure)) return undefined
        return yield* Effect.fail(taken.failure)
      }
      const ids = taken.success.flatMap((item) => item.ids)
      const self: InFlight = { ids: new Set(ids), done: Deferred.makeUnsafe<BatchOutcome>() }
      const overlapping = writers.inFlight.filter((other) => ids.some((id) => other.ids.has(id)))
      const previous = writers.last
      writers.inFlight.push(self)
      writers.last = self
      return { batch: taken.success, ids, self, overlapping, previous } satisfies Taken
    })
  )

/**
 * One try at a batch's transaction. The first takes no savepoint per chunk (`isolate: false`); if
 * PostgreSQL refuses a record it rolls back, and the second sets the refused records aside one by
 * one.
 */
const writeBatch = (
  deps: Deps,
  run: CrawlRun,
  taken: Taken,
  ledger: ReturnType<KnownReferences["open"]>,
  previousOutcome: Effect.Effect<BatchOutcome>,
  isolate: boolean
) =>
  deps.sql.withTransaction(
    Effect.gen(function* () {
      for (const earlier of taken.overlapping) {
        yield* requireCommitted(yield* outcomeOf(earlier))
      }
      const { batch } = taken
      const prepared = combine(
        run.resource,
        batch.map((item) => item.prepared)
      )
      const counts = yield* deps.warehouse.write(prepared, {
        source: run.source,
        known: ledger,
        beforeReferences: Effect.asVoid(previousOutcome),
        isolate
      })
      yield* requireCommitted(yield* previousOutcome)
      const inOrder = batch.filter((item) => !item.recheck)
      const latest = (inOrder.length > 0 ? inOrder : batch).at(-1)!
      const { undeleted } = yield* deps.runs.recordBatch(run, {
        lastPage: inOrder.length > 0 ? Math.max(...inOrder.map((item) => item.page)) : 0,
        totalPages: latest.pagination.total_pages,
        totalCount: latest.pagination.total_count,
        ids: taken.ids,
        unique: taken.self.ids.size,
        counts,
        requests: batch.length,
        rechecks: batch.length - inOrder.length
      })
      return { counts, latest, fresh: taken.self.ids.size, undeleted }
    })
  )

/**
 * Stores a batch of fetched pages in one transaction, all or nothing and uninterruptibly: the
 * records (the warehouse's forward-only upsert: an unchanged record is not rewritten), their ids
 * noted as seen (CrawlRuns), any that had been deleted by absence undeleted, and
 * `crawl_runs.last_page` advanced; returns what it did. Two of these run at once (`WRITERS`), and
 * they must neither commit out of page order (a crash between the two commits would leave
 * `last_page` past pages never stored) nor wait on each other's row locks in both directions (a
 * deadlock PostgreSQL cannot see, half of it being a wait in this process). So a batch
 * - first waits for any earlier batch still in flight that holds one of its records (drift
 *   duplicates, rare), so that it never locks a row an earlier batch will want;
 * - writes its records, then waits for the batch before it to commit before it merges
 *   references, notes the ids seen and moves `last_page` (rows that batch also touches);
 * - rolls back if that batch did not commit: the crawl stops there, resumable. It fails if
 *   that batch failed, and ends as interrupted if that batch was (a shutdown caught it
 *   before it began): an interrupted crawl is not a failed one.
 * An earlier batch never waits on a later one: lock waits only ever point backwards.
 */
const storeBatch = (deps: Deps, run: CrawlRun, known: KnownReferences, taken: Taken) =>
  Effect.gen(function* () {
    const ledger = known.open()
    // Asked twice (before references, and before the bookkeeping), waited for once.
    const previousOutcome =
      taken.previous === undefined
        ? Effect.succeed<BatchOutcome>("committed")
        : yield* Effect.cached(outcomeOf(taken.previous))
    return yield* writeBatch(deps, run, taken, ledger, previousOutcome, false).pipe(
      Effect.catchIf(
        (error) => error._tag === "WarehouseError" && refusedRecord(error),
        () =>
          Effect.andThen(
            Effect.sync(() => ledger.discard()),
            writeBatch(deps, run, taken, ledger, previousOutcome, true)
          )
      ),
      Effect.onExit((exit) => Effect.sync(() => (Exit.isSuccess(exit) ? ledger.settle() : ledger.discard())))
    )
  }).pipe(Effect.uninterruptible)

/** A batch leaves the commit order, telling the batches after it how it ended. */
const settle = (writers: Writers, self: InFlight, exit: Exit.Exit<unknown, unknown>) =>
  Effect.andThen(
    Effect.sync(() => writers.inFlight.splice(writers.inFlight.indexOf(self), 1)),
    Deferred.succeed(
      self.done,
      Exit.isSuccess(exit) ? "committed" : Cause.hasInterruptsOnly(exit.cause) ? "interrupted" : "failed"
    )
  )

/** Where the crawl stands after a stored batch. */
const progressOf = (writers: Writers, latest: Fetched): CrawlProgress => ({
  connection: writers.connection,
  resource: writers.resource,
  page: writers.lastPage,
  totalPages: latest.pagination.total_pages,
  totalCount: latest.pagination.total_count,
  seen: writers.seen,
  requests: writers.run.requests + writers.requests,
  startPage: writers.run.nextPage,
  startSeen: writers.run.seen,
  startRequests: writers.run.requests
})

/** One writer: takes batches in turn and stores them until the fetcher's pages end. */
const writer = (deps: Deps, writers: Writers, options: CrawlOptions) =>
  Effect.gen(function* () {
    while (true) {
      const taken = yield* takeBatch(writers)
      if (taken === undefined) return
      const stored = yield* storeBatch(deps, writers.run, writers.known, taken).pipe(
        Effect.onExit((exit) => settle(writers, taken.self, exit))
      )
      yield* recordOutcomes(writers.resource, { ...writeCounts(stored.counts), undeleted: stored.undeleted })
      writers.counts = addUpsertResults(writers.counts, stored.counts)
      writers.requests += taken.batch.length
      writers.seen += stored.fresh
      writers.lastPage = Math.max(writers.lastPage, ...taken.batch.filter((i) => !i.recheck).map((i) => i.page))
      if (options.onProgress !== undefined) yield* options.onProgress(progressOf(writers, stored.latest))
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

const summaryOf = (writers: Writers, finished: FinishResult, final: RunTotals): CrawlSummary => ({
  connection: writers.connection,
  resource: writers.resource,
  runId: writers.run.id,
  resumed: writers.run.resumed,
  startPage: writers.run.nextPage,
  pages: final.last_page,
  totalCount: final.total_count ?? 0,
  requests: writers.requests,
  runRequests: final.requests,
  seen: final.seen,
  inserted: final.inserted,
  updated: final.updated,
  unchanged: final.unchanged,
  rejected: writers.counts.rejected,
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
      const writers: Writers = {
        connection,
        resource,
        run,
        queue: yield* startFetching(client, resource, run),
        known: new KnownReferences(),
        inFlight: [],
        last: undefined,
        intake: Semaphore.makeUnsafe(1),
        counts: noWrites,
        requests: 0,
        seen: run.seen,
        lastPage: run.nextPage - 1
      }
      const finished = yield* Effect.all(
        Array.from({ length: WRITERS }, () => writer(deps, writers, options)),
        { concurrency: WRITERS, discard: true }
      ).pipe(
        Effect.andThen(finish(deps, run, options)),
        // A failure (not an interruption: that leaves the run to be resumed) marks the run failed.
        Effect.onError((cause) =>
          Cause.hasInterruptsOnly(cause) ? Effect.void : Effect.ignore(deps.runs.fail(run, describeFailure(cause)))
        )
      )
      yield* recordOutcomes(resource, { deleted: finished.deleted })
      yield* recordRefused(resource, finished.refused)
      const summary = summaryOf(writers, finished, yield* deps.runs.totals(run))
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
