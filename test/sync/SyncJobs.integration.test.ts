/**
 * The daemon's read-sync jobs (SyncJobs) against the sandbox: each scheduled run recorded in
 * `crm_sync.job_runs`; two replicas on one database run a due crawl once between them (lease, and
 * "still due?" asked under it); a shutdown mid-crawl (the layer's scope closing, as on SIGTERM)
 * commits the page in hand, releases the lease, records the run as interrupted, and the next start
 * resumes the crawl; the poll repeats on its schedule.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Exit, Layer, Scope } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { Sandbox } from "@crm-sync/sandbox"
import { BusinessPollerLive, CrawlSchedulerLive } from "../../src/sync/SyncJobs.ts"
import { harness, lastSeq, listAll, pagesAsked, requestsSince } from "./harness.ts"

const options = { timeout: 120_000, excludeTestServices: true } as const

/** Waits (polling the database) until `query` returns true. */
const until = <E, R>(query: Effect.Effect<boolean, E, R>) =>
  Effect.gen(function* () {
    while (!(yield* query)) yield* Effect.sleep("25 millis")
  })

const jobCount = (job: string, status: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const [row] = yield* sql<{ n: number }>`
      SELECT count(*)::int AS n FROM crm_sync.job_runs WHERE job = ${job} AND status = ${status}`
    return row!.n
  })

const advisoryLocks = Effect.gen(function* () {
  const sql = yield* SqlClient
  const [row] = yield* sql<{ n: number }>`
    SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND database = (
      SELECT oid FROM pg_database WHERE datname = current_database())`
  return row!.n
})

/** Starts `daemon` in a scope of its own; closing the scope is the SIGTERM. */
const start = <A, E, R>(daemon: Layer.Layer<A, E, R>) =>
  Effect.gen(function* () {
    const scope = yield* Scope.make()
    yield* Layer.buildWithScope(daemon, scope)
    return scope
  })

layer(harness({ config: { schedules: { crawl: "1 hour" } } }), options)("crawl schedule", (it) => {
  it.effect("two replicas run a due crawl once between them, and record it", () =>
    Effect.gen(function* () {
      const before = yield* lastSeq
      const scope = yield* start(Layer.mergeAll(Layer.fresh(CrawlSchedulerLive), Layer.fresh(CrawlSchedulerLive)))
      yield* until(
        Effect.map(
          Effect.all([
            jobCount("crawl:annuity_contracts", "succeeded"),
            jobCount("crawl:financial_accounts", "succeeded")
          ]),
          ([a, b]) => a === 1 && b === 1
        )
      )
      const requests = yield* requestsSince(before)
      const accounts = yield* listAll("/v1/financial_accounts")
      const contracts = yield* listAll("/v1/annuity_contracts")
      assert.deepStrictEqual(
        pagesAsked(requests, "/v1/financial_accounts"),
        Array.from({ length: Math.ceil(accounts.length / 100) }, (_, i) => i + 1)
      )
      assert.deepStrictEqual(
        pagesAsked(requests, "/v1/annuity_contracts"),
        Array.from({ length: Math.ceil(contracts.length / 100) }, (_, i) => i + 1)
      )
      yield* Scope.close(scope, Exit.void)
      assert.strictEqual(yield* jobCount("crawl:financial_accounts", "succeeded"), 1)
      assert.strictEqual(yield* jobCount("crawl:financial_accounts", "running"), 0)
      assert.strictEqual(yield* advisoryLocks, 0, "no lease outlives the daemon")

      const sql = yield* SqlClient
      const [job] = yield* sql<{ requests: number; detail: { seen: number; pages: number } }>`
        SELECT requests, detail FROM crm_sync.job_runs WHERE job = 'crawl:financial_accounts'`
      assert.strictEqual(job!.detail.seen, accounts.length)
      assert.strictEqual(job!.requests, Math.ceil(accounts.length / 100))
    })
  )
})

// Enough pages (about 36) that the interruption lands mid-crawl even with every request the
// crawler keeps in flight answered at once.
layer(harness({ sandbox: { records: 6000 } }), options)("shutdown mid-crawl", (it) => {
  it.effect("commits the page in hand, records the run as interrupted, and resumes at the next start", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const sandbox = yield* Sandbox
      yield* sandbox.admin.addFault({ kind: "latency", ms: 100, path: "/v1/financial_accounts" })
      const scope = yield* start(CrawlSchedulerLive)
      const lastPage = Effect.map(
        sql<{ last_page: number }>`
          SELECT last_page FROM crm_sync.crawl_runs WHERE resource = 'financial_accounts'`,
        (rows) => rows[0]?.last_page ?? 0
      )
      yield* until(Effect.map(lastPage, (page) => page >= 2))
      yield* Scope.close(scope, Exit.void)
      yield* sandbox.admin.clearFaults

      assert.strictEqual(yield* jobCount("crawl:financial_accounts", "interrupted"), 1)
      assert.strictEqual(yield* advisoryLocks, 0)
      const [run] = yield* sql<{ status: string; last_page: number; seen: number; error: string | null }>`
        SELECT status, last_page, seen, error FROM crm_sync.crawl_runs WHERE resource = 'financial_accounts'`
      assert.strictEqual(run!.status, "running", `an interrupted crawl stays resumable (error: ${run!.error})`)
      // Every page recorded as stored is stored, and nothing more: the writes are whole pages.
      const [stored] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM crm.financial_accounts`
      assert.strictEqual(stored!.n, run!.seen)
      assert.strictEqual(stored!.n, run!.last_page * 100)

      const resumedAt = Date.parse((yield* sandbox.admin.state).now)
      const again = yield* start(CrawlSchedulerLive)
      yield* until(Effect.map(jobCount("crawl:financial_accounts", "succeeded"), (n) => n === 1))
      yield* Scope.close(again, Exit.void)
      const asked = pagesAsked(
        (yield* requestsSince(0)).filter((entry) => Date.parse(entry.at) >= resumedAt),
        "/v1/financial_accounts"
      )
      assert.strictEqual(Math.min(...asked), run!.last_page + 1, "the crawl resumed after its last stored page")
      const accounts = yield* listAll("/v1/financial_accounts")
      const [all] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM crm.financial_accounts`
      assert.strictEqual(all!.n, accounts.length)
    })
  )
})

layer(harness({ config: { schedules: { businesses: "1 second" } } }), options)("poll schedule", (it) => {
  it.effect("polls again on its schedule, each run recorded with what it did", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const scope = yield* start(BusinessPollerLive)
      yield* until(Effect.map(jobCount("poll:businesses", "succeeded"), (n) => n >= 3))
      yield* Scope.close(scope, Exit.void)
      const runs = yield* sql<{ detail: { mode: string; since: string | null }; requests: number }>`
        SELECT detail, requests FROM crm_sync.job_runs WHERE job = 'poll:businesses' AND status = 'succeeded' ORDER BY id`
      assert.strictEqual(runs[0]!.detail.mode, "crawl")
      assert.isTrue(runs.slice(1).every((run) => run.detail.mode === "poll" && run.detail.since !== null))
      assert.isTrue(runs.every((run) => run.requests >= 1))
    })
  )
})
