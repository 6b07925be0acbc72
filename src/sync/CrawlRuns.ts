/**
 * CrawlRuns: the bookkeeping of full-page crawls — `crm_sync.crawl_runs` (one row per crawl: the
 * pages stored so far, the totals the CRM reported, what became of the records),
 * `crm_sync.crawl_sightings` (the ids each stored batch received) and `crm_sync.crawl_misses`
 * (tracked records that clean crawls missed, and how many in a row). PageCrawler and ReferenceSync
 * drive it; every write here runs inside the transaction of the batch (or the final step) it
 * describes, so the bookkeeping can never disagree with the warehouse. A record missed by two clean
 * crawls in a row is marked deleted (`finishClean`), unless another configured connection that
 * still crawls the listing tracks it (`HoldPolicy` of CrawlHolds).
 */
import * as Context from "effect/Context"
import * as DateTime from "effect/DateTime"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { AppConfig } from "../config/AppConfig.ts"
import { planDeletion } from "./DeletionPlan.ts"
import { SqlClient } from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql/SqlError"
import {
  eligibleHolders,
  type Held,
  heldBy,
  heldNote,
  holdFor,
  type HoldPolicy,
  holdPolicy,
  nothingHeld
} from "./CrawlHolds.ts"
import { CurrentLease } from "./JobLease.ts"
import { type Resource, type Source, type UpsertResult, Warehouse } from "../warehouse/Warehouse.ts"
import type { WarehouseError } from "../warehouse/WarehouseError.ts"

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
  /** How many of `ids` are distinct. */
  readonly unique: number
  readonly counts: UpsertResult
  readonly requests: number
  readonly rechecks: number
}

export interface BatchResult {
  /** Records of the batch that were marked deleted and are not any more (they were listed again). */
  readonly undeleted: number
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

/** A run's counters, as `crm_sync.crawl_runs` holds them. */
export const RunTotals = Schema.Struct({
  seen: Schema.Number,
  inserted: Schema.Number,
  updated: Schema.Number,
  unchanged: Schema.Number,
  duplicates: Schema.Number,
  rechecks: Schema.Number,
  undeleted: Schema.Number,
  requests: Schema.Number,
  last_page: Schema.Number,
  total_count: Schema.NullOr(Schema.Number)
})
export type RunTotals = typeof RunTotals.Type

/** A record is deleted once this many clean crawls in a row have missed it. */
export const MISSES_TO_DELETE = 2

export class CrawlRunsError extends Schema.TaggedError<CrawlRunsError>()("CrawlRunsError", {
  operation: Schema.String,
  message: Schema.String,
  cause: Schema.Defect()
}) {}

const failed = (operation: string) => (cause: SqlError | Schema.SchemaError) =>
  new CrawlRunsError({ operation, message: `${operation}: ${cause.message}`, cause })

/**
 * How many fewer records than its `total_count` a whole read may show and still count absences:
 * 1% (at least one), for records that page drift hid from this one read.
 */
export const shortReadSlack = (total: number) => Math.max(1, Math.floor(total * 0.01))

/** How `finishClean` deletes, and when it refuses to. */
export interface FinishOptions {
  readonly threshold: number
  /** Deletions of at most this many records are never refused (small sets: a firm's books). */
  readonly allowAtOnce?: number
  readonly deleteRecords: (ids: ReadonlyArray<string>) => Effect.Effect<number, WarehouseError>
}

const runColumns = (sql: SqlClient) =>
  sql.literal(`id::float8 AS id, last_page, total_pages, total_count,
    (extract(epoch FROM started_at) * 1000)::float8 AS started_ms, seen, requests`)

const open = (sql: SqlClient) =>
  Effect.fn("CrawlRuns.open")(
    function* (connection: string, resource: Resource, source: Source) {
      const lease = yield* CurrentLease
      // A scheduled crawl and a backfill read the same pages: either resumes the other's run.
      const sources = source === "crawl" || source === "backfill" ? ["crawl", "backfill"] : [source]
      return yield* sql.withTransaction(
        Effect.gen(function* () {
          const unfinished = yield* sql`
            UPDATE crm_sync.crawl_runs SET status = 'running', error = NULL, finished_at = NULL, lease = ${lease}
            WHERE id = (
              SELECT id FROM crm_sync.crawl_runs
              WHERE connection = ${connection} AND resource = ${resource} AND source = ANY(${sources}::text[])
              ORDER BY id DESC LIMIT 1
            ) AND status IN ('running', 'failed', 'interrupted')
            RETURNING ${runColumns(sql)}`.pipe(Effect.flatMap(decodeRunRows))
          if (unfinished[0] !== undefined) return toRun(unfinished[0], connection, resource, source, true)
          const created = yield* sql`
            INSERT INTO crm_sync.crawl_runs (connection, resource, source, lease)
            VALUES (${connection}, ${resource}, ${source}, ${lease})
            RETURNING ${runColumns(sql)}`.pipe(Effect.flatMap(decodeRunRows))
          return toRun(created[0]!, connection, resource, source, false)
        })
      )
    },
    Effect.mapError(failed("CrawlRuns.open"))
  )

/**
 * Sightings by the batch: a row per record per crawl cost a fifth of a crawl's database time; one
 * array per batch costs next to nothing, and the set arithmetic runs once, at a clean finish.
 */
const recordBatch = (sql: SqlClient, warehouse: Warehouse["Service"]) =>
  Effect.fn("CrawlRuns.recordBatch")(function* (run: CrawlRun, batch: PageBatch) {
    // The warehouse undeletes (its `(id) WHERE deleted_at IS NOT NULL` index makes that a
    // probe of a few rows at most); the sighting and the counters are one statement.
    const undeleted = yield* warehouse.undelete(run.resource, batch.ids, { source: run.source })
    yield* sql`
      WITH sighted AS (
        INSERT INTO crm_sync.crawl_sightings (run_id, ids) VALUES (${run.id}, ${batch.ids}::text[])
      ),
      counted AS (
        UPDATE crm_sync.crawl_runs SET
          last_page = GREATEST(last_page, ${batch.lastPage}),
          total_pages = ${batch.totalPages},
          total_count = ${batch.totalCount},
          seen = seen + ${batch.unique},
          duplicates = duplicates + ${batch.ids.length - batch.unique},
          inserted = inserted + ${batch.counts.inserted},
          updated = updated + ${batch.counts.updated},
          unchanged = unchanged + ${batch.counts.unchanged + batch.counts.skipped},
          undeleted = undeleted + ${undeleted},
          requests = requests + ${batch.requests},
          rechecks = rechecks + ${batch.rechecks},
          progressed_at = now()
        -- set_config here saves the transaction a statement of its own (see CrawlRuns.recordBatch).
        WHERE id = ${run.id} AND set_config('synchronous_commit', 'off', true) = 'off'
        RETURNING id
      )
      SELECT count(*) FROM counted`.pipe(Effect.mapError(failed("CrawlRuns.recordBatch")))
    return { undeleted } satisfies BatchResult
  })

// ---------------------------------------------------------------------------------------------
// A clean finish: absences counted, deletions settled
// ---------------------------------------------------------------------------------------------

const finishFailed = Effect.mapError(failed("CrawlRuns.finishClean"))

/** The crawls of the same connection and resource as `run`. */
const sameListing = (sql: SqlClient, run: CrawlRun) =>
  sql`connection = ${run.connection} AND resource = ${run.resource}`

const notCounted = (note: string): FinishResult => ({ absent: 0, deleted: 0, refused: 0, note })

/**
 * Closes `run` complete without counting absences when they prove nothing: a newer crawl of the same
 * records began, or its pages held fewer records than its own total_count said. Null when they count.
 */
const closeIfUnproven = Effect.fnUntraced(function* (sql: SqlClient, run: CrawlRun) {
  const [state] = yield* sql<{ newer: boolean }>`
    SELECT EXISTS (SELECT 1 FROM crm_sync.crawl_runs WHERE ${sameListing(sql, run)} AND id > ${run.id}) AS newer`.pipe(
    finishFailed
  )
  if (state!.newer) {
    // A newer crawl of these records began while this one was unfinished: this one's early
    // pages are older than that crawl's view, so its absences prove nothing. (That crawl's
    // finish may also have dropped this one's early sightings: the counts stay as stored.)
    const note = "a newer crawl of this resource began while this one was unfinished: no absences counted"
    yield* sql`
      UPDATE crm_sync.crawl_runs SET status = 'complete', finished_at = now(), progressed_at = now(),
        absent = 0, deleted = 0, note = ${note}
      WHERE id = ${run.id}`.pipe(finishFailed)
    return notCounted(note)
  }

  // A listing whose pages held fewer records than its own total_count says (an empty page
  // where the envelope promised more, a page cut short) contradicts itself: what it did not
  // show proves nothing. One percent of slack for records drift hid from this one crawl.
  const [told] = yield* sql<{ seen: number; total: number | null }>`
    SELECT (SELECT count(*)::int FROM (
              SELECT DISTINCT unnest(ids) FROM crm_sync.crawl_sightings WHERE run_id = ${run.id}) AS s) AS seen,
           total_count AS total
    FROM crm_sync.crawl_runs WHERE id = ${run.id}`.pipe(finishFailed)
  if (told !== undefined && told.total !== null && told.seen + shortReadSlack(told.total) < told.total) {
    const note = `the listing's total_count said ${told.total} records but its pages held ${told.seen}: no absences counted`
    yield* sql`
      UPDATE crm_sync.crawl_runs SET status = 'complete', finished_at = now(), progressed_at = now(),
        seen = ${told.seen}, absent = 0, deleted = 0, note = ${note}
      WHERE id = ${run.id}`.pipe(finishFailed)
    return notCounted(note)
  }
  return null
})

/**
 * The misses, in one statement: tracked before this crawl (sightings of earlier runs, and the
 * records still counting misses), less what this crawl saw, is what it missed. A sighting by an
 * earlier crawl that did not finish started the count over. Returns this crawl's distinct and
 * received records, its absences, and the ids missed `MISSES_TO_DELETE` times.
 */
const countMisses = Effect.fnUntraced(function* (sql: SqlClient, run: CrawlRun) {
  const scope = sameListing(sql, run)
  const [missed] = yield* sql<{
    seen: number
    received: number
    absent: number
    candidates: ReadonlyArray<string> | null
  }>`
    WITH earlier AS (
      SELECT id, status FROM crm_sync.crawl_runs WHERE ${scope} AND id < ${run.id}
    ),
    seen AS (
      SELECT DISTINCT unnest(ids) AS id FROM crm_sync.crawl_sightings WHERE run_id = ${run.id}
    ),
    before AS (
      SELECT id, misses FROM crm_sync.crawl_misses WHERE ${scope}
    ),
    tracked AS (
      SELECT unnest(s.ids) AS id FROM crm_sync.crawl_sightings s JOIN earlier e ON e.id = s.run_id
      UNION
      SELECT id FROM before
    ),
    restarted AS (
      SELECT DISTINCT unnest(s.ids) AS id
      FROM crm_sync.crawl_sightings s JOIN earlier e ON e.id = s.run_id
      WHERE e.status <> 'complete'
    ),
    -- Joins, which PostgreSQL hashes: an EXISTS on restarted ran as a subplan per absent row
    -- (116 s instead of 1.8 s for a million tracked records, 300,000 of them restarted).
    absent AS (
      SELECT t.id, CASE WHEN r.id IS NOT NULL THEN 1 ELSE COALESCE(b.misses, 0) + 1 END AS misses
      FROM tracked t
      LEFT JOIN before b ON b.id = t.id
      LEFT JOIN restarted r ON r.id = t.id
      WHERE NOT EXISTS (SELECT 1 FROM seen WHERE seen.id = t.id)
    ),
    counted AS (
      INSERT INTO crm_sync.crawl_misses AS m (connection, resource, id, misses)
      SELECT ${run.connection}, ${run.resource}, id, misses FROM absent
      ON CONFLICT (connection, resource, id) DO UPDATE SET misses = excluded.misses
    ),
    cleared AS (
      DELETE FROM crm_sync.crawl_misses m
      WHERE ${scope} AND NOT EXISTS (SELECT 1 FROM absent a WHERE a.id = m.id)
    )
    SELECT (SELECT count(*)::int FROM seen) AS seen,
      (SELECT COALESCE(sum(cardinality(ids)), 0)::int FROM crm_sync.crawl_sightings WHERE run_id = ${run.id}) AS received,
      count(*)::int AS absent,
      array_agg(id ORDER BY id) FILTER (WHERE misses >= ${MISSES_TO_DELETE}) AS candidates
    FROM absent`.pipe(finishFailed)
  return {
    seen: missed?.seen ?? 0,
    received: missed?.received ?? 0,
    absent: missed?.absent ?? 0,
    candidates: missed?.candidates ?? []
  }
})

/**
 * The candidates still tracked by another connection's crawls (two connections to one company see
 * the same records): seen by them, or missed by them fewer than twice. Only connections the
 * `HoldPolicy` of CrawlHolds admits count; what they hold is not deleted.
 */
const trackedElsewhere = Effect.fnUntraced(function* (
  sql: SqlClient,
  policy: HoldPolicy,
  run: Pick<CrawlRun, "connection" | "resource">,
  candidates: ReadonlyArray<string>
) {
  if (candidates.length === 0) return nothingHeld
  const eligible = yield* eligibleHolders(policy, run.connection).pipe(
    Effect.provideService(SqlClient, sql),
    finishFailed
  )
  if (eligible.length === 0) return nothingHeld
  const staleAfterMs = Duration.toMillis(holdFor(policy, run.resource))
  const rows = yield* sql<{ connection: string; id: string }>`
    WITH holders AS (
      SELECT DISTINCT connection FROM crm_sync.crawl_runs
      WHERE resource = ${run.resource} AND connection = ANY(${eligible}::text[]) AND status = 'complete'
        AND finished_at > now() - ${staleAfterMs}::float8 * interval '1 millisecond'
    ),
    held AS (
      SELECT r.connection, x.id FROM crm_sync.crawl_sightings s
      JOIN crm_sync.crawl_runs r ON r.id = s.run_id
      JOIN holders h ON h.connection = r.connection
      CROSS JOIN LATERAL unnest(s.ids) AS x(id)
      WHERE r.resource = ${run.resource}
      UNION ALL
      SELECT o.connection, o.id FROM crm_sync.crawl_misses o
      JOIN holders h ON h.connection = o.connection
      WHERE o.resource = ${run.resource} AND o.misses < ${MISSES_TO_DELETE}
    )
    SELECT DISTINCT held.connection, held.id
    FROM held JOIN unnest(${candidates}::text[]) AS c(id) ON c.id = held.id`.pipe(finishFailed)
  return heldBy(rows)
})

/**
 * Deletion by absence (spec §1: the v1 API has no DELETE and lists deleted records nowhere, so a
 * record that disappears from the listing is the only sign): the records a connection's crawls
 * track are those the last clean crawl saw (its sightings), those crawls since have seen, and those
 * still counting misses. A clean crawl — every page read without error — adds one miss to each
 * tracked record it did not see and clears the misses of those it saw; a record missed by two clean
 * crawls in a row is marked deleted. A sighting by a crawl that did not finish starts the count
 * over, so a record shifted across a page boundary by drift in one crawl is simply seen by the
 * next. A crawl that fails or is cut short counts no misses and deletes nothing (it never gets
 * here), and neither does a resumed crawl finishing after a newer crawl of the same records began
 * (its early pages are older than that crawl's). A record another connection still tracks is kept
 * if that connection may hold it (`HoldPolicy` of CrawlHolds), and the run's `note` names who held
 * how many. When more than the configured share of the tracked records would go at once, nothing
 * is deleted and the run says so in `note`.
 */
const finishClean = (sql: SqlClient, policy: HoldPolicy) =>
  Effect.fn("CrawlRuns.finishClean")(function* (run: CrawlRun, options: FinishOptions) {
    const unproven = yield* closeIfUnproven(sql, run)
    if (unproven !== null) return unproven
    const scope = sameListing(sql, run)
    const { seen, received, absent, candidates } = yield* countMisses(sql, run)
    const tracked = seen + absent
    const held = yield* trackedElsewhere(sql, policy, run, candidates)
    const ids = held.ids.size === 0 ? candidates : candidates.filter((id) => !held.ids.has(id))
    const plan = planDeletion(ids, tracked, absent, options)
    let deleted = 0
    if (!plan.refuse && ids.length > 0) {
      deleted = yield* options.deleteRecords(ids)
      // Deleted records are no longer tracked: a later sighting undeletes (recordBatch).
      yield* sql`DELETE FROM crm_sync.crawl_misses WHERE ${scope} AND id = ANY(${ids}::text[])`.pipe(finishFailed)
    }
    // This crawl's sightings are now what the next clean finish compares with.
    yield* sql`
      DELETE FROM crm_sync.crawl_sightings
      WHERE run_id IN (SELECT id FROM crm_sync.crawl_runs WHERE ${scope} AND id < ${run.id})`.pipe(finishFailed)
    const notes = [heldNote(held), ...plan.notes].filter((note) => note !== null)
    const note = notes.length === 0 ? null : notes.join("; ")
    // Exact totals: a record seen in two batches (the listing shifted under the crawl, or a
    // restart in between) counted twice as the batches were stored.
    yield* sql`
      UPDATE crm_sync.crawl_runs SET status = 'complete', finished_at = now(), progressed_at = now(),
        seen = ${seen}, duplicates = ${received - seen},
        absent = ${absent}, deleted = ${deleted}, note = ${note}
      WHERE id = ${run.id}`.pipe(finishFailed)
    return { absent, deleted, refused: plan.refuse ? ids.length : 0, note } satisfies FinishResult
  })

// ---------------------------------------------------------------------------------------------
// Failures, orphans and reads
// ---------------------------------------------------------------------------------------------

const fail = (sql: SqlClient) =>
  Effect.fn("CrawlRuns.fail")(
    function* (run: CrawlRun, error: string) {
      yield* sql`
        UPDATE crm_sync.crawl_runs SET status = 'failed', finished_at = now(), error = ${error}
        WHERE id = ${run.id}`
    },
    Effect.mapError(failed("CrawlRuns.fail"))
  )

const closeOrphans = (sql: SqlClient) => (lease: string, error: string) =>
  sql`
    UPDATE crm_sync.crawl_runs SET status = 'interrupted', finished_at = now(), error = ${error}
    WHERE status = 'running' AND lease = ${lease}`.pipe(
    Effect.asVoid,
    Effect.mapError(failed("CrawlRuns.closeOrphans"))
  )

const totals = (sql: SqlClient) => (run: CrawlRun) =>
  sql`SELECT seen, inserted, updated, unchanged, duplicates, rechecks, undeleted, requests, last_page, total_count
      FROM crm_sync.crawl_runs WHERE id = ${run.id}`.pipe(
    Effect.flatMap(Schema.decodeUnknownEffect(Schema.Array(RunTotals))),
    Effect.map((rows) => rows[0]!),
    Effect.mapError(failed("CrawlRuns.totals"))
  )

const forgetMisses = (sql: SqlClient) => (connection: string, resource: Resource, ids: ReadonlyArray<string>) =>
  sql`DELETE FROM crm_sync.crawl_misses
      WHERE connection = ${connection} AND resource = ${resource} AND id = ANY(${ids}::text[])`.pipe(
    Effect.asVoid,
    Effect.mapError(failed("CrawlRuns.forgetMisses"))
  )

export class CrawlRuns extends Context.Service<
  CrawlRuns,
  {
    /**
     * The unfinished run of this connection, resource and source (`running`, `interrupted` or
     * `failed` part way; a scheduled crawl and a backfill resume each other's) to resume, or a new
     * one. The caller must hold the resource's lease, so an unfinished run found here has no other
     * owner: its process died or gave up.
     */
    readonly open: (connection: string, resource: Resource, source: Source) => Effect.Effect<CrawlRun, CrawlRunsError>
    /**
     * Records one batch of stored pages; run it in the transaction that stored them, after the
     * records. It notes the batch's ids as seen by the run, undeletes those of its records that
     * were marked deleted (listed again: spec §1, a record can only come back this way), and moves
     * the run's counters — one statement. It also turns off `synchronous_commit` for that
     * transaction: a stored page can always be read again, and its bookkeeping commits with it,
     * so the commit need not wait for the WAL flush. A database crash then loses at most the last
     * pages and their `last_page` together, and the crawl reads them again.
     */
    readonly recordBatch: (
      run: CrawlRun,
      batch: PageBatch
    ) => Effect.Effect<BatchResult, CrawlRunsError | WarehouseError>
    /**
     * Closes a crawl that read every page: counts its distinct records, counts misses, deletes what
     * two clean crawls missed (except what another connection that still crawls the listing
     * tracks, and nothing if more than `threshold` of the tracked records would go), marks
     * the run complete and drops the sightings of earlier runs.
     * `deleteRecords` marks the given ids deleted in the warehouse; all of it in one transaction
     * of the caller's.
     */
    readonly finishClean: (
      run: CrawlRun,
      options: FinishOptions
    ) => Effect.Effect<FinishResult, CrawlRunsError | WarehouseError>
    /**
     * Marks `interrupted` the crawl runs still `running` under `lease` (they stay resumable). Call
     * it holding that lease and crawling nothing under it: such runs' process died.
     */
    readonly closeOrphans: (lease: string, error: string) => Effect.Effect<void, CrawlRunsError>
    /**
     * Stops counting misses for `ids` (the reconciliation deleted them: a crawl that lists one
     * again undeletes it).
     */
    readonly forgetMisses: (
      connection: string,
      resource: Resource,
      ids: ReadonlyArray<string>
    ) => Effect.Effect<void, CrawlRunsError>
    /**
     * Which of `ids` another connection that still crawls the listing tracks (the hold rule of
     * `finishClean`), and who holds how many: the reconciliation deletes none of them.
     */
    readonly heldElsewhere: (
      connection: string,
      resource: Resource,
      ids: ReadonlyArray<string>
    ) => Effect.Effect<Held, CrawlRunsError>
    /** What a run counted so far, as stored. */
    readonly totals: (run: CrawlRun) => Effect.Effect<RunTotals, CrawlRunsError>
    /** Marks a run failed (it stays resumable, and its pages count as seen; nothing is deleted). */
    readonly fail: (run: CrawlRun, error: string) => Effect.Effect<void, CrawlRunsError>
  }
>()("crm-sync/sync/CrawlRuns") {
  static readonly layer = Layer.effect(
    CrawlRuns,
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const warehouse = yield* Warehouse
      const policy = holdPolicy(yield* AppConfig)
      return CrawlRuns.of({
        open: open(sql),
        recordBatch: recordBatch(sql, warehouse),
        finishClean: finishClean(sql, policy),
        closeOrphans: closeOrphans(sql),
        forgetMisses: forgetMisses(sql),
        heldElsewhere: (connection, resource, ids) => trackedElsewhere(sql, policy, { connection, resource }, ids),
        totals: totals(sql),
        fail: fail(sql)
      })
    })
  )
}

/** The `total_count` the latest crawl of a listing reported, if any crawl did. */
export const lastListingTotal = (connection: string, resource: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const [row] = yield* sql<{ total: number | null }>`
      SELECT total_count AS total FROM crm_sync.crawl_runs
      WHERE connection = ${connection} AND resource = ${resource} AND total_count IS NOT NULL
      ORDER BY id DESC LIMIT 1`
    return row?.total ?? null
  })

/**
 * Where the latest unfinished crawl of a listing stands: its last stored page, the listing's pages,
 * and its counters so far (over every process that worked on it).
 */
export const openRunPosition = (connection: string, resource: string, source: Source) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const [row] = yield* sql<{
      last_page: number
      total_pages: number | null
      seen: number
      inserted: number
      updated: number
      unchanged: number
    }>`
      SELECT last_page, total_pages, seen, inserted, updated, unchanged FROM crm_sync.crawl_runs
      WHERE connection = ${connection} AND resource = ${resource} AND source = ${source} AND status = 'running'
      ORDER BY id DESC LIMIT 1`
    return row === undefined
      ? undefined
      : {
          lastPage: row.last_page,
          totalPages: row.total_pages ?? undefined,
          seen: row.seen,
          inserted: row.inserted,
          updated: row.updated,
          unchanged: row.unchanged
        }
  })
