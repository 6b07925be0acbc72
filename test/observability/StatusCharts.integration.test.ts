/**
 * The status page's chart data, read from the tables as the daemon leaves them: a bucket's
 * requests per minute derived from the job runs of the connections drawing on it (each run's
 * requests spread over its minutes), webhook events received and applied per minute with their
 * lag, the day's runs per job in slots, and each resource's freshness against its schedule.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { statusCharts } from "../../src/admin/StatusCharts.ts"
import { statusReport } from "../../src/admin/StatusReport.ts"
import { DatabaseInfo } from "../../src/warehouse/Database.ts"
import { TestDatabase } from "../support/TestDatabase.ts"

const document = {
  connections: [{ name: "firm", base_url: "https://crm.example.com", credential: "personal", token: "t" }]
}

const World = Layer.mergeAll(
  AppConfig.layerFrom(document),
  Layer.succeed(DatabaseInfo, { kind: "external", location: "the test database" })
).pipe(Layer.provideMerge(TestDatabase))

const sum = (values: ReadonlyArray<number | null>) => values.reduce<number>((total, value) => total + (value ?? 0), 0)

const seed = Effect.gen(function* () {
  const sql = yield* SqlClient
  yield* sql`
    INSERT INTO crm_sync.rate_windows (bucket, scope, request_limit, window_ms, window_start, used)
    VALUES ('token:firm', 'token', 1000, 3600000,
            date_trunc('minute', now()) - interval '20 minutes' + interval '50 seconds', 150),
      -- a window over two hours ago: nothing sent since
      ('company:firm', 'company', 10000, 3600000, now() - interval '3 hours', 9000)`
  // In the order the daemon writes them (a run's row is inserted when it starts).
  yield* sql`
    INSERT INTO crm_sync.job_runs (job, connection, status, started_at, finished_at, requests) VALUES
      ('reference', 'firm', 'succeeded', now() - interval '3 days', now() - interval '3 days', 7),
      ('crawl:financial_accounts', 'firm', 'failed', now() - interval '2 hours', now() - interval '2 hours', 0)`
  yield* sql`
    INSERT INTO crm_sync.job_runs (job, connection, status, started_at, finished_at, requests) VALUES
      -- a poll in the minute the window began, a poll within one minute, a crawl over three
      ('poll:businesses', 'firm', 'succeeded', date_trunc('minute', now()) - interval '20 minutes' + interval '51 seconds',
        date_trunc('minute', now()) - interval '20 minutes' + interval '55 seconds', 5),
      ('poll:businesses', 'firm', 'succeeded', now() - interval '5 minutes', now() - interval '5 minutes', 40),
      ('crawl:annuity_contracts', 'firm', 'succeeded', date_trunc('minute', now()) - interval '10 minutes',
        date_trunc('minute', now()) - interval '8 minutes', 90),
      -- another process's connection (not in this config)
      ('poll:businesses', 'elsewhere', 'succeeded', now() - interval '4 minutes', now() - interval '4 minutes', 500)`
  yield* sql`INSERT INTO crm_sync.job_runs (job, connection, status, started_at) VALUES
    ('reconcile', 'firm', 'running', now())`
  yield* sql`
    INSERT INTO crm_sync.webhook_inbox (hook_id, endpoint, body, status, received_at, processed_at) VALUES
      ('a', 'all', '\\x7b7d', 'processed', now() - interval '3 minutes', now() - interval '3 minutes' + interval '20 seconds'),
      ('b', 'all', '\\x7b7d', 'processed', now() - interval '3 minutes', now() - interval '3 minutes' + interval '2 seconds'),
      ('c', 'all', '\\x7b7d', 'unhandled', now() - interval '2 minutes', now() - interval '2 minutes'),
      ('d', 'all', '\\x7b7d', 'pending', now(), NULL),
      ('e', 'all', '\\x7b7d', 'dead', now() - interval '1 minute', now()),
      ('old', 'all', '\\x7b7d', 'processed', now() - interval '3 hours', now() - interval '3 hours')`
})

layer(World, { timeout: 60_000, excludeTestServices: true })("status charts' data", (it) => {
  it.effect("per minute from the tables, bounded by the window, the hour and the day", () =>
    Effect.gen(function* () {
      yield* seed
      const report = yield* statusReport(yield* AppConfig, { kind: "external", location: "the test database" })
      const charts = yield* statusCharts(report, yield* AppConfig)

      assert.deepStrictEqual(
        charts.buckets.map((bucket) => [bucket.bucket, bucket.used, bucket.limit]),
        [
          ["company:firm", 0, 10000],
          ["token:firm", 150, 1000]
        ]
      )
      const [over, bucket] = charts.buckets
      // The window that is over is drawn as the last hour, with the runs of that hour (its polls, its crawl).
      assert.strictEqual(over!.start, Date.parse(report.generated_at) - 3_600_000)
      assert.closeTo(sum(over!.per_minute), 135, 1e-9)
      // firm's polls (5 in the window's first minute, 40 in another) and crawl (90 over three
      // minutes, 30 each); not elsewhere's.
      assert.closeTo(sum(bucket!.per_minute), 135, 1e-9)
      assert.strictEqual(bucket!.per_minute[0], 5)
      assert.deepStrictEqual(
        bucket!.per_minute.filter((value) => value > 0).toSorted((a, b) => a - b),
        [5, 30, 30, 30, 40]
      )

      assert.strictEqual(sum(charts.events.received), 5, "a, b, c, d and e: not the one of three hours ago")
      assert.strictEqual(sum(charts.events.applied), 3, "processed and unhandled")
      assert.closeTo(Math.max(...charts.events.max_lag.map((lag) => lag ?? 0)), 20, 0.01)
      assert.lengthOf(charts.events.received, 60)

      const runs = Object.fromEntries(
        charts.runs.jobs.map((strip) => [
          strip.job,
          strip.slots.map((slot) => [slot.succeeded, slot.failed, slot.interrupted, slot.running])
        ])
      )
      assert.deepStrictEqual(Object.keys(runs), [
        "crawl:annuity_contracts",
        "crawl:financial_accounts",
        "poll:businesses",
        "reconcile"
      ])
      assert.deepStrictEqual(runs["crawl:financial_accounts"], [[0, 1, 0, 0]])
      assert.deepStrictEqual(runs["reconcile"], [[0, 0, 0, 1]])
      assert.strictEqual(sum(runs["poll:businesses"]!.flat()), 3, "firm's two and elsewhere's")
      for (const strip of charts.runs.jobs) {
        for (const slot of strip.slots) assert.isTrue(slot.slot >= 0 && slot.slot < charts.runs.slots)
      }

      const businesses = charts.freshness.find((row) => row.resource === "businesses")!
      assert.strictEqual(businesses.job, "poll:businesses")
      assert.strictEqual(businesses.every_seconds, 300)
      assert.isNotNull(businesses.last_read)
      const tasks = charts.freshness.find((row) => row.resource === "tasks")!
      assert.strictEqual(tasks.job, null)
    })
  )
})
