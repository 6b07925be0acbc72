/**
 * BusinessPoller: keeps `crm.businesses` current with `GET /v1/businesses?updated_since=…` (spec §4
 * rule 4), every page at `per_page=100`, at the `incremental` priority of the shared budget.
 *
 * The cursor (Cursors) is the latest `updated_at` the poll has safely seen; each poll asks from
 * `cursor - sync.poll_lookback`, so records sharing the cursor's timestamp, a CRM clock a little
 * behind ours, and records whose change committed after a later one was already visible are asked
 * for again (duplicates are harmless: the upsert is forward-only and skips identical snapshots).
 * The cursor moves only at the end of a pass that read every page, in the transaction that stores
 * the last page: a pass cut short leaves it where it was, and the next one asks again.
 *
 * Page drift. The listing is ordered by `updated_at` (the sandbox's order; the spec does not show
 * one), so a record updated while the pages are read jumps to the end — it is read again there —
 * and every record after its old place moves back one: the record at the page boundary being read
 * at that moment is skipped. Its `updated_at` is at least the latest seen on the page where the
 * moved record was first read, so when a pass sees a record twice, or the total shrink between two
 * pages, the cursor advances only to the latest `updated_at` read before that point, and the next
 * poll reads the skipped record. (If a listing ever comes back out of `updated_at` order, drift
 * holds the cursor where it was.)
 *
 * With no cursor yet, the first run crawls every business (PageCrawler: resumable page by page,
 * since that first listing can be long) and leaves the cursor at the crawl's start.
 */
import { Context, DateTime, Duration, Effect, Layer, Option } from "effect"
import { type UpdatedAt, updatedAtOf } from "./UpdatedAt.ts"
import { SqlClient } from "effect/sql/SqlClient"
import { AppConfig } from "../config/AppConfig.ts"
import type { CrmClientShape } from "../crm/CrmClient.ts"
import { Warehouse } from "../warehouse/Warehouse.ts"
import { Cursors } from "./Cursors.ts"
import { businessCrawlLease, JobLease } from "./JobLease.ts"
import { type CrawlSummary, idOf, PageCrawler, PER_PAGE } from "./PageCrawler.ts"
import { type SyncError, toSyncError } from "./SyncError.ts"
import { recordOutcomes } from "./SyncMetrics.ts"

export const BUSINESSES = "businesses"

export interface PollSummary {
  readonly connection: string
  /** `poll` for an incremental pass, `crawl` for the first run (no cursor yet). */
  readonly mode: "poll" | "crawl"
  /** The `updated_since` asked for (none for a crawl). */
  readonly since: string | null
  readonly pages: number
  readonly requests: number
  readonly records: number
  readonly inserted: number
  readonly updated: number
  readonly unchanged: number
  readonly rejected: number
  /** Whether the listing drifted under the pass (the cursor was held back). */
  readonly drift: boolean
  /** The cursor after the pass. */
  readonly cursor: string | null
  readonly crawl?: CrawlSummary
}

/** The latest of two timestamps (undefined: none yet). */
const later = <T extends { readonly ms: number }>(a: T | undefined, b: T | undefined) =>
  a === undefined ? b : b === undefined ? a : b.ms > a.ms ? b : a

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
      const sql = yield* SqlClient
      const warehouse = yield* Warehouse
      const cursors = yield* Cursors
      const crawler = yield* PageCrawler
      const leases = yield* JobLease
      const config = yield* AppConfig
      const lookback = config.sync.poll_lookback

      /** First run: crawl everything, then poll from the crawl's start. */
      const initialCrawl = (client: CrmClientShape) =>
        Effect.gen(function* () {
          const connection = client.connection.name
          yield* Effect.logInfo("poll: no cursor yet; crawling every business first").pipe(
            Effect.annotateLogs({ connection })
          )
          // The scheduled business crawl may be reading the same listing: one crawl run at a time.
          const summary = yield* leases.run(
            businessCrawlLease(connection),
            crawler.crawl(client, BUSINESSES, {
              source: "crawl",
              // Changes made while the crawl ran have updated_at after its start (give or take the
              // clock skew the lookback covers): polling from there misses none of them.
              onComplete: (run) =>
                cursors.advance(connection, BUSINESSES, run.startedAt, { initial_crawl: run.id, pages: run.totalPages })
            })
          )
          const cursor = yield* cursors.get(connection, BUSINESSES)
          return {
            connection,
            mode: "crawl",
            since: null,
            pages: summary.pages,
            requests: summary.requests,
            records: summary.seen,
            inserted: summary.inserted,
            updated: summary.updated,
            unchanged: summary.unchanged,
            rejected: summary.rejected,
            drift: summary.duplicates > 0 || summary.rechecks > 0,
            cursor: Option.match(cursor, { onNone: () => null, onSome: DateTime.formatIso }),
            crawl: summary
          } satisfies PollSummary
        })

      const pass = (client: CrmClientShape, cursor: DateTime.Utc) =>
        Effect.gen(function* () {
          const connection = client.connection.name
          const since = DateTime.subtract(cursor, { milliseconds: Duration.toMillis(lookback) })
          const sinceIso = DateTime.formatIso(since)
          /** Page on which each id was first read in this pass. */
          const firstSeen = new Map<string, number>()
          /** Latest updated_at read up to and including each page. */
          const latestUpTo: Array<UpdatedAt | undefined> = []
          let latest: UpdatedAt | undefined
          let previousMs = Number.NEGATIVE_INFINITY
          let ordered = true
          /** Set when drift was seen: the furthest the cursor may go (undefined inside: not at all). */
          let heldAt: { value: UpdatedAt | undefined } | undefined
          const hold = (value: UpdatedAt | undefined) => {
            if (
              heldAt === undefined ||
              (heldAt.value !== undefined && (value === undefined || value.ms < heldAt.value.ms))
            )
              heldAt = { value }
          }
          let previousTotal: number | undefined
          let page = 1
          let requests = 0
          let records = 0
          const counts = { inserted: 0, updated: 0, unchanged: 0, rejected: 0 }
          while (true) {
            const result = yield* client.listBusinesses(
              { updated_since: since, page, per_page: PER_PAGE },
              { priority: "incremental" }
            )
            requests++
            for (const raw of result.data) {
              const id = idOf(raw)
              if (id !== undefined) {
                const first = firstSeen.get(id)
                // Read twice: it was updated after its first read and moved to the end, pulling
                // the records behind it back one place (see the header).
                if (first !== undefined && first < page) hold(ordered ? latestUpTo[first] : undefined)
                else firstSeen.set(id, page)
              }
              const updatedAt = updatedAtOf(raw)
              if (updatedAt !== undefined) {
                if (updatedAt.ms < previousMs) ordered = false
                previousMs = updatedAt.ms
                latest = later(latest, updatedAt)
              }
            }
            const total = result.pagination.total_count
            // Records left the listing between two reads: those behind them moved back a place.
            if (previousTotal !== undefined && total < previousTotal) hold(ordered ? latestUpTo[page - 1] : undefined)
            latestUpTo[page] = latest
            previousTotal = total
            records += result.data.length
            const last = result.data.length === 0 || page >= result.pagination.total_pages
            const stored = yield* sql
              .withTransaction(
                Effect.gen(function* () {
                  const written = yield* warehouse.upsert(BUSINESSES, result.data, { source: "poll" })
                  if (last) {
                    // Out of updated_at order, the place of a drift says nothing: hold where it was.
                    const target = heldAt === undefined ? latest : ordered ? heldAt.value : undefined
                    yield* cursors.advance(connection, BUSINESSES, target?.iso, {
                      since: sinceIso,
                      pages: page,
                      records,
                      drift: heldAt !== undefined,
                      ordered
                    })
                  }
                  return written
                })
              )
              .pipe(Effect.uninterruptible)
            yield* recordOutcomes(BUSINESSES, {
              inserted: stored.inserted,
              updated: stored.updated,
              unchanged: stored.unchanged + stored.skipped,
              rejected: stored.rejected
            })
            counts.inserted += stored.inserted
            counts.updated += stored.updated
            counts.unchanged += stored.unchanged + stored.skipped
            counts.rejected += stored.rejected
            if (last) break
            page++
          }
          if (heldAt !== undefined) {
            yield* Effect.logInfo("poll: the listing drifted while being read; the cursor is held back").pipe(
              Effect.annotateLogs({ connection, held_at: heldAt.value?.iso ?? "(unchanged)", ordered })
            )
          }
          const after = yield* cursors.get(connection, BUSINESSES)
          return {
            connection,
            mode: "poll",
            since: sinceIso,
            pages: page,
            requests,
            records,
            ...counts,
            drift: heldAt !== undefined,
            cursor: Option.match(after, { onNone: () => null, onSome: DateTime.formatIso })
          } satisfies PollSummary
        })

      const poll = Effect.fn("BusinessPoller.poll")(
        function* (client: CrmClientShape) {
          const cursor = yield* cursors.get(client.connection.name, BUSINESSES)
          return yield* Option.match(cursor, {
            onNone: () => initialCrawl(client),
            onSome: (at) => pass(client, at)
          })
        },
        (effect, client) =>
          Effect.mapError(effect, (error) =>
            toSyncError("poll", { connection: client.connection.name, resource: BUSINESSES })(error)
          )
      )

      return BusinessPoller.of({ poll })
    })
  )
}
