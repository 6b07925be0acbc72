/**
 * After the database drops every session (a restart, a failover): a lease is taken on a new
 * session at the first attempt, and a crawl whose writes failed with the database is tried again
 * within seconds — resuming its crawl run — rather than after the ten minutes a CRM failure waits.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Exit, Option, Scope, Layer } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { Sandbox } from "@crm-sync/sandbox"
import { JobLease } from "../../src/sync/JobLease.ts"
import { CrawlSchedulerLive } from "../../src/sync/SyncJobs.ts"
import { harness, listAll } from "./harness.ts"

const options = { timeout: 120_000, excludeTestServices: true } as const

const TERMINATE_OTHERS = `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
  WHERE datname = current_database() AND pid <> pg_backend_pid()`

/** Ends every other session on this database, as a restart would. */
const dropSessions = Effect.gen(function* () {
  const sql = yield* SqlClient
  yield* sql.unsafe(TERMINATE_OTHERS)
})

/**
 * The database away for `seconds`: every other session is ended as soon as it appears (from one
 * reserved session, which stays), so that no statement of anyone else's gets through meanwhile.
 */
const outage = (seconds: number) =>
  Effect.scoped(
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const session = yield* sql.reserve
      const terminate = session.execute(TERMINATE_OTHERS, [], undefined)
      const endAt = Date.now() + seconds * 1000
      while (Date.now() < endAt) {
        yield* terminate
        yield* Effect.sleep("10 millis")
      }
    })
  )

const until = <E, R>(query: Effect.Effect<boolean, E, R>) =>
  Effect.gen(function* () {
    while (!(yield* query)) yield* Effect.sleep("50 millis")
  })

/** A query that survives the dropped sessions: the pool hands out a broken one at most once. */
const retried = <A, E, R>(query: Effect.Effect<A, E, R>) => Effect.retry(query, { times: 5 })

layer(harness({ sandbox: { records: 6000 }, config: { schedules: { crawl: "1 hour" } } }), options)(
  "database restart",
  (it) => {
    it.effect("a lease is taken on a new session at the first attempt", () =>
      Effect.gen(function* () {
        const leases = yield* JobLease
        assert.deepStrictEqual(yield* leases.tryRun("restart:a", Effect.succeed(1)), Option.some(1))
        yield* dropSessions
        assert.deepStrictEqual(yield* leases.tryRun("restart:b", Effect.succeed(2)), Option.some(2))
      })
    )

    it.effect("a crawl cut off from the database resumes within seconds of its return", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient
        const sandbox = yield* Sandbox
        // Slow pages (about 33 of them), so that the sessions drop in the middle of the crawl.
        yield* sandbox.admin.addFault({ kind: "latency", ms: 500, path: "/v1/financial_accounts" })
        const lastPage = retried(
          sql<{ last_page: number }>`
            SELECT last_page FROM crm_sync.crawl_runs WHERE resource = 'financial_accounts'`
        ).pipe(Effect.map((rows) => rows[0]?.last_page ?? 0))
        const scope = yield* Scope.make()
        yield* Layer.buildWithScope(CrawlSchedulerLive, scope)
        yield* until(Effect.map(lastPage, (page) => page >= 2))
        yield* outage(3)
        yield* sandbox.admin.clearFaults

        const succeeded = retried(
          sql<{ n: number }>`
            SELECT count(*)::int AS n FROM crm_sync.job_runs
            WHERE job = 'crawl:financial_accounts' AND status = 'succeeded'`
        ).pipe(Effect.map((rows) => rows[0]!.n === 1))
        yield* until(succeeded)
        yield* Scope.close(scope, Exit.void)

        const runs = yield* sql<{ status: string }>`
          SELECT status FROM crm_sync.job_runs WHERE job = 'crawl:financial_accounts' ORDER BY id`
        // The broken run is closed as failed, or (when the database was still away as it ended)
        // as interrupted by the next run; that one, seconds later, finished the crawl.
        assert.strictEqual(runs.length, 2)
        assert.oneOf(runs[0]!.status, ["failed", "interrupted"])
        assert.strictEqual(runs[1]!.status, "succeeded")
        const crawls = yield* sql<{ status: string }>`
          SELECT status FROM crm_sync.crawl_runs WHERE resource = 'financial_accounts'`
        assert.deepStrictEqual(crawls, [{ status: "complete" }], "resumed, not started again")
        const [stored] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM crm.financial_accounts`
        assert.strictEqual(stored!.n, (yield* listAll("/v1/financial_accounts")).length)
      })
    )
  }
)
