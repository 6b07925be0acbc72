/**
 * PageCrawler: reads a whole list endpoint page by page into the warehouse — annuity contracts and
 * financial accounts (spec §4: only `page` and `per_page` exist for them), and businesses when there
 * is no poll cursor yet or a backfill asks. Every page at `per_page=100` (spec §4 rule 1, §8: the
 * fewest requests), at the `bulk` priority of the shared budget.
 *
 * A fetcher reads pages in order (up to ten requests in flight once the page count is known) and
 * decodes each as it arrives, into a small queue while two writers store them, several queued
 * pages to one transaction when they fall behind. Each transaction stores the records (the
 * warehouse's forward-only upsert: an unchanged record is not rewritten), notes their ids as
 * seen (CrawlRuns), undeletes any that had been deleted by absence, and advances
 * `crawl_runs.last_page` — all or nothing, uninterruptibly, and in page order (`storeBatch`), so a
 * SIGTERM lets the pages in hand commit and a crash loses at most pages not yet committed. A
 * restarted crawl resumes after `last_page` without asking for the stored pages again.
 *
 * Page drift: pages are offsets into a list that can change while it is read. Records created
 * mid-crawl push later records forward (seen twice: duplicates, counted and harmless); records
 * removed pull later records back, and one that crosses into a page already read would be missed.
 * Each page's `total_count` is compared with the previous page's: when it fell by `d`, the
 * `⌈d / per_page⌉` pages just before are read again (a re-check), which finds the shifted records.
 * What a re-check cannot see (a removal and a creation cancelling out in the totals) costs this
 * crawl one record, which is never deleted for it: deletion needs two clean crawls in a row to miss
 * a record (CrawlRuns), and the next crawl sees it. `total_pages` is followed as each page reports
 * it, and an empty page ends the crawl.
 *
 * The caller holds the resource's lease (`resourceLease` of JobLease) for the duration.
 */
import { Cause, Clock, Context, DateTime, Deferred, Effect, Exit, Fiber, Layer, Queue, Result, Semaphore } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql/SqlError"
import { AppConfig } from "../config/AppConfig.ts"
import type { CrmClientShape, ListPage } from "../crm/CrmClient.ts"
import type { CrmError } from "../crm/CrmError.ts"
import {
  addUpsertResults,
  combine,
  KnownReferences,
  noWrites,
  type Prepared,
  prepare,
  refusedRecord,
  type Source,
  Warehouse
} from "../warehouse/Warehouse.ts"
import { type CrawlRun, CrawlRuns, CrawlRunsError } from "./CrawlRuns.ts"
import { describeFailure } from "./JobRuns.ts"
import { recordOutcomes, recordRefused } from "./SyncMetrics.ts"
import { type JobFailure, type SyncError, toSyncError } from "./SyncError.ts"

/** The resources read by full-page crawls. */
export const CrawlResources = ["businesses", "annuity_contracts", "financial_accounts"] as const
export type CrawlResource = (typeof CrawlResources)[number]

/** spec §4 rule 1: at most 100 records per page. */
export const PER_PAGE = 100

/**
 * Requests in flight at once. Several hide the round trips (the budget's permit, the request, the
 * CRM's own work) behind each other: from an unthrottled sandbox, 6 read 100,000 records about 10%
 * faster than 3, and 10 about 2% faster than 6 (alternate runs of `test/bench/crawl.ts`, for
 * 10-20 MB more at the peak). Under the CRM's hourly limits the budget paces them anyway (spec §8),
 * and no page past the last known one is asked for.
 */
const REQUESTS_IN_FLIGHT = 10
/**
 * Pages fetched and decoded ahead of the writer (16 was no faster and held more memory). A page
 * waiting in memory is a page not yet stored.
 */
const FETCH_AHEAD = 8
/** Pages at most in one write transaction (only when the writers have fallen behind the fetcher). */
const MAX_BATCH_PAGES = 10
/**
 * Write transactions at once. While one stores its records, the other finishes its bookkeeping
 * and commits: PostgreSQL works on one batch while this process waits on the other's round trips.
 * From an unthrottled sandbox two wrote 100,000 records about 10% faster than one
 * (`test/bench/crawl.ts`). Commits stay in page order (see `storeBatch`).
 */
const WRITERS = 2
/** The longest a batch waits for an earlier one to commit (see `committed`). */
const BATCH_WAIT = "60 seconds"
/** Pages read again at most after one drop in the totals; beyond that the next crawl catches up. */
const MAX_RECHECK_PAGES = 3

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
 * A page as fetched (in order, or read again after a drop in the totals), its records already
 * decoded for the warehouse: decoding happens as each answer arrives, while the writer waits on
 * the database, rather than in the writer's turn. The received objects are not kept, only the
 * ids they carry: a page waits in the queue long enough for V8 to move what it holds to its old
 * generation (docs/sync.md, "Benchmark").
 */
interface Fetched {
  /** The page's number. */
  readonly page: number
  readonly pagination: ListPage<unknown>["pagination"]
  /** How many records the page listed, and the ids of those that carry one (decoded or not). */
  readonly size: number
  readonly ids: ReadonlyArray<string>
  readonly prepared: Prepared
  readonly recheck: boolean
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

const listFor = (client: CrmClientShape, resource: CrawlResource) => {
  const options = { priority: "bulk" } as const
  const list = (page: number): Effect.Effect<ListPage<unknown>, CrmError> => {
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
  return (page: number): Effect.Effect<Omit<Fetched, "recheck">, CrmError> =>
    Effect.map(list(page), (read) => ({
      page: read.page,
      pagination: read.pagination,
      size: read.data.length,
      ids: read.data.flatMap((raw) => {
        const id = idOf(raw)
        return id === undefined ? [] : [id]
      }),
      prepared: prepare(resource, read.data)
    }))
}

/** The record's id as received (an undecodable record may still carry one). */
export const idOf = (raw: unknown): string | undefined => {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) return undefined
  const id = (raw as { readonly id?: unknown }).id
  return typeof id === "string" && id !== "" ? id : typeof id === "number" ? String(id) : undefined
}

/**
 * Reads pages in order into `queue`, up to `REQUESTS_IN_FLIGHT` at a time once the page count
 * is known (never past the last known page: no request is spent on a page that cannot
 * exist), and re-reads the pages behind a drop in the totals.
 */
const fetchPages = (
  list: (page: number) => Effect.Effect<Omit<Fetched, "recheck">, CrmError>,
  run: CrawlRun,
  queue: Queue.Queue<Fetched, CrmError | Cause.Done>
) =>
  Effect.gen(function* () {
    const inFlight: Array<{
      readonly page: number
      readonly fiber: Fiber.Fiber<Omit<Fetched, "recheck">, CrmError>
    }> = []
    let nextPage = run.nextPage
    let knownPages = run.totalPages ?? undefined
    let previousTotal = run.totalCount
    const stopAll = Effect.suspend(() => Fiber.interruptAll(inFlight.splice(0).map((item) => item.fiber)))
    return yield* Effect.gen(function* () {
      while (true) {
        // Until a page has told how many there are, one request at a time.
        const room = () =>
          inFlight.length === 0 ||
          (inFlight.length < REQUESTS_IN_FLIGHT && knownPages !== undefined && nextPage <= knownPages)
        while (room()) {
          inFlight.push({ page: nextPage, fiber: yield* Effect.forkChild(list(nextPage)) })
          nextPage++
        }
        const head = inFlight.shift()!
        const fetched = yield* Fiber.join(head.fiber)
        yield* Queue.offer(queue, { ...fetched, recheck: false })
        const total = fetched.pagination.total_count
        knownPages = fetched.pagination.total_pages
        if (previousTotal !== null && total < previousTotal && head.page > 1) {
          // Records removed between the previous page's read and this one pulled the ones
          // after them back by `lost` places: those that crossed into pages already read
          // are there now.
          const perPage = Math.max(1, fetched.pagination.per_page || PER_PAGE)
          const depth = Math.min(MAX_RECHECK_PAGES, Math.ceil((previousTotal - total) / perPage))
          yield* Effect.logInfo("crawl: the list shrank while being read; re-reading earlier pages").pipe(
            Effect.annotateLogs({ page: head.page, lost: previousTotal - total, pages: depth })
          )
          for (let back = head.page - 1; back >= Math.max(1, head.page - depth); back--) {
            yield* Queue.offer(queue, { ...(yield* list(back)), recheck: true })
          }
        }
        previousTotal = total
        if (fetched.size === 0 || head.page >= fetched.pagination.total_pages) return
        // The list may have shrunk under requests already sent: they only cost a request.
        if (nextPage > knownPages + 1) yield* stopAll
      }
    }).pipe(Effect.ensuring(stopAll))
  })

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
      const sql = yield* SqlClient
      const warehouse = yield* Warehouse
      const runs = yield* CrawlRuns
      const config = yield* AppConfig
      const threshold = config.sync.deletion_threshold

      const notStored = new CrawlRunsError({
        operation: "PageCrawler.store",
        message: "an earlier batch of this crawl was not stored (it failed, or took over a minute); nor is this one",
        cause: null
      })

      /**
       * Goes on only after a commit of the batch in `outcome`: a batch before this one that was not
       * stored stops this one too — as an error, or as an interruption if it was interrupted.
       */
      const requireCommitted = (outcome: BatchOutcome) =>
        outcome === "committed" ? Effect.void : outcome === "interrupted" ? Effect.interrupt : Effect.fail(notStored)

      /**
       * Stores a batch of fetched pages in one transaction; returns what it did. Two of these run
       * at once (`WRITERS`), and they must neither commit out of page order (a crash between the
       * two commits would leave `last_page` past pages never stored) nor wait on each other's row
       * locks in both directions (a deadlock PostgreSQL cannot see, half of it being a wait in this
       * process). So a batch
       * - first waits for any earlier batch still in flight that holds one of its records (drift
       *   duplicates, rare), so that it never locks a row an earlier batch will want;
       * - writes its records, then waits for the batch before it to commit before it merges
       *   references, notes the ids seen and moves `last_page` (rows that batch also touches);
       * - rolls back if that batch did not commit: the crawl stops there, resumable. It fails if
       *   that batch failed, and ends as interrupted if that batch was (a shutdown caught it
       *   before it began): an interrupted crawl is not a failed one.
       * An earlier batch never waits on a later one: lock waits only ever point backwards.
       */
      const storeBatch = (
        run: CrawlRun,
        batch: ReadonlyArray<Fetched>,
        ids: { readonly all: ReadonlyArray<string>; readonly unique: number },
        known: KnownReferences,
        order: { readonly overlapping: ReadonlyArray<InFlight>; readonly previous: InFlight | undefined }
      ) =>
        Effect.gen(function* () {
          const ledger = known.open()
          // Asked twice (before references, and before the bookkeeping), waited for once.
          const previousOutcome =
            order.previous === undefined
              ? Effect.succeed<BatchOutcome>("committed")
              : yield* Effect.cached(outcomeOf(order.previous))
          /**
           * One try. The first takes no savepoint per chunk (`isolate: false`); if PostgreSQL refuses
           * a record it rolls back, and the second sets the refused records aside one by one.
           */
          const attempt = (isolate: boolean) =>
            sql.withTransaction(
              Effect.gen(function* () {
                for (const earlier of order.overlapping) {
                  yield* requireCommitted(yield* outcomeOf(earlier))
                }
                const prepared = combine(
                  run.resource,
                  batch.map((item) => item.prepared)
                )
                const counts = yield* warehouse.write(prepared, {
                  source: run.source,
                  known: ledger,
                  beforeReferences: Effect.asVoid(previousOutcome),
                  isolate
                })
                yield* requireCommitted(yield* previousOutcome)
                const inOrder = batch.filter((item) => !item.recheck)
                const latest = (inOrder.length > 0 ? inOrder : batch).at(-1)!
                const { undeleted } = yield* runs.recordBatch(run, {
                  lastPage: inOrder.length > 0 ? Math.max(...inOrder.map((item) => item.page)) : 0,
                  totalPages: latest.pagination.total_pages,
                  totalCount: latest.pagination.total_count,
                  ids: ids.all,
                  unique: ids.unique,
                  counts,
                  requests: batch.length,
                  rechecks: batch.length - inOrder.length
                })
                return { counts, latest, fresh: ids.unique, undeleted }
              })
            )
          return yield* attempt(false).pipe(
            Effect.catchIf(
              (error) => error._tag === "WarehouseError" && refusedRecord(error),
              () =>
                Effect.andThen(
                  Effect.sync(() => ledger.discard()),
                  attempt(true)
                )
            ),
            Effect.onExit((exit) => Effect.sync(() => (Exit.isSuccess(exit) ? ledger.settle() : ledger.discard())))
          )
        }).pipe(Effect.uninterruptible)

      const finish = (run: CrawlRun, options: CrawlOptions) =>
        sql
          .withTransaction(
            Effect.gen(function* () {
              const now = yield* DateTime.now
              const result = yield* runs.finishClean(run, {
                threshold,
                deleteRecords: (ids) =>
                  Effect.map(
                    warehouse.markDeleted(run.resource, ids, now, { source: run.source }),
                    (deleted) => deleted.deleted
                  )
              })
              if (options.onComplete !== undefined) yield* options.onComplete(run)
              return result
            })
          )
          .pipe(Effect.uninterruptible)

      const crawl = Effect.fn("PageCrawler.crawl")(
        function* (
          client: CrmClientShape,
          resource: CrawlResource,
          options: CrawlOptions
        ): Effect.fn.Return<CrawlSummary, JobFailure> {
          const connection = client.connection.name
          yield* Effect.annotateCurrentSpan({ connection, resource, source: options.source })
          const run = yield* runs.open(connection, resource, options.source)
          const startedAt = yield* Clock.currentTimeMillis
          if (run.resumed) {
            yield* Effect.logInfo("crawl: resuming").pipe(Effect.annotateLogs({ run: run.id, page: run.nextPage }))
          }
          const queue = yield* Queue.bounded<Fetched, CrmError | Cause.Done>(FETCH_AHEAD)
          yield* fetchPages(listFor(client, resource), run, queue).pipe(
            Effect.onExit((exit) => (exit._tag === "Success" ? Queue.end(queue) : Queue.failCause(queue, exit.cause))),
            Effect.forkChild
          )

          // A failure (not an interruption: that leaves the run to be resumed) marks the run failed.
          const failRun = <E>(cause: Cause.Cause<E>) =>
            Cause.hasInterruptsOnly(cause) ? Effect.void : Effect.ignore(runs.fail(run, describeFailure(cause)))

          // Households and other references the crawl's records name, once merged.
          const known = new KnownReferences()
          let counts = noWrites
          let requests = 0
          let seen = run.seen
          let lastPage = run.nextPage - 1
          /** Batches handed to a writer and not yet committed or rolled back, in commit order. */
          const inFlight: Array<InFlight> = []
          let last: InFlight | undefined
          // Taking a batch and its place in commit order happen together.
          const intake = Semaphore.makeUnsafe(1)
          const take = intake.withPermits(1)(
            Effect.gen(function* () {
              const taken = yield* Effect.result(Queue.takeBetween(queue, 1, MAX_BATCH_PAGES))
              if (Result.isFailure(taken)) {
                if (Cause.isDone(taken.failure)) return undefined
                return yield* Effect.fail(taken.failure)
              }
              const ids = taken.success.flatMap((item) => item.ids)
              const self: InFlight = { ids: new Set(ids), done: Deferred.makeUnsafe<BatchOutcome>() }
              const overlapping = inFlight.filter((other) => ids.some((id) => other.ids.has(id)))
              const previous = last
              inFlight.push(self)
              last = self
              return { batch: taken.success, ids, self, order: { overlapping, previous } }
            })
          )
          const writer = Effect.gen(function* () {
            while (true) {
              const taken = yield* take
              if (taken === undefined) return
              const { batch, ids, self, order } = taken
              const stored = yield* storeBatch(run, batch, { all: ids, unique: self.ids.size }, known, order).pipe(
                Effect.onExit((exit) =>
                  Effect.andThen(
                    Effect.sync(() => inFlight.splice(inFlight.indexOf(self), 1)),
                    Deferred.succeed(
                      self.done,
                      Exit.isSuccess(exit)
                        ? "committed"
                        : Cause.hasInterruptsOnly(exit.cause)
                          ? "interrupted"
                          : "failed"
                    )
                  )
                )
              )
              yield* recordOutcomes(resource, {
                inserted: stored.counts.inserted,
                updated: stored.counts.updated,
                unchanged: stored.counts.unchanged + stored.counts.skipped,
                rejected: stored.counts.rejected,
                undeleted: stored.undeleted
              })
              counts = addUpsertResults(counts, stored.counts)
              requests += batch.length
              seen += stored.fresh
              lastPage = Math.max(lastPage, ...batch.filter((i) => !i.recheck).map((i) => i.page))
              if (options.onProgress !== undefined) {
                yield* options.onProgress({
                  connection,
                  resource,
                  page: lastPage,
                  totalPages: stored.latest.pagination.total_pages,
                  totalCount: stored.latest.pagination.total_count,
                  seen,
                  requests: run.requests + requests,
                  startPage: run.nextPage,
                  startSeen: run.seen,
                  startRequests: run.requests
                })
              }
            }
          })
          const body = Effect.gen(function* () {
            yield* Effect.all(
              Array.from({ length: WRITERS }, () => writer),
              { concurrency: WRITERS, discard: true }
            )
            return yield* finish(run, options)
          }).pipe(Effect.onError(failRun))
          const finished = yield* body
          yield* recordOutcomes(resource, { deleted: finished.deleted })
          yield* recordRefused(resource, finished.refused)
          const final = yield* runs.totals(run)
          const elapsed = (yield* Clock.currentTimeMillis) - startedAt
          const summary: CrawlSummary = {
            connection,
            resource,
            runId: run.id,
            resumed: run.resumed,
            startPage: run.nextPage,
            pages: final.last_page,
            totalCount: final.total_count ?? 0,
            requests,
            runRequests: final.requests,
            seen: final.seen,
            inserted: final.inserted,
            updated: final.updated,
            unchanged: final.unchanged,
            rejected: counts.rejected,
            duplicates: final.duplicates,
            rechecks: final.rechecks,
            undeleted: final.undeleted,
            absent: finished.absent,
            deleted: finished.deleted,
            refused: finished.refused,
            note: finished.note
          }
          const log = finished.refused > 0 ? Effect.logWarning : Effect.logInfo
          yield* log("crawl: complete").pipe(
            Effect.annotateLogs({
              run: run.id,
              pages: summary.pages,
              requests,
              seen: summary.seen,
              inserted: summary.inserted,
              updated: summary.updated,
              unchanged: summary.unchanged,
              deleted: summary.deleted,
              seconds: Math.round(elapsed / 100) / 10,
              ...(finished.note === null ? {} : { note: finished.note })
            })
          )
          return summary
        },
        (effect, client, resource) =>
          Effect.mapError(effect, toSyncError("crawl", { connection: client.connection.name, resource }))
      )

      return PageCrawler.of({ crawl })
    })
  )
}
