/**
 * BusinessPoller: keeps `crm.businesses` current with `GET /v1/businesses?updated_since=…` (spec §4
 * rule 4), every page at `per_page=100`, at the `incremental` priority of the shared budget. The
 * cursor (Cursors) is the latest `updated_at` the poll has safely seen: it moves only at the end of
 * a pass that read every page, in the transaction that stores the last page, and never past a
 * record that drift under the pass may have hidden (PollDrift). With no cursor yet, the first run
 * crawls every business (PageCrawler: resumable page by page, since that first listing can be
 * long) and leaves the cursor at the crawl's start.
 */
import * as Context from "effect/Context"
import * as DateTime from "effect/DateTime"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { SqlClient } from "effect/sql/SqlClient"
import { AppConfig } from "../config/AppConfig.ts"
import type { CrmClientShape, ListPage } from "../crm/CrmClient.ts"
import { noWrites, Warehouse } from "../warehouse/Warehouse.ts"
import { Cursors } from "./Cursors.ts"
import { businessCrawlLease, JobLease } from "./JobLease.ts"
import { crawlCounts, type CrawlSummary, PageCrawler } from "./PageCrawler.ts"
import { PER_PAGE } from "./PageFetcher.ts"
import { PollDrift } from "./PollDrift.ts"
import { addWriteCounts, type SyncCounts, writeCounts } from "./SyncCounts.ts"
import { type SyncError, toSyncError } from "./SyncError.ts"
import { recordOutcomes } from "./SyncMetrics.ts"

export const BUSINESSES = "businesses"

export interface PollSummary extends SyncCounts {
  readonly connection: string
  /** `poll` for an incremental pass, `crawl` for the first run (no cursor yet). */
  readonly mode: "poll" | "crawl"
  /** The `updated_since` asked for (none for a crawl). */
  readonly since: string | null
  /** Whether the listing drifted under the pass (the cursor was held back). */
  readonly drift: boolean
  /** The cursor after the pass. */
  readonly cursor: string | null
  readonly crawl?: CrawlSummary
}

/** What a poll works with: the layer's services and `sync.poll_lookback`. */
interface Deps {
  readonly sql: SqlClient
  readonly warehouse: Warehouse["Service"]
  readonly cursors: Cursors["Service"]
  readonly crawler: PageCrawler["Service"]
  readonly leases: JobLease["Service"]
  readonly lookback: Duration.Duration
}

/** The stored cursor, as the summary shows it. */
const cursorIso = (deps: Deps, connection: string) =>
  Effect.map(deps.cursors.get(connection, BUSINESSES), Option.match({ onNone: () => null, onSome: DateTime.formatIso }))

/** First run: crawl everything, then poll from the crawl's start. */
const initialCrawl = (deps: Deps, client: CrmClientShape) =>
  Effect.gen(function* () {
    const connection = client.connection.name
    yield* Effect.logInfo("poll: no cursor yet; crawling every business first").pipe(
      Effect.annotateLogs({ connection })
    )
    // The scheduled business crawl may be reading the same listing: one crawl run at a time.
    const summary = yield* deps.leases.run(
      businessCrawlLease(connection),
      deps.crawler.crawl(client, BUSINESSES, {
        source: "crawl",
        // Changes made while the crawl ran have updated_at after its start (give or take the
        // clock skew the lookback covers): polling from there misses none of them.
        onComplete: (run) =>
          deps.cursors.advance(connection, BUSINESSES, run.startedAt, { initial_crawl: run.id, pages: run.totalPages })
      })
    )
    return {
      connection,
      mode: "crawl",
      since: null,
      ...crawlCounts(summary),
      drift: summary.duplicates > 0 || summary.rechecks > 0,
      cursor: yield* cursorIso(deps, connection),
      crawl: summary
    } satisfies PollSummary
  })

/**
 * Stores one page of a pass; with the last page, moves the cursor in the same transaction (to
 * where `drift` allows). A pass cut short leaves the cursor where it was, and the next one asks
 * again.
 */
const storePage = (
  deps: Deps,
  connection: string,
  page: ListPage<unknown>,
  last: { readonly drift: PollDrift; readonly detail: Record<string, unknown> } | undefined
) =>
  deps.sql
    .withTransaction(
      Effect.gen(function* () {
        const written = yield* deps.warehouse.upsert(BUSINESSES, page.data, { source: "poll" })
        if (last !== undefined) {
          yield* deps.cursors.advance(connection, BUSINESSES, last.drift.target?.iso, {
            ...last.detail,
            drift: last.drift.drifted,
            ordered: last.drift.ordered
          })
        }
        return written
      })
    )
    .pipe(Effect.uninterruptible)

/**
 * One incremental pass: every page of `updated_since = cursor - sync.poll_lookback`. The lookback
 * asks again for records sharing the cursor's timestamp, for a CRM clock a little behind ours, and
 * for records whose change committed after a later one was already visible (duplicates are
 * harmless: the upsert is forward-only and skips identical snapshots).
 */
const pass = (deps: Deps, client: CrmClientShape, cursor: DateTime.Utc) =>
  Effect.gen(function* () {
    const connection = client.connection.name
    const since = DateTime.subtract(cursor, { milliseconds: Duration.toMillis(deps.lookback) })
    const sinceIso = DateTime.formatIso(since)
    const drift = new PollDrift()
    let page = 1
    let requests = 0
    let records = 0
    let counts = writeCounts(noWrites)
    while (true) {
      const result = yield* client.listBusinesses(
        { updated_since: since, page, per_page: PER_PAGE },
        { priority: "incremental" }
      )
      requests++
      drift.see(page, result.data, result.pagination.total_count)
      records += result.data.length
      const last = result.data.length === 0 || page >= result.pagination.total_pages
      const stored = yield* storePage(
        deps,
        connection,
        result,
        last ? { drift, detail: { since: sinceIso, pages: page, records } } : undefined
      )
      yield* recordOutcomes(BUSINESSES, writeCounts(stored))
      counts = addWriteCounts(counts, writeCounts(stored))
      if (last) break
      page++
    }
    if (drift.drifted) {
      yield* Effect.logInfo("poll: the listing drifted while being read; the cursor is held back").pipe(
        Effect.annotateLogs({ connection, held_at: drift.heldAt, ordered: drift.ordered })
      )
    }
    return {
      connection,
      mode: "poll",
      since: sinceIso,
      pages: page,
      requests,
      records,
      ...counts,
      drift: drift.drifted,
      cursor: yield* cursorIso(deps, connection)
    } satisfies PollSummary
  })

const poll = (deps: Deps) =>
  Effect.fn("BusinessPoller.poll")(
    function* (client: CrmClientShape) {
      const cursor = yield* deps.cursors.get(client.connection.name, BUSINESSES)
      return yield* Option.match(cursor, {
        onNone: () => initialCrawl(deps, client),
        onSome: (at) => pass(deps, client, at)
      })
    },
    (effect, client) =>
      Effect.mapError(effect, (error) =>
        toSyncError("poll", { connection: client.connection.name, resource: BUSINESSES })(error)
      )
  )

export class BusinessPoller extends Context.Service<
  BusinessPoller,
  {
    /** One poll of one connection: every page of the changes since the cursor (or the first crawl). */
    readonly poll: (client: CrmClientShape) => Effect.Effect<PollSummary, SyncError>
  }
>()("crm-sync/sync/BusinessPoller") {
  static readonly layer = Layer.effect(
    BusinessPoller,
    Effect.gen(function* () {
      const deps: Deps = {
        sql: yield* SqlClient,
        warehouse: yield* Warehouse,
        cursors: yield* Cursors,
        crawler: yield* PageCrawler,
        leases: yield* JobLease,
        lookback: (yield* AppConfig).sync.poll_lookback
      }
      return BusinessPoller.of({ poll: poll(deps) })
    })
  )
}
