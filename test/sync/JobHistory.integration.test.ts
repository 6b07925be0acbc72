/**
 * The job history is pruned (`sync.history_retention`): runs that finished longer ago go, but each
 * job's latest run and latest success stay however old (status and the lag metrics show the one,
 * the scheduler counts the next run from the other), and so do backfills' runs (what a resumed
 * backfill skips) and runs still going.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Exit, Layer, Scope } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { HistoryPruneLive, pruneHistory } from "../../src/sync/SyncJobs.ts"
import { harness } from "./harness.ts"

/** A run of `job` for connection `a`, `status`, that finished `daysAgo` days ago (never, if null). */
const run = (label: string, job: string, status: string, daysAgo: number | null) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    yield* sql`
      INSERT INTO crm_sync.job_runs (job, connection, status, started_at, finished_at, detail)
      VALUES (${job}, 'a', ${status}, now() - ${daysAgo ?? 0} * interval '1 day' - interval '1 minute',
              CASE WHEN ${daysAgo}::int IS NULL THEN NULL ELSE now() - ${daysAgo ?? 0} * interval '1 day' END,
              ${JSON.stringify({ label })}::jsonb)`
  })

const labels = Effect.gen(function* () {
  const sql = yield* SqlClient
  const rows = yield* sql<{ label: string }>`SELECT detail ->> 'label' AS label FROM crm_sync.job_runs ORDER BY id`
  return rows.map((row) => row.label)
})

layer(harness({ config: { sync: { history_retention: "7 days" } } }), { timeout: 60_000, excludeTestServices: true })(
  "job history",
  (it) => {
    it.effect("keeps the last week, each job's latest run and success, backfills and running runs", () =>
      Effect.gen(function* () {
        // A poll every few minutes for a long time, then a failure streak: its last success is old.
        yield* run("poll 40 days ago", "poll:businesses", "succeeded", 40)
        yield* run("poll 30 days ago", "poll:businesses", "succeeded", 30)
        yield* run("poll's last success, 20 days ago", "poll:businesses", "succeeded", 20)
        yield* run("poll failed 10 days ago", "poll:businesses", "failed", 10)
        yield* run("poll failed 2 days ago", "poll:businesses", "failed", 2)
        // A crawl whose latest run is old: it stays, whatever its outcome.
        yield* run("crawl 50 days ago", "crawl:financial_accounts", "succeeded", 50)
        yield* run("crawl's latest, interrupted 40 days ago", "crawl:financial_accounts", "interrupted", 40)
        yield* run("backfill 60 days ago", "backfill", "failed", 60)
        yield* run("backfill's part 60 days ago", "backfill:businesses", "succeeded", 60)
        yield* run("reference running", "reference", "running", null)

        assert.strictEqual(yield* pruneHistory, 3)
        assert.deepStrictEqual(yield* labels, [
          "poll's last success, 20 days ago",
          "poll failed 2 days ago",
          "crawl 50 days ago",
          "crawl's latest, interrupted 40 days ago",
          "backfill 60 days ago",
          "backfill's part 60 days ago",
          "reference running"
        ])
        assert.strictEqual(yield* pruneHistory, 0, "nothing more to prune")
      })
    )

    it.effect("the daemon's prune loop prunes as it starts", () =>
      Effect.gen(function* () {
        yield* run("reference 30 days ago", "reference", "succeeded", 30)
        yield* run("reference 20 days ago", "reference", "succeeded", 20)
        const scope = yield* Scope.make()
        yield* Layer.buildWithScope(HistoryPruneLive, scope)
        while ((yield* labels).includes("reference 30 days ago")) yield* Effect.sleep("25 millis")
        yield* Scope.close(scope, Exit.void)
        assert.notInclude(yield* labels, "reference 30 days ago")
        assert.include(yield* labels, "reference 20 days ago", "the latest success stays")
      })
    )
  }
)
