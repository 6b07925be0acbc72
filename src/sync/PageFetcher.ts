/**
 * Reading the listings that page by `page` alone (spec §4: annuity contracts, financial accounts,
 * and businesses without `updated_since`): the one list call per resource, always at
 * `per_page=100` and the `bulk` priority, shared by the crawler and the reconciliation; and the
 * crawler's fetcher, which reads a crawl's pages in order into a queue, decoded as they arrive, and
 * reads again the pages behind a drop in the totals. It writes nothing.
 */
import type * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Queue from "effect/Queue"
import type { CrmClientShape, ListPage } from "../crm/CrmClient.ts"
import type { CrmError } from "../crm/CrmError.ts"
import { type Prepared, prepare } from "../warehouse/Warehouse.ts"
import type { CrawlRun } from "./CrawlRuns.ts"

/** The resources whose listing is read page by page from the first. */
export type PagedResource = "businesses" | "annuity_contracts" | "financial_accounts"

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
/** Pages read again at most after one drop in the totals; beyond that the next crawl catches up. */
const MAX_RECHECK_PAGES = 3

/** The record's id as received (an undecodable record may still carry one). */
export const idOf = (raw: unknown): string | undefined => {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) return undefined
  const id = (raw as { readonly id?: unknown }).id
  return typeof id === "string" && id !== "" ? id : typeof id === "number" ? String(id) : undefined
}

/** One page of a resource's listing (spec §4 rule 1, §8: 100 records a page, the fewest requests). */
export const listPage = (
  client: CrmClientShape,
  resource: PagedResource,
  page: number
): Effect.Effect<ListPage<unknown>, CrmError> => {
  const query = { page, per_page: PER_PAGE }
  const options = { priority: "bulk" } as const
  switch (resource) {
    case "businesses":
      return client.listBusinesses(query, options)
    case "annuity_contracts":
      return client.listAnnuityContracts(query, options)
    case "financial_accounts":
      return client.listFinancialAccounts(query, options)
  }
}

/**
 * A page as fetched (in order, or read again after a drop in the totals), its records already
 * decoded for the warehouse: decoding happens as each answer arrives, while the writer waits on
 * the database, rather than in the writer's turn. The received objects are not kept, only the
 * ids they carry: a page waits in the queue long enough for V8 to move what it holds to its old
 * generation (docs/sync.md, "Benchmark").
 */
export interface Fetched {
  /** The page's number. */
  readonly page: number
  readonly pagination: ListPage<unknown>["pagination"]
  /** How many records the page listed, and the ids of those that carry one (decoded or not). */
  readonly size: number
  readonly ids: ReadonlyArray<string>
  readonly prepared: Prepared
  readonly recheck: boolean
}

/** The fetcher's queue: it ends (`Cause.Done`) after the last page, or fails with the CRM's error. */
export type FetchQueue = Queue.Queue<Fetched, CrmError | Cause.Done>

type Fetch = (page: number) => Effect.Effect<Omit<Fetched, "recheck">, CrmError>

/** Reads one page and decodes it for the warehouse. */
const fetchPage =
  (client: CrmClientShape, resource: PagedResource): Fetch =>
  (page) =>
    Effect.map(listPage(client, resource, page), (read) => ({
      page: read.page,
      pagination: read.pagination,
      size: read.data.length,
      ids: read.data.flatMap((raw) => {
        const id = idOf(raw)
        return id === undefined ? [] : [id]
      }),
      prepared: prepare(resource, read.data)
    }))

/**
 * Page drift: pages are offsets into a list that can change while it is read. Records created
 * mid-crawl push later records forward (seen twice: duplicates, counted and harmless); records
 * removed pull later records back, and one that crosses into a page already read would be missed.
 * So each page's `total_count` is compared with the previous page's: when it fell by `d`, the
 * `⌈d / per_page⌉` pages just before (at most `MAX_RECHECK_PAGES`) are read again, which finds the
 * shifted records. What a re-check cannot see (a removal and a creation cancelling out in the
 * totals) costs this crawl one record, which is never deleted for it: deletion needs two clean
 * crawls in a row to miss a record (CrawlRuns), and the next crawl sees it.
 */
const recheckBehind = (
  fetch: Fetch,
  queue: FetchQueue,
  page: number,
  fetched: Omit<Fetched, "recheck">,
  lost: number
) =>
  Effect.gen(function* () {
    const perPage = Math.max(1, fetched.pagination.per_page || PER_PAGE)
    const depth = Math.min(MAX_RECHECK_PAGES, Math.ceil(lost / perPage))
    yield* Effect.logInfo("crawl: the list shrank while being read; re-reading earlier pages").pipe(
      Effect.annotateLogs({ page, lost, pages: depth })
    )
    for (let back = page - 1; back >= Math.max(1, page - depth); back--) {
      yield* Queue.offer(queue, { ...(yield* fetch(back)), recheck: true })
    }
  })

/**
 * Reads pages in order into `queue`, up to `REQUESTS_IN_FLIGHT` at a time once the page count
 * is known (never past the last known page: no request is spent on a page that cannot
 * exist), and re-reads the pages behind a drop in the totals. `total_pages` is followed as each
 * page reports it, and an empty page ends the crawl.
 */
const fetchPages = (fetch: Fetch, run: CrawlRun, queue: FetchQueue) =>
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
          inFlight.push({ page: nextPage, fiber: yield* Effect.forkChild(fetch(nextPage)) })
          nextPage++
        }
        const head = inFlight.shift()!
        const fetched = yield* Fiber.join(head.fiber)
        yield* Queue.offer(queue, { ...fetched, recheck: false })
        const total = fetched.pagination.total_count
        knownPages = fetched.pagination.total_pages
        // Records removed between the previous page's read and this one pulled the ones after
        // them back: those that crossed into pages already read are there now.
        if (previousTotal !== null && total < previousTotal && head.page > 1) {
          yield* recheckBehind(fetch, queue, head.page, fetched, previousTotal - total)
        }
        previousTotal = total
        if (fetched.size === 0 || head.page >= fetched.pagination.total_pages) return
        // The list may have shrunk under requests already sent: they only cost a request.
        if (nextPage > knownPages + 1) yield* stopAll
      }
    }).pipe(Effect.ensuring(stopAll))
  })

/**
 * Starts the fetcher of `run` in a child fiber: its queue holds up to `FETCH_AHEAD` decoded pages
 * and ends after the last page, or fails with the fetcher's error.
 */
export const startFetching = (client: CrmClientShape, resource: PagedResource, run: CrawlRun) =>
  Effect.gen(function* () {
    const queue: FetchQueue = yield* Queue.bounded<Fetched, CrmError | Cause.Done>(FETCH_AHEAD)
    yield* fetchPages(fetchPage(client, resource), run, queue).pipe(
      Effect.onExit((exit) => (exit._tag === "Success" ? Queue.end(queue) : Queue.failCause(queue, exit.cause))),
      Effect.forkChild
    )
    return queue
  })
