/**
 * The deletion-by-absence bookkeeping of CrawlRuns on its own, against a real database: which
 * records two clean crawls in a row missed, what an unfinished crawl's sightings change, what
 * another connection's crawls protect (only a configured connection that still crawls), how a
 * scheduled crawl and a backfill resume each other's unfinished run, and the exact totals of a
 * crawl whose batches overlapped.
 */
import { assert, layer } from "@effect/vitest"
import { DateTime, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { type CrawlRun, CrawlRuns } from "../../src/sync/CrawlRuns.ts"
import { type Source, Warehouse } from "../../src/warehouse/Warehouse.ts"
import { TestDatabase } from "../support/TestDatabase.ts"

/** The connections of this process's config ("gone" crawled once, but is not among them). */
const configured = ["one", "two", "three", "four", "other", "partner", "lead", "current", "idle", "locked"]

const Config = AppConfig.layerFrom({
  connections: configured.map((name) => ({
    name,
    base_url: "http://127.0.0.1:9",
    credential: "personal",
    token: `token-${name}`
  })),
  schedules: { crawl: "6 hours" }
})

const Live = CrawlRuns.layer.pipe(
  Layer.provideMerge(Warehouse.layer),
  Layer.provideMerge(Config),
  Layer.provideMerge(TestDatabase)
)

const counts = { inserted: 0, updated: 0, unchanged: 0, skipped: 0, rejected: 0 }

/** One batch of ids stored by `run`, in a transaction of its own. */
const sighted = (run: CrawlRun, ids: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const runs = yield* CrawlRuns
    return yield* sql.withTransaction(
      runs.recordBatch(run, {
        lastPage: 1,
        totalPages: 1,
        totalCount: ids.length,
        ids,
        unique: new Set(ids).size,
        counts,
        requests: 1,
        rechecks: 0
      })
    )
  })

/** A whole crawl that saw `batches` and finished cleanly; returns its result and what it deleted. */
const cleanCrawl = (
  connection: string,
  batches: ReadonlyArray<ReadonlyArray<string>>,
  options: { readonly source?: Source; readonly threshold?: number } = {}
) =>
  Effect.gen(function* () {
    const runs = yield* CrawlRuns
    const run = yield* runs.open(connection, "financial_accounts", options.source ?? "crawl")
    for (const ids of batches) yield* sighted(run, ids)
    return yield* finish(run, options.threshold)
  })

const finish = (run: CrawlRun, threshold = 0.5) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const runs = yield* CrawlRuns
    const warehouse = yield* Warehouse
    const deleted: Array<string> = []
    const now = yield* DateTime.now
    const result = yield* sql.withTransaction(
      runs.finishClean(run, {
        threshold,
        deleteRecords: (ids) =>
          Effect.andThen(
            Effect.sync(() => deleted.push(...ids)),
            Effect.map(warehouse.markDeleted(run.resource, ids, now, { source: run.source }), (d) => d.deleted)
          )
      })
    )
    return { ...result, deletedIds: deleted }
  })

const ids = (n: number, from = 1) => Array.from({ length: n }, (_, i) => `fa_${String(from + i).padStart(3, "0")}`)

const options = { timeout: 60_000, excludeTestServices: true } as const

layer(Live, options)("CrawlRuns", (it) => {
  it.effect("deletes what two clean crawls in a row missed, and counts a crawl's records exactly", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      // Batches overlap (the listing shifted under the crawl): 10 records, 12 received.
      const first = yield* cleanCrawl("one", [ids(6), ids(6, 5)])
      assert.deepStrictEqual(first.deletedIds, [])
      const [run] = yield* sql<{ seen: number; duplicates: number }>`
        SELECT seen, duplicates FROM crm_sync.crawl_runs ORDER BY id DESC LIMIT 1`
      assert.deepStrictEqual(run, { seen: 10, duplicates: 2 })

      const second = yield* cleanCrawl("one", [ids(9)])
      assert.strictEqual(second.absent, 1)
      assert.deepStrictEqual(second.deletedIds, [])
      const third = yield* cleanCrawl("one", [ids(9)])
      assert.strictEqual(third.absent, 1)
      assert.deepStrictEqual(third.deletedIds, ["fa_010"])
      // Deleted, it is no longer tracked: the next crawl does not count it absent.
      const fourth = yield* cleanCrawl("one", [ids(9)])
      assert.strictEqual(fourth.absent, 0)
      // Only the last clean crawl's sightings are kept.
      const [kept] = yield* sql<{ runs: number }>`
        SELECT count(DISTINCT s.run_id)::int AS runs
        FROM crm_sync.crawl_sightings s JOIN crm_sync.crawl_runs r ON r.id = s.run_id
        WHERE r.connection = 'one'`
      assert.strictEqual(kept!.runs, 1)
    })
  )

  it.effect("a sighting by a crawl that failed part way starts the count over", () =>
    Effect.gen(function* () {
      const runs = yield* CrawlRuns
      yield* cleanCrawl("two", [ids(20, 101)])
      const missed = yield* cleanCrawl("two", [ids(19, 101)])
      assert.strictEqual(missed.absent, 1)
      // A backfill sees fa_120 and fails before its end; the next crawl resumes it.
      const backfill = yield* runs.open("two", "financial_accounts", "backfill")
      yield* sighted(backfill, ["fa_120"])
      yield* runs.fail(backfill, "connection reset")
      const resumed = yield* cleanCrawl("two", [ids(19, 101)])
      assert.strictEqual(resumed.absent, 0, "seen by the run's first part")
      const after = yield* cleanCrawl("two", [ids(19, 101)])
      assert.strictEqual(after.absent, 1)
      assert.deepStrictEqual(after.deletedIds, [], "missed once since it was last seen")
      const again = yield* cleanCrawl("two", [ids(19, 101)])
      assert.deepStrictEqual(again.deletedIds, ["fa_120"])
    })
  )

  it.effect("a record another connection's crawls still see is not deleted", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      yield* cleanCrawl("partner", [ids(10, 201)])
      yield* cleanCrawl("three", [ids(10, 201)])
      yield* cleanCrawl("three", [ids(9, 201)])
      const second = yield* cleanCrawl("three", [ids(9, 201)])
      assert.strictEqual(second.absent, 1)
      assert.deepStrictEqual(second.deletedIds, [], "the partner connection's last crawl listed fa_210")
      assert.strictEqual(
        second.note,
        "1 record missing from two clean crawls kept: still tracked by connection partner (1)",
        "the run says who held the record back"
      )
      const [noted] = yield* sql<{ note: string | null }>`
        SELECT note FROM crm_sync.crawl_runs WHERE connection = 'three' ORDER BY id DESC LIMIT 1`
      assert.strictEqual(noted!.note, second.note)
      // Once the partner's crawls have missed it twice too, it goes.
      const partnerOnce = yield* cleanCrawl("partner", [ids(9, 201)])
      assert.deepStrictEqual(partnerOnce.deletedIds, [])
      const partnerTwice = yield* cleanCrawl("partner", [ids(9, 201)])
      assert.deepStrictEqual(partnerTwice.deletedIds, ["fa_210"])
    })
  )

  it.effect("a connection that stopped crawling holds nothing back; one that still crawls does, and is named", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const all = ids(10, 501)
      yield* sql`INSERT INTO crm.financial_accounts (id, source) SELECT unnest(${all}::text[]), 'crawl'`
      // Each of these crawled the listing once and saw everything, then stopped.
      yield* cleanCrawl("gone", [all]) // since removed from the config
      yield* cleanCrawl("idle", [all]) // its last clean crawl 19 hours ago: over 3 × schedules.crawl
      yield* sql`UPDATE crm_sync.crawl_runs SET started_at = started_at - interval '19 hours',
        finished_at = finished_at - interval '19 hours' WHERE connection = 'idle'`
      yield* cleanCrawl("locked", [all]) // its grant refused since: it needs re-authorization
      yield* sql`INSERT INTO crm_sync.credentials (connection, needs_reauthorization, last_error)
        VALUES ('locked', true, 'invalid_grant')`
      // This one still crawls, and its last crawl listed fa_507.
      yield* cleanCrawl("current", [all.filter((id) => id !== "fa_508" && id !== "fa_509" && id !== "fa_510")])

      // The lead connection's clean crawls miss fa_507 to fa_510 again and again.
      yield* cleanCrawl("lead", [all])
      const kept = ids(6, 501)
      const once = yield* cleanCrawl("lead", [kept])
      assert.deepStrictEqual(once.deletedIds, [], "one clean crawl's absence is not enough")
      const twice = yield* cleanCrawl("lead", [kept])
      assert.deepStrictEqual(twice.deletedIds, ["fa_508", "fa_509", "fa_510"])
      assert.strictEqual(
        twice.note,
        "1 record missing from two clean crawls kept: still tracked by connection current (1)"
      )
      const rows = yield* sql<{ id: string; deleted: boolean }>`
        SELECT id, deleted_at IS NOT NULL AS deleted FROM crm.financial_accounts
        WHERE id >= 'fa_506' AND id <= 'fa_510' ORDER BY id`
      assert.deepStrictEqual(rows, [
        { id: "fa_506", deleted: false },
        { id: "fa_507", deleted: false },
        { id: "fa_508", deleted: true },
        { id: "fa_509", deleted: true },
        { id: "fa_510", deleted: true }
      ])
    })
  )

  it.effect("a scheduled crawl and a backfill resume each other's unfinished run, failed or interrupted", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const runs = yield* CrawlRuns
      yield* cleanCrawl("four", [ids(10, 301)])
      // A backfill stores its first page and fails: the scheduled crawl goes on from there.
      const backfill = yield* runs.open("four", "financial_accounts", "backfill")
      yield* sighted(backfill, ids(3, 301))
      yield* runs.fail(backfill, "timeout")
      const crawl = yield* runs.open("four", "financial_accounts", "crawl")
      assert.isTrue(crawl.resumed)
      assert.strictEqual(crawl.id, backfill.id)
      yield* sighted(crawl, ids(3, 304))
      // Its holder dies (the orphan sweep marks the run interrupted): a backfill goes on from there.
      yield* sql`UPDATE crm_sync.crawl_runs SET status = 'interrupted' WHERE id = ${crawl.id}`
      const resumed = yield* runs.open("four", "financial_accounts", "backfill")
      assert.strictEqual(resumed.id, backfill.id)
      assert.strictEqual(resumed.nextPage, 2)
      yield* sighted(resumed, ids(4, 307))
      const finished = yield* finish(resumed)
      assert.strictEqual(finished.absent, 0)
      const [counted] = yield* sql<{ seen: number; status: string }>`
        SELECT seen, status FROM crm_sync.crawl_runs WHERE id = ${resumed.id}`
      assert.deepStrictEqual(counted, { seen: 10, status: "complete" }, "every part of the resumed crawl counts")
      const next = yield* runs.open("four", "financial_accounts", "crawl")
      assert.isFalse(next.resumed, "a complete run is not resumed")
    })
  )

  it.effect("a record listed again is undeleted in the batch that lists it", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const runs = yield* CrawlRuns
      yield* sql`
        INSERT INTO crm.financial_accounts (id, deleted_at, source) VALUES
          ('fa_401', now(), 'crawl'), ('fa_402', now(), 'crawl'), ('fa_403', NULL, 'crawl')`
      const run = yield* runs.open("other", "financial_accounts", "crawl")
      const batch = yield* sighted(run, ["fa_401", "fa_403", "fa_401"])
      assert.strictEqual(batch.undeleted, 1)
      const rows = yield* sql<{ id: string; deleted: boolean }>`
        SELECT id, deleted_at IS NOT NULL AS deleted FROM crm.financial_accounts WHERE id LIKE 'fa_4%' ORDER BY id`
      assert.deepStrictEqual(rows, [
        { id: "fa_401", deleted: false },
        { id: "fa_402", deleted: true },
        { id: "fa_403", deleted: false }
      ])
    })
  )
})
