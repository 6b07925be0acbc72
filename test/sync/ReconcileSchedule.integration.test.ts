/**
 * The daemon's reconciliation schedule after downtime: an occurrence missed while no daemon ran
 * (the process was down at 03:00) runs at start-up, once; a first start with no reconciliation on
 * record waits for the schedule.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Exit, Layer, Scope } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { ReconcileSchedulerLive } from "../../src/sync/ReconcileSchedule.ts"
import { harness } from "./harness.ts"

const runs = Effect.gen(function* () {
  const sql = yield* SqlClient
  return yield* sql<{ status: string; seeded: boolean }>`
    SELECT status, (detail ->> 'seeded') IS NOT NULL AS seeded FROM crm_sync.job_runs
    WHERE job = 'reconcile' AND connection = 'default' ORDER BY id`
})

/** Starts the schedule as the daemon does, lets it run for `ms`, stops it. */
const daemonFor = (ms: number) =>
  Effect.gen(function* () {
    const scope = yield* Scope.make()
    yield* Layer.buildWithScope(ReconcileSchedulerLive, scope)
    yield* Effect.sleep(`${ms} millis`)
    yield* Scope.close(scope, Exit.void)
  })

// 03:00 UTC daily: during the test no occurrence comes up on its own.
layer(harness({ config: { schedules: { reconcile: "0 3 * * *" } } }), { timeout: 120_000, excludeTestServices: true })(
  "reconcile after downtime",
  (it) => {
    it.effect("a missed occurrence runs at start-up, once; a first start waits for the schedule", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient

        yield* daemonFor(1_500)
        assert.deepStrictEqual(yield* runs, [], "no reconciliation on record: nothing to catch up")

        // The last reconciliation ran three days ago: at least one 03:00 was missed since.
        yield* sql`INSERT INTO crm_sync.job_runs (job, connection, status, started_at, finished_at, detail)
          VALUES ('reconcile', 'default', 'succeeded', now() - interval '3 days', now() - interval '3 days',
                  '{"seeded": true}'::jsonb)`
        const scope = yield* Scope.make()
        yield* Layer.buildWithScope(ReconcileSchedulerLive, scope)
        let after = yield* runs
        for (let waited = 0; !after.some((run) => !run.seeded && run.status === "succeeded"); waited += 100) {
          if (waited > 45_000) assert.fail(`no catch-up run: ${JSON.stringify(after)}`)
          yield* Effect.sleep("100 millis")
          after = yield* runs
        }
        yield* Scope.close(scope, Exit.void)
        assert.deepStrictEqual(
          after.map((run) => run.status),
          ["succeeded", "succeeded"]
        )

        // The missed occurrence has its run now: a restart does not repeat it.
        yield* daemonFor(1_500)
        assert.lengthOf(yield* runs, 2)
      })
    )
  }
)

// Off: a scheduler outside the daemon (the Kubernetes CronJob) runs `crm-sync reconcile`.
layer(harness({ config: { schedules: { reconcile: "off" } } }), { timeout: 120_000, excludeTestServices: true })(
  "reconcile schedule off",
  (it) => {
    it.effect("the daemon never reconciles, even when a run was missed", () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient
        // A run on record three days ago: with a schedule, the daemon would catch up at start.
        yield* sql`
          INSERT INTO crm_sync.job_runs (job, connection, status, started_at, finished_at)
          VALUES ('reconcile', 'default', 'succeeded', now() - interval '3 days', now() - interval '3 days')`
        yield* daemonFor(1_500)
        assert.lengthOf(yield* runs, 1, "only the run on record")
      })
    )
  }
)

/** The most reconciliations whose runs overlapped at one moment (job_runs' started_at..finished_at). */
const mostAtOnce = Effect.gen(function* () {
  const sql = yield* SqlClient
  const [row] = yield* sql<{ most: number }>`
    SELECT coalesce(max(n), 0)::int AS most FROM (
      SELECT (SELECT count(*) FROM crm_sync.job_runs AS other
              WHERE other.job = 'reconcile' AND other.started_at <= run.started_at
                AND other.finished_at > run.started_at) AS n
      FROM crm_sync.job_runs AS run WHERE run.job = 'reconcile' AND (run.detail ->> 'seeded') IS NULL) AS counts`
  return row?.most ?? 0
})

// A partner's daemon: every connection's reconciliation falls due at the same 03:00. They take turns
// on `sync.workers` slots instead of all starting at once.
const partner = ["c2", "c3", "c4", "c5"]
layer(harness({ alsoConnections: partner, config: { schedules: { reconcile: "0 3 * * *" }, sync: { workers: 1 } } }), {
  timeout: 120_000,
  excludeTestServices: true
})("reconcile of many connections", (it) => {
  it.effect("occurrences due together run sync.workers at a time", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      // Every connection missed an occurrence: all five are due at start.
      for (const connection of ["default", ...partner]) {
        yield* sql`INSERT INTO crm_sync.job_runs (job, connection, status, started_at, finished_at, detail)
          VALUES ('reconcile', ${connection}, 'succeeded', now() - interval '3 days', now() - interval '3 days',
                  '{"seeded": true}'::jsonb)`
      }
      const scope = yield* Scope.make()
      yield* Layer.buildWithScope(ReconcileSchedulerLive, scope)
      const done = sql<{ n: number }>`
        SELECT count(*)::int AS n FROM crm_sync.job_runs
        WHERE job = 'reconcile' AND status = 'succeeded' AND (detail ->> 'seeded') IS NULL`
      for (let waited = 0; ((yield* done)[0]?.n ?? 0) < 5; waited += 100) {
        if (waited > 90_000) assert.fail(`not every connection reconciled: ${(yield* done)[0]?.n} of 5`)
        yield* Effect.sleep("100 millis")
      }
      yield* Scope.close(scope, Exit.void)
      assert.strictEqual(yield* mostAtOnce, 1, "one worker: one reconciliation at a time")
    })
  )
})
