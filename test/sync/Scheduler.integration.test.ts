/**
 * The daemon's scheduler (SyncJobs): one per process, a fixed pool of `sync.workers` workers. With
 * thirty connections and two workers, never more than two jobs run at once (every run that opens
 * in `crm_sync.job_runs` is counted against the runs still open, by a trigger: no sampling), every
 * connection's first job goes before any connection's second (round-robin), and every first run
 * completes. With one worker, due jobs run most overdue first, whatever the order of the config,
 * and a job the rate budget makes wait long gives the worker to the next due job.
 */
import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Exit, Layer, Scope } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { offerHandoff } from "../../src/budget/Handoff.ts"
import { CrmPermitSpent } from "../../src/crm/CrmTransport.ts"
import { runScheduler, type ScheduledJob } from "../../src/sync/Scheduler.ts"
import { SyncJobsLive } from "../../src/cli/DaemonJobs.ts"
import { BusinessPollerLive } from "../../src/sync/SyncJobs.ts"
import { harness } from "./harness.ts"

const options = { timeout: 240_000, excludeTestServices: true } as const

/** Waits (polling the database) until `query` returns true. */
const until = <E, R>(query: Effect.Effect<boolean, E, R>) =>
  Effect.gen(function* () {
    while (!(yield* query)) yield* Effect.sleep("50 millis")
  })

/** Starts `daemon` in a scope of its own; closing the scope is the SIGTERM. */
const start = <A, E, R>(daemon: Layer.Layer<A, E, R>) =>
  Effect.gen(function* () {
    const scope = yield* Scope.make()
    yield* Layer.buildWithScope(daemon, scope)
    return scope
  })

/**
 * Each run opened in `crm_sync.job_runs` notes how many runs were open at that moment, itself
 * included (a test-only table and trigger: the runs of a job are what an operator sees running).
 */
const countOpenRuns = Effect.gen(function* () {
  const sql = yield* SqlClient
  yield* sql`CREATE TABLE public.open_runs_seen (open int NOT NULL)`
  yield* sql.unsafe(`
    CREATE FUNCTION public.note_open_runs() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO public.open_runs_seen
        SELECT count(*) FROM crm_sync.job_runs WHERE status = 'running';
      RETURN NULL;
    END $$`)
  yield* sql.unsafe(`
    CREATE TRIGGER note_open_runs AFTER INSERT ON crm_sync.job_runs
    FOR EACH ROW EXECUTE FUNCTION public.note_open_runs()`)
})

const others = Array.from({ length: 29 }, (_, i) => `c${String(i + 1).padStart(2, "0")}`)
const JOBS_PER_CONNECTION = ["poll:businesses", "crawl:annuity_contracts", "crawl:financial_accounts", "reference"]

layer(
  harness({
    sandbox: { records: 100 },
    alsoConnections: others,
    config: { sync: { workers: 2 } }
  }),
  options
)("thirty connections, two workers", (it) => {
  it.effect("never runs more than two jobs at once, takes connections in turn, and completes every first run", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      yield* countOpenRuns
      const firstRunsDone = Effect.map(
        sql<{ n: number }>`
          SELECT count(DISTINCT (job, connection))::int AS n FROM crm_sync.job_runs
          WHERE status = 'succeeded' AND job = ANY(${JOBS_PER_CONNECTION}::text[])`,
        (rows) => rows[0]!.n === JOBS_PER_CONNECTION.length * 30
      )
      const scope = yield* start(SyncJobsLive)
      yield* until(firstRunsDone)
      yield* Scope.close(scope, Exit.void)

      const [seen] = yield* sql<{ peak: number; runs: number }>`
        SELECT max(open)::int AS peak, count(*)::int AS runs FROM public.open_runs_seen`
      assert.isAtLeast(seen!.runs, JOBS_PER_CONNECTION.length * 30)
      assert.isAtMost(seen!.peak, 2, `at most sync.workers (2) runs open at once; saw ${seen!.peak}`)
      const failed = yield* sql<{ job: string; connection: string; error: string }>`
        SELECT job, connection, error FROM crm_sync.job_runs WHERE status = 'failed'`
      assert.deepStrictEqual(failed, [], "no run failed")
      // Round-robin: the first thirty runs are one of each connection.
      const first = yield* sql<{ connection: string }>`
        SELECT connection FROM crm_sync.job_runs ORDER BY id LIMIT 30`
      assert.strictEqual(new Set(first.map((row) => row.connection)).size, 30, "each connection's first job first")
    })
  )
})

const five = ["c1", "c2", "c3", "c4"]

layer(
  harness({
    sandbox: { records: 100 },
    alsoConnections: five,
    config: { sync: { workers: 1 }, schedules: { businesses: "1 hour" } }
  }),
  options
)("one worker, five overdue polls", (it) => {
  it.effect("runs the most overdue first, whatever the order of the config", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      // Each connection's poll last succeeded an hour (its interval) and some minutes ago:
      // default 1 minute overdue, c1 2 minutes, ... c4 5 minutes.
      const overdue = { default: 1, c1: 2, c2: 3, c3: 4, c4: 5 } as const
      for (const [connection, minutes] of Object.entries(overdue)) {
        yield* sql`
          INSERT INTO crm_sync.job_runs (job, connection, status, started_at, finished_at)
          VALUES ('poll:businesses', ${connection}, 'succeeded',
                  now() - interval '1 hour' - ${minutes} * interval '1 minute' - interval '1 second',
                  now() - interval '1 hour' - ${minutes} * interval '1 minute')`
      }
      const [{ last }] = (yield* sql<{ last: number }>`SELECT max(id)::int AS last FROM crm_sync.job_runs`) as [
        { last: number }
      ]
      const newRuns = sql<{ connection: string; status: string }>`
        SELECT connection, status FROM crm_sync.job_runs WHERE id > ${last} ORDER BY id`
      const scope = yield* start(BusinessPollerLive)
      yield* until(Effect.map(newRuns, (runs) => runs.filter((run) => run.status === "succeeded").length === 5))
      yield* Scope.close(scope, Exit.void)
      const order = (yield* newRuns).map((run) => run.connection)
      assert.deepStrictEqual(order, ["c4", "c3", "c2", "c1", "default"], "most overdue first")
    })
  )
})

/** Spends a permit, as the CRM transport does for each request it sends. */
const sendRequest = Effect.flatMap(CrmPermitSpent, (spent) => Effect.sync(() => spent?.()))

/**
 * A job of `connection` that, like a crawl whose permit is an hour off after two pages, sends two
 * requests and then meets a long budget wait.
 */
const waitsOnTheBudget: ScheduledJob = {
  job: "test:waits",
  connection: "default",
  interval: Duration.hours(1),
  lease: "test:waits:default",
  alsoCounts: [],
  run: sendRequest.pipe(
    Effect.repeat({ times: 1 }),
    Effect.andThen(offerHandoff(Duration.toMillis(Duration.minutes(50)))),
    Effect.andThen(Effect.never)
  )
}
const runsAtOnce: ScheduledJob = {
  job: "test:runs",
  connection: "c1",
  interval: Duration.hours(1),
  lease: "test:runs:c1",
  alsoCounts: [],
  run: Effect.succeed({ requests: 1, detail: {} })
}

layer(harness({ alsoConnections: ["c1"], config: { sync: { workers: 1 } } }), options)(
  "one worker, a job waiting on the budget",
  (it) => {
    it.effect("gives the worker to the next due job, records the run deferred, and keeps the job due later", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient
        const runs = sql<{ job: string; status: string; requests: number; detail: { deferred_seconds?: number } }>`
          SELECT job, status, requests, detail FROM crm_sync.job_runs WHERE job LIKE 'test:%' ORDER BY id`
        const scope = yield* Scope.make()
        // Both due at once: the waiting job is first in the config, so it is taken first.
        yield* runScheduler([waitsOnTheBudget, runsAtOnce]).pipe(Scope.provide(scope))
        yield* until(Effect.map(runs, (rows) => rows.some((row) => row.status === "succeeded"))).pipe(
          Effect.timeoutOrElse({
            duration: "30 seconds",
            orElse: () => Effect.die(new Error("the other connection's job never ran: the worker stayed held"))
          })
        )
        yield* Scope.close(scope, Exit.void)
        const seen = (yield* runs).map((row) => [row.job, row.status, row.requests, row.detail.deferred_seconds])
        assert.deepStrictEqual(seen, [
          ["test:waits", "deferred", 2, 3000],
          ["test:runs", "succeeded", 1, undefined]
        ])
      })
    )
  }
)
