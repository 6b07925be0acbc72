/**
 * The operators' view of a warehouse fed by 300 connections, as an operator meets it: `/status`,
 * the status page and `crm-sync status` lead with how many connections are healthy, late,
 * failing, needing re-authorization or not synced yet; they list the unhealthy first (not in
 * name order); the page shows 50 at a time (`?page=N`) or one (`?connection=NAME`, with its jobs
 * and runs), and `status --connection NAME` prints that connection alone, as text and as JSON.
 * The job history is written as the daemon's runs leave it (`crm_sync.job_runs`), for the
 * scheduled jobs LagState says a connection has.
 */
import { NodeHttpServer } from "@effect/platform-node"
import { assert, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { HttpClient, HttpRouter } from "effect/http"
import { SqlClient } from "effect/sql/SqlClient"
import { spawn } from "node:child_process"
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { inject } from "vitest"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { Credentials } from "../../src/crm/Credentials.ts"
import { AdminRoutes } from "../../src/admin/AdminRoutes.ts"
import { scheduledJobs } from "../../src/admin/LagState.ts"
import { DatabaseInfo } from "../../src/warehouse/Database.ts"
import { TestDatabase } from "../support/TestDatabase.ts"

const name = (i: number) => `firm-${String(i).padStart(3, "0")}`
const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, k) => name(from + k))

// In name order the healthy come first; the report must not list them first.
const HEALTHY = range(1, 235)
const NOT_SYNCED = range(236, 240)
const LATE = range(241, 270)
const FAILING = range(271, 290)
const REAUTH = range(291, 300)
const ALL = range(1, 300)
const ERROR = "crawl of financial_accounts: the CRM answered 503 Service Unavailable after 5 attempts"

const document = {
  connections: ALL.map((connection) => ({
    name: connection,
    base_url: "https://crm.example.com",
    credential: "personal",
    token: `token-${connection}`
  }))
}

const main = new URL("../../src/main.ts", import.meta.url).pathname

/** `crm-sync <args>` to its end, against `url`, with the 300 connections' config file. */
const cli = (args: ReadonlyArray<string>, url: string) =>
  Effect.callback<{ readonly code: number | null; readonly stdout: string; readonly stderr: string }>((resume) => {
    const dir = mkdtempSync(join(tmpdir(), "crm-sync-many-"))
    writeFileSync(join(dir, "config.json"), JSON.stringify(document))
    const child = spawn(process.execPath, [main, ...args], {
      env: {
        PATH: process.env.PATH ?? "",
        HOME: process.env.HOME ?? "",
        CRM_SYNC_CONFIG: join(dir, "config.json"),
        DATABASE_URL: url
      },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()))
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()))
    child.on("exit", (code) => resume(Effect.succeed({ code, stdout, stderr })))
    return Effect.sync(() => child.kill("SIGKILL"))
  })

/** The job history: four successes of each scheduled job an hour apart (the latest a minute ago), then the exceptions. */
const seed = Effect.gen(function* () {
  const sql = yield* SqlClient
  const config = yield* AppConfig
  const jobs = [...new Set(scheduledJobs(config, new Date()).map((job) => job.job))]
  const synced = ALL.filter((connection) => !NOT_SYNCED.includes(connection))
  // firm-001's older polls sent 40 requests each, its later ones (below) 4: its plan averages the latest 20.
  yield* sql`
    INSERT INTO crm_sync.job_runs (job, connection, status, started_at, finished_at, requests)
    SELECT 'poll:businesses', 'firm-001', 'succeeded', now() - interval '5 days', now() - interval '5 days', 40
    FROM generate_series(1, 30)`
  // firm-270's business poll last succeeded three days ago, long before everything else.
  yield* sql`
    INSERT INTO crm_sync.job_runs (job, connection, status, started_at, finished_at)
    VALUES ('poll:businesses', 'firm-270', 'succeeded', now() - interval '3 days 1 minute', now() - interval '3 days')`
  yield* sql`
    INSERT INTO crm_sync.job_runs (job, connection, status, started_at, finished_at)
    SELECT j.job, c.name, 'succeeded', now() - make_interval(hours => h.h, mins => 2), now() - make_interval(hours => h.h, mins => 1)
    FROM generate_series(3, 0, -1) AS h(h), unnest(${synced}::text[]) AS c(name), unnest(${jobs}::text[]) AS j(job)
    ORDER BY h.h DESC, c.name, j.job`
  // Late: the business poll (every 5 minutes) last succeeded an hour ago.
  yield* sql`
    DELETE FROM crm_sync.job_runs
    WHERE connection = ANY(${LATE}::text[]) AND job = 'poll:businesses' AND finished_at > now() - interval '30 minutes'`
  yield* sql`
    DELETE FROM crm_sync.job_runs
    WHERE connection = 'firm-270' AND job = 'poll:businesses' AND finished_at > now() - interval '1 day'`
  // Failing: the latest crawl of financial accounts failed, twice.
  for (let attempt = 0; attempt < 2; attempt++) {
    yield* sql`
      INSERT INTO crm_sync.job_runs (job, connection, status, finished_at, error)
      SELECT 'crawl:financial_accounts', c.name, 'failed', now(), ${ERROR}
      FROM unnest(${FAILING}::text[]) AS c(name) ORDER BY c.name`
  }
  yield* sql`UPDATE crm_sync.job_runs SET requests = 4
    WHERE connection = 'firm-001' AND job = 'poll:businesses' AND requests = 0`
  yield* sql`
    INSERT INTO crm_sync.credentials (connection, needs_reauthorization)
    SELECT c.name, true FROM unnest(${REAUTH}::text[]) AS c(name)`
  return sql
})

/** This test's database, as a URL the CLI can use. */
const databaseUrl = Effect.gen(function* () {
  const sql = yield* SqlClient
  const [row] = yield* sql<{ name: string }>`SELECT current_database() AS name`
  const url = new URL(inject("databaseUrl"))
  url.pathname = `/${row!.name}`
  return url.toString()
})

const AdminServer = HttpRouter.serve(AdminRoutes, { disableLogger: true, disableListenLog: true }).pipe(
  Layer.provideMerge(Credentials.layer),
  Layer.provideMerge(NodeHttpServer.layerTest)
)

const World = AdminServer.pipe(
  Layer.provideMerge(AppConfig.layerFrom(document)),
  Layer.provideMerge(Layer.succeed(DatabaseInfo, { kind: "external", location: "the test database" })),
  Layer.provideMerge(TestDatabase)
)

const get = (path: string) =>
  Effect.gen(function* () {
    const client = yield* HttpClient.HttpClient
    const response = yield* client.get(path)
    return { status: response.status, body: yield* response.text }
  })

/** `GET path` asking for `encoding`: the body as read (a fetch decompresses gzip) and the encoding sent. */
const getWith = (path: string, encoding: string) =>
  Effect.gen(function* () {
    const client = yield* HttpClient.HttpClient
    const response = yield* client.get(path, { headers: { "accept-encoding": encoding } })
    return { encoding: response.headers["content-encoding"], body: yield* response.text }
  })

/** The first `/status` report made after `since` (epoch ms): the snapshot is remade in the background. */
const reportAfter = (since: number) =>
  Effect.gen(function* () {
    while (true) {
      const report = JSON.parse((yield* get("/status")).body)
      if (Date.parse(report.generated_at) > since) return report
      yield* Effect.sleep("250 millis")
    }
  })

/** The connections the page's table lists, in order (each is a link to its own view). */
const listedOnPage = (html: string) => [...html.matchAll(/<a href="\?connection=([^"]+)">/g)].map((match) => match[1]!)

const EXPECTED_SUMMARY = {
  connections: 300,
  healthy: 235,
  late: 30,
  failing: 20,
  needs_reauthorization: 10,
  not_synced: 5
}

layer(World, { timeout: 180_000, excludeTestServices: true })("300 connections", (it) => {
  it.effect(
    "/status, the page and `status` lead with the summary, list the unhealthy first, and narrow to one",
    () =>
      Effect.gen(function* () {
        yield* seed
        const seeded = Date.now()
        assert.deepStrictEqual(yield* get("/readyz"), { status: 200, body: "ok\n" })

        // /status: the summary and the order (worst first, then by name). Served from a snapshot of
        // at most 5 s, remade in the background: a report made after the seed comes.
        const status = yield* reportAfter(seeded)
        assert.deepStrictEqual(status.summary, EXPECTED_SUMMARY)
        const order: Array<string> = status.connection_health.map((health: { connection: string }) => health.connection)
        assert.deepStrictEqual(order, [...REAUTH, ...FAILING, ...LATE, ...NOT_SYNCED, ...HEALTHY])
        const failing = status.connection_health.find(
          (health: { connection: string }) => health.connection === "firm-280"
        )
        assert.strictEqual(failing.state, "failing")
        assert.deepStrictEqual(failing.reasons, [
          `crawl:financial_accounts failed 2 times since its last success: ${ERROR}`
        ])
        const late = status.connection_health.find((health: { connection: string }) => health.connection === "firm-250")
        assert.match(late.reasons[0], /^poll:businesses last succeeded 1 h \d+ min ago \(every 5 min\)$/)
        const longLate = status.connection_health.find(
          (health: { connection: string }) => health.connection === "firm-270"
        )
        assert.match(longLate.reasons[0], /^poll:businesses last succeeded 3 d\b.* ago \(every 5 min\)$/)

        // The whole report (about 1.5 MB here) is gzipped for a caller that takes it, the same report.
        const zipped = yield* getWith("/status", "gzip")
        const plain = yield* getWith("/status", "identity")
        assert.strictEqual(zipped.encoding, "gzip")
        assert.strictEqual(plain.encoding, undefined)
        assert.deepStrictEqual(JSON.parse(zipped.body).summary, EXPECTED_SUMMARY)
        assert.deepStrictEqual(JSON.parse(plain.body).summary, EXPECTED_SUMMARY)

        const narrowed = JSON.parse((yield* get("/status?connection=firm-250")).body)
        assert.deepStrictEqual(narrowed.summary, EXPECTED_SUMMARY, "the summary stays whole")
        assert.deepStrictEqual(
          narrowed.connection_health.map((health: { connection: string; state: string }) => [
            health.connection,
            health.state
          ]),
          [["firm-250", "late"]]
        )
        assert.strictEqual((yield* get("/status?connection=nobody")).status, 404)

        // The page: the summary first, then page 1 of 6, the unhealthy first.
        const page = yield* get("/")
        assert.strictEqual(page.status, 200)
        const summary = page.body.slice(
          page.body.indexOf('id="summary"'),
          page.body.indexOf("</p>", page.body.indexOf('id="summary"'))
        )
        for (const part of [
          "300</b> connection(s)",
          "235</b> healthy",
          "30</b> late",
          "20</b> failing",
          "10</b> needing re-authorization",
          "5</b> not synced yet"
        ]) {
          assert.include(summary, part)
        }
        assert.isBelow(
          page.body.indexOf('id="summary"'),
          page.body.indexOf("<h2>Connections</h2>"),
          "the summary leads"
        )
        assert.deepStrictEqual(listedOnPage(page.body), order.slice(0, 50))
        assert.include(page.body, "page 1 of 6")
        assert.include(page.body, "Pick a connection to see its jobs.")

        // The charts follow the jobs, minutes and slots, not the 300 connections.
        const glance = page.body.slice(page.body.indexOf('<section id="glance">'), page.body.indexOf("</section>"))
        assert.include(glance, "chart-runs")
        assert.notMatch(glance, /firm-\d{3}/, "no chart per connection")
        const ticks = [...glance.matchAll(/class="tick tick-/g)].length
        assert.isAbove(ticks, 0)
        assert.isAtMost(ticks, 6 * 144, "six jobs, a tick per 10-minute slot at most")

        const last = yield* get("/?page=6")
        assert.deepStrictEqual(listedOnPage(last.body), order.slice(250))
        assert.include(last.body, "page 6 of 6")

        // One connection: its row, its jobs (the failed crawl with its error), its runs only.
        const one = yield* get("/?connection=firm-280")
        assert.strictEqual(one.status, 200)
        assert.deepStrictEqual(listedOnPage(one.body), ["firm-280"])
        assert.include(one.body, "<h2>Jobs</h2>")
        assert.match(
          one.body,
          /<td>crawl:financial_accounts<\/td><td>firm-280<\/td>[\s\S]*?<td class="failed">failed: crawl of financial_accounts: the CRM answered 503/
        )
        const runs = one.body.slice(one.body.indexOf("<h2>Latest runs of firm-280</h2>"))
        assert.include(runs, "firm-280")
        assert.notMatch(runs, /firm-(?!280)\d{3}/, "only firm-280's runs")
        assert.strictEqual((yield* get("/?connection=nobody")).status, 404)

        // `crm-sync status`: the summary and only the connections that are not healthy.
        const url = yield* databaseUrl
        const text = yield* cli(["status"], url)
        assert.strictEqual(text.code, 0, text.stderr.slice(-2000))
        assert.include(
          text.stdout,
          "health      300 connections: 235 healthy, 30 late, 20 failing, 10 needing re-authorization, 5 not synced yet\n"
        )
        assert.include(text.stdout, `reauth      firm-291: the CRM refused its grant: run crm-sync connect firm-291\n`)
        assert.include(
          text.stdout,
          `failing     firm-280: crawl:financial_accounts failed 2 times since its last success: ${ERROR}\n`
        )
        assert.include(text.stdout, "connections 235 healthy not listed: crm-sync status --connection NAME shows one\n")
        assert.notInclude(text.stdout, "firm-001")

        const oneText = yield* cli(["status", "--connection", "firm-280"], url)
        assert.strictEqual(oneText.code, 0, oneText.stderr.slice(-2000))
        assert.include(oneText.stdout, "connection  firm-280: https://crm.example.com/ (personal, egress default)\n")
        assert.include(
          oneText.stdout,
          "health      1 connection: 0 healthy, 0 late, 1 failing, 0 needing re-authorization, 0 not synced yet\n"
        )
        assert.include(oneText.stdout, "job         crawl:financial_accounts (firm-280): failed")
        assert.notMatch(oneText.stdout, /firm-(?!280)\d{3}/, "no other connection")

        const oneJson = yield* cli(["status", "--connection", "firm-001", "--json"], url)
        assert.strictEqual(oneJson.code, 0, oneJson.stderr.slice(-2000))
        const report = JSON.parse(oneJson.stdout)
        assert.deepStrictEqual(report.summary, {
          ...EXPECTED_SUMMARY,
          connections: 1,
          healthy: 1,
          late: 0,
          failing: 0,
          needs_reauthorization: 0,
          not_synced: 0
        })
        assert.deepStrictEqual(
          report.connection_health.map((health: { connection: string; state: string }) => [
            health.connection,
            health.state
          ]),
          [["firm-001", "healthy"]]
        )
        assert.deepStrictEqual(
          report.plan.map((plan: { connection: string }) => plan.connection),
          ["firm-001"]
        )
        const poll = report.plan[0].demand.find((job: { job: string }) => job.job === "poll:businesses")
        assert.strictEqual(
          poll.requests_per_run,
          (4 * 4 + 16 * 40) / 20,
          "the latest 20 polls: four of 4, sixteen of 40"
        )
        assert.isTrue(report.last_jobs.every((job: { connection: string }) => job.connection === "firm-001"))

        const unknown = yield* cli(["status", "--connection", "nobody"], url)
        assert.strictEqual(unknown.code, 2)
        assert.include(unknown.stderr, "no connection named nobody in this config")

        // 300 token buckets: the page charts the six fullest.
        const sql = yield* SqlClient
        yield* sql`
        INSERT INTO crm_sync.rate_windows (bucket, scope, request_limit, window_ms, window_start, used)
        SELECT 'token:' || c.name, 'token', 1000, 3600000, now() - interval '10 minutes', c.n
        FROM unnest(${ALL}::text[]) WITH ORDINALITY AS c(name, n)`
        yield* reportAfter(Date.now())
        const charted = (yield* get("/")).body
        assert.strictEqual([...charted.matchAll(/class="chart chart-budget"/g)].length, 6)
        assert.include(charted, 'data-bucket="token:firm-300"')
        assert.include(charted, "The 6 fullest of 300 buckets.")
      }),
    // Four `crm-sync` processes and three snapshots waited for: past the default minute on a busy machine.
    120_000
  )
})
