/**
 * CrawlRuns: the bookkeeping of full-page crawls — `crm_sync.crawl_runs` (one row per crawl: the
 * pages stored so far, the totals the CRM reported, what became of the records) and
 * `crm_sync.crawl_presence` (which crawl last saw each record, and how many clean crawls in a row
 * have missed it). PageCrawler drives it; every write here runs inside the transaction of the page
 * (or the final step) it describes, so the bookkeeping can never disagree with the warehouse.
 *
 * Deletion by absence (spec §1: the v1 API has no DELETE and lists deleted records nowhere, so a
 * record that disappears from the listing is the only sign): a clean crawl — every page read
 * without error — adds one miss to each record it did not see; a record missed by two clean crawls
 * in a row is marked deleted. A sighting in any crawl, clean or not, clears the misses, so a
 * record shifted across a page boundary by drift in one crawl is simply seen by the next. A crawl
 * that fails or is cut short counts no misses and deletes nothing. When more than the configured
 * share of the tracked records would go at once, nothing is deleted and the run says so in `note`.
 */
import { Context, DateTime, Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql/SqlError"
import type { Resource, Source, UpsertResult, WarehouseError } from "../warehouse/Warehouse.ts"

/** The crawl a PageCrawler is working on: fresh, or resumed where a restart cut it short. */
export interface CrawlRun {
  readonly id: number
  readonly connection: string
  readonly resource: Resource
  readonly source: Source
  /** The next page to read: 1 for a fresh crawl, last stored page + 1 for a resumed one. */
  readonly nextPage: number
  /** `total_count` of the last page stored (none yet for a fresh crawl): the drift baseline. */
  readonly totalCount: number | null
  readonly totalPages: number | null
  readonly resumed: boolean
  /** When the crawl began (the database's clock): the poll cursor a business crawl leaves behind. */
  readonly startedAt: DateTime.Utc
  /** Unique records seen and requests sent so far (a resumed crawl carries them over). */
  readonly seen: number
  readonly requests: number
}

/** What one batch of pages did, as recorded on the run. */
export interface PageBatch {
  /** The highest page of the batch read in order (re-checks of earlier pages do not count). */
  readonly lastPage: number
  readonly totalPages: number
  readonly totalCount: number
  /** Ids of every record received, in order, duplicates included. */
  readonly ids: ReadonlyArray<string>
  readonly counts: UpsertResult
  readonly requests: number
  readonly rechecks: number
}

export interface BatchResult {
  /** Records seen for the first time in this crawl. */
  readonly fresh: number
  /** Records already seen earlier in this crawl (the listing shifted under it). */
  readonly duplicates: number
  /** Ids never tracked by this connection's crawls before (candidates for undelete). */
  readonly newlyTracked: ReadonlyArray<string>
}

export interface FinishResult {
  /** Tracked records this crawl did not see. */
  readonly absent: number
  /** Records marked deleted now (absent from two clean crawls in a row). */
  readonly deleted: number
  /** Deletions held back because too many records would vanish at once. */
  readonly refused: number
  readonly note: string | null
}

const RunRow = Schema.Struct({
  id: Schema.Number,
  last_page: Schema.Number,
  total_pages: Schema.NullOr(Schema.Number),
  total_count: Schema.NullOr(Schema.Number),
  started_ms: Schema.Number,
  seen: Schema.Number,
  requests: Schema.Number
})
const decodeRunRows = Schema.decodeUnknownEffect(Schema.Array(RunRow))

const toRun = (
  row: typeof RunRow.Type,
  connection: string,
  resource: Resource,
  source: Source,
  resumed: boolean
): CrawlRun => ({
  id: row.id,
  connection,
  resource,
  source,
  nextPage: row.last_page + 1,
  totalCount: row.total_count,
  totalPages: row.total_pages,
  resumed,
  // Rounded down: as a poll cursor, a moment early only asks for a little more.
  startedAt: DateTime.makeUnsafe(Math.floor(row.started_ms)),
  seen: row.seen,
  requests: row.requests
})

/** A record is deleted once this many clean crawls in a row have missed it. */
export const MISSES_TO_DELETE = 2

export class CrawlRunsError extends Schema.TaggedError<CrawlRunsError>()("CrawlRunsError", {
  operation: Schema.String,
  message: Schema.String,
  cause: Schema.Defect()
}) {}

const failed = (operation: string) => (cause: SqlError | Schema.SchemaError) =>
  new CrawlRunsError({ operation, message: `${operation}: ${cause.message}`, cause })

const percent = (share: number) => `${Math.round(share * 1000) / 10}%`

export class CrawlRuns extends Context.Service<
  CrawlRuns,
  {
    /**
     * The unfinished run of this connection, resource and source (`running`, or `failed` part way)
     * to resume, or a new one. The caller must hold the resource's lease, so an unfinished run
     * found here has no other owner: its process died or gave up.
     */
    readonly open: (connection: string, resource: Resource, source: Source) => Effect.Effect<CrawlRun, CrawlRunsError>
    /**
     * Records one batch of stored pages; run it in the transaction that stored them. It also turns
     * off `synchronous_commit` for that transaction: a stored page can always be read again, and
     * its bookkeeping commits with it, so the commit need not wait for the WAL flush. A database
     * crash then loses at most the last pages and their `last_page` together, and the crawl reads
     * them again.
     */
    readonly recordBatch: (run: CrawlRun, batch: PageBatch) => Effect.Effect<BatchResult, CrawlRunsError>
    /** Records undeletions counted after `recordBatch` (same transaction). */
    readonly recordUndeleted: (run: CrawlRun, undeleted: number) => Effect.Effect<void, CrawlRunsError>
    /**
     * Closes a crawl that read every page: counts misses, deletes what two clean crawls missed
     * (unless more than `threshold` of the tracked records would go), marks the run complete.
     * `deleteRecords` marks the given ids deleted in the warehouse; all of it in one transaction
     * of the caller's.
     */
    readonly finishClean: (
      run: CrawlRun,
      options: {
        readonly threshold: number
        /** Deletions of at most this many records are never refused (small sets: a firm's books). */
        readonly allowAtOnce?: number
        readonly deleteRecords: (ids: ReadonlyArray<string>) => Effect.Effect<number, WarehouseError>
      }
    ) => Effect.Effect<FinishResult, CrawlRunsError | WarehouseError>
    /** Marks a run failed (it stays resumable, and its pages count as seen; nothing is deleted). */
    readonly fail: (run: CrawlRun, error: string) => Effect.Effect<void, CrawlRunsError>
  }
>()("crm-sync/sync/CrawlRuns") {
  static readonly layer = Layer.effect(
    CrawlRuns,
    Effect.gen(function* () {
      const sql = yield* SqlClient

      const RUN_COLUMNS = sql.literal(`id::float8 AS id, last_page, total_pages, total_count,
        (extract(epoch FROM started_at) * 1000)::float8 AS started_ms, seen, requests`)

      const open = Effect.fn("CrawlRuns.open")(
        function* (connection: string, resource: Resource, source: Source) {
          return yield* sql.withTransaction(
            Effect.gen(function* () {
              const unfinished = yield* sql`
                UPDATE crm_sync.crawl_runs SET status = 'running', error = NULL, finished_at = NULL
                WHERE id = (
                  SELECT id FROM crm_sync.crawl_runs
                  WHERE connection = ${connection} AND resource = ${resource} AND source = ${source}
                  ORDER BY id DESC LIMIT 1
                ) AND status IN ('running', 'failed')
                RETURNING ${RUN_COLUMNS}`.pipe(Effect.flatMap(decodeRunRows))
              if (unfinished[0] !== undefined) return toRun(unfinished[0], connection, resource, source, true)
              const created = yield* sql`
                INSERT INTO crm_sync.crawl_runs (connection, resource, source)
                VALUES (${connection}, ${resource}, ${source})
                RETURNING ${RUN_COLUMNS}`.pipe(Effect.flatMap(decodeRunRows))
              return toRun(created[0]!, connection, resource, source, false)
            })
          )
        },
        Effect.mapError(failed("CrawlRuns.open"))
      )

      const recordBatch = Effect.fn("CrawlRuns.recordBatch")(
        function* (run: CrawlRun, batch: PageBatch) {
          const ids = [...new Set(batch.ids)]
          // One round trip: mark the ids seen by this run, and count on the run what was new to
          // it. A row comes back when it was inserted (never tracked) or updated (not yet seen by
          // this run); one already seen by this run is left alone and does not come back.
          const rows = yield* sql<{ id: string; inserted: boolean }>`
            WITH written AS (
              INSERT INTO crm_sync.crawl_presence AS p (connection, resource, id, last_seen_run, misses)
              SELECT ${run.connection}, ${run.resource}, id, ${run.id}, 0 FROM unnest(${ids}::text[]) AS id
              ON CONFLICT (connection, resource, id) DO UPDATE
                SET last_seen_run = GREATEST(p.last_seen_run, excluded.last_seen_run), misses = 0
              WHERE p.last_seen_run < excluded.last_seen_run OR p.misses <> 0
              RETURNING p.id, (p.xmax = 0) AS inserted
            ),
            counted AS (
              UPDATE crm_sync.crawl_runs SET
                last_page = GREATEST(last_page, ${batch.lastPage}),
                total_pages = ${batch.totalPages},
                total_count = ${batch.totalCount},
                seen = seen + (SELECT count(*) FROM written),
                duplicates = duplicates + ${batch.ids.length} - (SELECT count(*) FROM written),
                inserted = inserted + ${batch.counts.inserted},
                updated = updated + ${batch.counts.updated},
                unchanged = unchanged + ${batch.counts.unchanged + batch.counts.skipped},
                requests = requests + ${batch.requests},
                rechecks = rechecks + ${batch.rechecks},
                progressed_at = now()
              -- set_config here saves the transaction a statement of its own (see above).
              WHERE id = ${run.id} AND set_config('synchronous_commit', 'off', true) = 'off'
            )
            SELECT id, inserted FROM written`
          const fresh = rows.length
          // Copies beyond the first within this batch, and ids already seen earlier in this run.
          const duplicates = batch.ids.length - fresh
          const newlyTracked = rows.filter((row) => row.inserted).map((row) => row.id)
          return { fresh, duplicates, newlyTracked } satisfies BatchResult
        },
        Effect.mapError(failed("CrawlRuns.recordBatch"))
      )

      const recordUndeleted = Effect.fn("CrawlRuns.recordUndeleted")(
        function* (run: CrawlRun, undeleted: number) {
          if (undeleted === 0) return
          yield* sql`UPDATE crm_sync.crawl_runs SET undeleted = undeleted + ${undeleted} WHERE id = ${run.id}`
        },
        Effect.mapError(failed("CrawlRuns.recordUndeleted"))
      )

      const finishClean = Effect.fn("CrawlRuns.finishClean")(function* (
        run: CrawlRun,
        options: {
          readonly threshold: number
          readonly allowAtOnce?: number
          readonly deleteRecords: (ids: ReadonlyArray<string>) => Effect.Effect<number, WarehouseError>
        }
      ) {
        const scope = sql`connection = ${run.connection} AND resource = ${run.resource}`
        // A row with a later last_seen_run was seen by a newer crawl (one that ran while this
        // resumed one was waiting): not absent.
        const [absentRow] = yield* sql<{ absent: number }>`
          WITH missed AS (
            UPDATE crm_sync.crawl_presence SET misses = misses + 1
            WHERE ${scope} AND last_seen_run < ${run.id}
            RETURNING 1
          ) SELECT count(*)::int AS absent FROM missed`.pipe(Effect.mapError(failed("CrawlRuns.finishClean")))
        const absent = absentRow?.absent ?? 0
        // Candidates: missed twice in a row here, and not recently seen by another connection's
        // crawls (two connections to one company see the same records).
        const candidates = yield* sql<{ id: string }>`
          SELECT p.id FROM crm_sync.crawl_presence p
          WHERE p.connection = ${run.connection} AND p.resource = ${run.resource} AND p.misses >= ${MISSES_TO_DELETE}
            AND NOT EXISTS (
              SELECT 1 FROM crm_sync.crawl_presence o
              WHERE o.resource = p.resource AND o.id = p.id AND o.connection <> p.connection
                AND o.misses < ${MISSES_TO_DELETE}
            )`.pipe(Effect.mapError(failed("CrawlRuns.finishClean")))
        const [trackedRow] = yield* sql<{ tracked: number }>`
          SELECT count(*)::int AS tracked FROM crm_sync.crawl_presence WHERE ${scope}`.pipe(
          Effect.mapError(failed("CrawlRuns.finishClean"))
        )
        const tracked = trackedRow?.tracked ?? 0
        const ids = candidates.map((row) => row.id)
        const share = tracked === 0 ? 0 : ids.length / tracked
        const notes: Array<string> = []
        let deleted = 0
        let refused = 0
        if (ids.length > (options.allowAtOnce ?? 0) && share > options.threshold) {
          refused = ids.length
          notes.push(
            `deletion refused: ${ids.length} of ${tracked} records (${percent(share)}) missing from two clean crawls, ` +
              `more than the threshold of ${percent(options.threshold)}; nothing deleted`
          )
        } else if (ids.length > 0) {
          deleted = yield* options.deleteRecords(ids)
          // Deleted records are no longer tracked: a later sighting starts afresh and undeletes.
          yield* sql`DELETE FROM crm_sync.crawl_presence WHERE ${scope} AND id = ANY(${ids}::text[])`.pipe(
            Effect.mapError(failed("CrawlRuns.finishClean"))
          )
        }
        if (absent > 0 && tracked > 0 && absent / tracked > options.threshold && refused === 0) {
          notes.push(
            `${absent} of ${tracked} tracked records (${percent(absent / tracked)}) were absent from this crawl; ` +
              `they are deleted only if the next clean crawl misses them too, and then only within the threshold`
          )
        }
        const note = notes.length === 0 ? null : notes.join("; ")
        yield* sql`
          UPDATE crm_sync.crawl_runs SET status = 'complete', finished_at = now(), progressed_at = now(),
            absent = ${absent}, deleted = ${deleted}, note = ${note}
          WHERE id = ${run.id}`.pipe(Effect.mapError(failed("CrawlRuns.finishClean")))
        return { absent, deleted, refused, note } satisfies FinishResult
      })

      const fail = Effect.fn("CrawlRuns.fail")(
        function* (run: CrawlRun, error: string) {
          yield* sql`
            UPDATE crm_sync.crawl_runs SET status = 'failed', finished_at = now(), error = ${error}
            WHERE id = ${run.id}`
        },
        Effect.mapError(failed("CrawlRuns.fail"))
      )

      return CrawlRuns.of({ open, recordBatch, recordUndeleted, finishClean, fail })
    })
  )
}
