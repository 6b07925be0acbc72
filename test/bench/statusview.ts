/**
 * Operators' view benchmark: `npx node test/bench/statusview.ts [--connections N] [--runs N] [--quick] [--no-docs]`
 * (or `npm run bench -- statusview`).
 *
 * A partner's warehouse: N connections (default 500), each with `--runs` successful runs (default
 * 100) of each of its six scheduled jobs in `crm_sync.job_runs`, 6 % of them late, 4 % failing and
 * 2 % needing re-authorization. The admin routes are served in this process as the daemon serves
 * them, and quiet, then while four clients in the same process (so on the server's event loop)
 * keep asking for the page and `/status` without pause, the bench
 * measures: how long one report takes to make (cold, the snapshot's background work); the time to
 * answer `/readyz`, `/status`, the page (page 1, and `?connection=`) from the client's side; and
 * `crm-sync status --connection NAME` and `crm-sync status` as processes. The figures go into
 * docs/operations.md. PostgreSQL is embedded, in a temporary folder.
 */
import { NodeHttpServer } from "@effect/platform-node"
import { PgClient } from "@effect/sql-pg"
import { Effect, Fiber, Layer, Redacted } from "effect"
import { FetchHttpClient, HttpRouter } from "effect/http"
import { Reactivity } from "effect/reactivity"
import { SqlClient } from "effect/sql/SqlClient"
import { spawnSync } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { createServer } from "node:http"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { Credentials } from "../../src/crm/Credentials.ts"
import { AdminRoutes } from "../../src/admin/AdminRoutes.ts"
import { scheduledJobs } from "../../src/admin/LagState.ts"
import { statusCharts } from "../../src/admin/StatusCharts.ts"
import { statusReport } from "../../src/admin/StatusReport.ts"
import { DatabaseInfo } from "../../src/warehouse/Database.ts"
import { acquireEmbeddedDatabase } from "../../src/warehouse/EmbeddedDatabase.ts"
import { migrate } from "../../src/warehouse/Migrations.ts"
import { v8FlagsFor } from "../../bin/v8-flags.js"
import { recordFigures } from "./figures.ts"

const argument = (name: string) => {
  const index = process.argv.indexOf(name)
  return index < 0 ? undefined : process.argv[index + 1]
}

const quick = process.argv.includes("--quick")
const CONNECTIONS = Number(argument("--connections") ?? 500)
const RUNS = Number(argument("--runs") ?? (quick ? 10 : 100))
const SAMPLES = quick ? 100 : 400
const main = fileURLToPath(new URL("../../bin/crm-sync.js", import.meta.url))

const names = Array.from({ length: CONNECTIONS }, (_, i) => `firm-${String(i + 1).padStart(4, "0")}`)
const share = (from: number, to: number) => names.slice(Math.floor(CONNECTIONS * from), Math.floor(CONNECTIONS * to))
const LATE = share(0.5, 0.56)
const FAILING = share(0.6, 0.64)
const REAUTH = share(0.7, 0.72)

const document = {
  connections: names.map((name) => ({
    name,
    base_url: "https://crm.example.com",
    credential: "personal",
    token: `token-${name}`
  }))
}

const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))]!

/** `count` sequential GETs of `url`: p50, p99, max in ms. */
const latencies = async (url: string, count: number) => {
  const times: Array<number> = []
  for (let i = 0; i < count; i++) {
    const start = performance.now()
    const response = await fetch(url)
    await response.arrayBuffer()
    if (response.status !== 200) throw new Error(`${url}: ${response.status}`)
    times.push(performance.now() - start)
  }
  const sorted = times.toSorted((a, b) => a - b)
  return { p50: percentile(sorted, 50), p99: percentile(sorted, 99), max: sorted.at(-1)! }
}

/** The job history: RUNS successes of each scheduled job, an hour apart; then the late, the failing, the refused. */
const seed = Effect.gen(function* () {
  const sql = yield* SqlClient
  const jobs = [...new Set(scheduledJobs(yield* AppConfig, new Date()).map((job) => job.job))]
  yield* sql`
    INSERT INTO crm_sync.job_runs (job, connection, status, started_at, finished_at, requests)
    SELECT j.job, c.name, 'succeeded', now() - make_interval(hours => h.h, mins => 2), now() - make_interval(hours => h.h, mins => 1), 3
    FROM generate_series(${RUNS - 1}::int, 0, -1) AS h(h), unnest(${names}::text[]) AS c(name), unnest(${jobs}::text[]) AS j(job)
    ORDER BY h.h DESC, c.name, j.job`
  yield* sql`
    DELETE FROM crm_sync.job_runs
    WHERE connection = ANY(${LATE}::text[]) AND job = 'poll:businesses' AND finished_at > now() - interval '30 minutes'`
  yield* sql`
    INSERT INTO crm_sync.job_runs (job, connection, status, finished_at, error)
    SELECT 'crawl:financial_accounts', c.name, 'failed', now(), 'the CRM answered 503'
    FROM unnest(${FAILING}::text[]) AS c(name)`
  yield* sql`
    INSERT INTO crm_sync.credentials (connection, needs_reauthorization)
    SELECT c.name, true FROM unnest(${REAUTH}::text[]) AS c(name)`
  // Every connection's three buckets in their window (the page charts the fullest).
  yield* sql`
    INSERT INTO crm_sync.rate_windows (bucket, scope, request_limit, window_ms, window_start, used)
    SELECT b.bucket, b.scope, 1000, 3600000, now() - interval '30 minutes', (c.n % 900)::int
    FROM unnest(${names}::text[]) WITH ORDINALITY AS c(name, n),
         LATERAL (VALUES ('token:' || c.name, 'token'), ('company:' || c.name, 'company')) AS b(bucket, scope)
    UNION ALL SELECT 'ip:default', 'ip', 10000, 3600000, now() - interval '30 minutes', 9000`
  yield* sql`ANALYZE crm_sync.job_runs`
  const [row] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM crm_sync.job_runs`
  return row!.n
})

/** How long one `crm-sync` command takes as a process, median of three. */
const command = (args: ReadonlyArray<string>, env: Record<string, string>) => {
  const times: Array<number> = []
  for (let i = 0; i < 3; i++) {
    const start = performance.now()
    const result = spawnSync(process.execPath, [...v8FlagsFor(args), main, ...args], {
      env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", CRM_SYNC_LOG_LEVEL: "warn", ...env },
      encoding: "utf8",
      timeout: 120_000
    })
    if (result.status !== 0) throw new Error(`crm-sync ${args.join(" ")}: ${result.stderr.slice(-500)}`)
    times.push((performance.now() - start) / 1000)
  }
  return times.toSorted((a, b) => a - b)[1]!
}

const bench = Effect.gen(function* () {
  const folder = mkdtempSync(join(tmpdir(), "crm-sync-bench-statusview-"))
  yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(folder, { recursive: true, force: true })))
  const server = yield* acquireEmbeddedDatabase(folder)
  const admin = yield* PgClient.make({ url: server.url, maxConnections: 1 }).pipe(Effect.provide(Reactivity.layer))
  const name = `bench_statusview_${randomBytes(3).toString("hex")}`
  yield* admin.unsafe(`CREATE DATABASE ${name}`)
  const url = new URL(Redacted.value(server.url))
  url.pathname = `/${name}`
  const Database = PgClient.layer({ url: Redacted.make(url.toString()), maxConnections: 8 }).pipe(
    Layer.provide(Reactivity.layer)
  )
  const Base = Layer.mergeAll(
    AppConfig.layerFrom(document),
    Layer.succeed(DatabaseInfo, { kind: "embedded", location: folder })
  ).pipe(Layer.provideMerge(Database))
  yield* Effect.asVoid(migrate).pipe(Effect.provide(Database))
  const rows = yield* seed.pipe(Effect.provide(Base))

  const reportTimes: Array<number> = []
  for (let i = 0; i < 3; i++) {
    const start = performance.now()
    yield* Effect.gen(function* () {
      return yield* statusReport(yield* AppConfig, yield* DatabaseInfo)
    }).pipe(Effect.provide(Base))
    reportTimes.push(performance.now() - start)
  }
  const chartTimes: Array<number> = []
  for (let i = 0; i < 3; i++) {
    const made = yield* Effect.gen(function* () {
      const report = yield* statusReport(yield* AppConfig, yield* DatabaseInfo)
      const start = performance.now()
      yield* statusCharts(report, yield* AppConfig)
      return performance.now() - start
    }).pipe(Effect.provide(Base))
    chartTimes.push(made)
  }

  const port = 20_000 + Math.floor(Math.random() * 20_000)
  const Serve = HttpRouter.serve(AdminRoutes, { disableLogger: true, disableListenLog: true }).pipe(
    Layer.provide(Credentials.layer),
    Layer.provide(FetchHttpClient.layer),
    Layer.provide(NodeHttpServer.layer(createServer, { port, host: "127.0.0.1" })),
    Layer.provide(Base)
  )
  yield* Layer.build(Serve)
  const base = `http://127.0.0.1:${port}`
  yield* Effect.promise(() => latencies(`${base}/status`, 1))
  const quiet = yield* Effect.promise(() => latencies(`${base}/readyz`, SAMPLES))
  const quietStatus = yield* Effect.promise(() => latencies(`${base}/status`, SAMPLES / 4))
  // Four clients asking for the page and /status without pause while the figures are taken.
  const load = yield* Effect.forkChild(
    Effect.forEach(
      [`${base}/`, `${base}/status`, `${base}/?page=3`, `${base}/status`],
      (path) => Effect.forever(Effect.promise(() => fetch(path).then((response) => response.arrayBuffer()))),
      { concurrency: "unbounded", discard: true }
    )
  )
  const readyz = yield* Effect.promise(() => latencies(`${base}/readyz`, SAMPLES))
  const status = yield* Effect.promise(() => latencies(`${base}/status`, SAMPLES / 4))
  const page = yield* Effect.promise(() => latencies(`${base}/`, SAMPLES / 4))
  const one = yield* Effect.promise(() => latencies(`${base}/?connection=${FAILING[0]}`, SAMPLES / 4))
  yield* Fiber.interrupt(load)

  const config = join(folder, "config.json")
  writeFileSync(config, JSON.stringify({ ...document, database_url: url.toString() }))
  const cliOne = command(["status", "--connection", FAILING[0]!], { CRM_SYNC_CONFIG: config })
  const cliAll = command(["status"], { CRM_SYNC_CONFIG: config })
  return {
    rows,
    reportMs: reportTimes.toSorted((a, b) => a - b)[1]!,
    chartsMs: chartTimes.toSorted((a, b) => a - b)[1]!,
    quiet,
    quietStatus,
    readyz,
    status,
    page,
    one,
    cliOne,
    cliAll
  }
})

const result = await Effect.runPromise(Effect.scoped(bench))
const ms = (value: number) => `${value.toFixed(1)} ms`
const timing = (figures: { p50: number; p99: number; max: number }) =>
  `p50 ${ms(figures.p50)}, p99 ${ms(figures.p99)}, max ${ms(figures.max)}`
const met = (ok: boolean) => (ok ? "met" : "**not met**")
const figures = [
  `Measured ${new Date().toISOString().slice(0, 10)} on this machine by \`npx node test/bench/statusview.ts\`: ` +
    `${CONNECTIONS} connections, ${result.rows.toLocaleString("en-US")} job runs in \`crm_sync.job_runs\` ` +
    `(${RUNS} of each scheduled job per connection); "loaded": while four clients ask for the page and \`/status\` without pause ` +
    `(the clients run in the server's own process and share its event loop; PostgreSQL runs beside it on this machine).`,
  "",
  "| what | figure | target |",
  "|---|---|---|",
  `| one status report made (the snapshot's background work) | ${ms(result.reportMs)} | |`,
  `| its charts' data read (once per report, when the page first asks) | ${ms(result.chartsMs)} | |`,
  `| \`/readyz\`, quiet | ${timing(result.quiet)} | p99 ≤ 50 ms: ${met(result.quiet.p99 <= 50)} |`,
  `| \`/status\`, quiet | ${timing(result.quietStatus)} | ≤ 200 ms: ${met(result.quietStatus.max <= 200)} |`,
  `| \`/readyz\`, loaded | ${timing(result.readyz)} | p99 ≤ 50 ms: ${met(result.readyz.p99 <= 50)} |`,
  `| \`/status\`, loaded | ${timing(result.status)} | ≤ 200 ms: ${met(result.status.max <= 200)} |`,
  `| the status page, loaded | ${timing(result.page)} | |`,
  `| the status page \`?connection=\`, loaded | ${timing(result.one)} | |`,
  `| \`crm-sync status --connection NAME\` (process) | ${result.cliOne.toFixed(2)} s | |`,
  `| \`crm-sync status\` (process) | ${result.cliAll.toFixed(2)} s | |`
].join("\n")
console.log(figures)
await recordFigures("statusview", figures)
