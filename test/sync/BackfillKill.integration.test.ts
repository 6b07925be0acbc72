/**
 * kill -9 during a backfill: a backfill runs as its own process (test/sync/backfill-process.ts)
 * against the in-process sandbox and a fresh database, and is killed with SIGKILL while it crawls
 * financial accounts. The daemon's orphan sweep marks its runs interrupted (its leases lapsed
 * with its session). A second backfill then completes: it does not read again what the killed
 * one stored (neither the resources it finished nor the pages of the crawl it was in), leaves no
 * duplicates, and the warehouse equals the sandbox.
 */
import { PgClient } from "@effect/sql-pg"
import { assert, layer } from "@effect/vitest"
import { Context, Effect, Layer, Redacted } from "effect"
import { FetchHttpClient } from "effect/http"
import { SqlClient } from "effect/sql/SqlClient"
import { type ChildProcess, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { RateBudget } from "../../src/budget/RateBudget.ts"
import { Credentials } from "../../src/crm/Credentials.ts"
import { Sandbox } from "@crm-sync/sandbox"
import { backfill } from "../../src/sync/Backfill.ts"
import { SyncServicesLive, sweepOrphans } from "../../src/sync/SyncJobs.ts"
import { migrate } from "../../src/warehouse/Migrations.ts"
import { Warehouse } from "../../src/warehouse/Warehouse.ts"
import { freshDatabase } from "../support/TestDatabase.ts"
import { compareTable } from "./compare.ts"
import { listAll, pagesAsked, requestsSince, unthrottled } from "./harness.ts"

/** The URL of this file's database, for the child process. */
class DatabaseUrl extends Context.Service<DatabaseUrl, string>()("test/sync/DatabaseUrl") {}

const database = Layer.unwrap(
  Effect.map(freshDatabase, (url) =>
    Layer.effectDiscard(Effect.asVoid(migrate)).pipe(
      Layer.provideMerge(PgClient.layer({ url: Redacted.make(url), maxConnections: 8 })),
      Layer.provideMerge(Layer.succeed(DatabaseUrl, url))
    )
  )
)

const sandbox = Sandbox.layer({ seed: 5, records: 4000, limits: { personal: unthrottled } })

const config = Layer.unwrap(
  Effect.map(Sandbox, (running) =>
    AppConfig.layerFrom({
      connections: [
        {
          name: "default",
          base_url: running.baseUrl,
          credential: "personal",
          token: running.credentials.personalAccessToken,
          limits: unthrottled
        }
      ]
    })
  )
)

const TestLayer = Layer.mergeAll(Warehouse.layer, RateBudget.layer, Credentials.layer).pipe(
  Layer.provideMerge(FetchHttpClient.layer),
  Layer.provideMerge(config),
  Layer.provideMerge(sandbox),
  Layer.provideMerge(database)
)

const script = fileURLToPath(new URL("./backfill-process.ts", import.meta.url))

/** Starts the backfill process; its output is kept for the failure message. */
const startBackfillProcess = Effect.gen(function* () {
  const running = yield* Sandbox
  const url = yield* DatabaseUrl
  const output: Array<string> = []
  const child = yield* Effect.acquireRelease(
    Effect.sync(() => {
      // process.execPath: the Node that runs the tests (24, via the `node` dev dependency), started
      // directly so that SIGKILL reaches the backfill itself and not a wrapper.
      const process_ = spawn(process.execPath, [script], {
        env: {
          ...process.env,
          DATABASE_URL: url,
          CRM_BASE_URL: running.baseUrl,
          CRM_TOKEN: running.credentials.personalAccessToken,
          CRM_TOKEN_KIND: "personal",
          CRM_SYNC_CONFIG: "",
          LOG_LEVEL: "info"
        },
        stdio: ["ignore", "pipe", "pipe"]
      })
      process_.stdout.on("data", (chunk: Buffer) => output.push(chunk.toString()))
      process_.stderr.on("data", (chunk: Buffer) => output.push(chunk.toString()))
      return process_
    }),
    (process_) =>
      Effect.sync(() => process_.exitCode === null && process_.signalCode === null && process_.kill("SIGKILL"))
  )
  return { child, output }
})

const exited = (child: ChildProcess) =>
  Effect.callback<{ readonly code: number | null; readonly signal: string | null }>((resume) => {
    if (child.exitCode !== null || child.signalCode !== null) {
      resume(Effect.succeed({ code: child.exitCode, signal: child.signalCode }))
      return
    }
    child.once("exit", (code, signal) => resume(Effect.succeed({ code, signal })))
  })

layer(TestLayer, { timeout: 180_000, excludeTestServices: true })("backfill after kill -9", (it) => {
  it.effect("completes without reading stored pages again, and without duplicates", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const running = yield* Sandbox
      // Slow financial-account pages, so that the process is surely killed in the middle of them.
      yield* running.admin.addFault({ kind: "latency", ms: 250, path: "/v1/financial_accounts" })
      const { child, output } = yield* startBackfillProcess

      const killedAt = yield* Effect.gen(function* () {
        while (true) {
          const [run] = yield* sql<{ last_page: number }>`
            SELECT last_page FROM crm_sync.crawl_runs WHERE resource = 'financial_accounts' AND source = 'backfill'`
          if ((run?.last_page ?? 0) >= 4) {
            child.kill("SIGKILL")
            return run!.last_page
          }
          if (child.exitCode !== null) return assert.fail(`the backfill process ended early:\n${output.join("")}`)
          yield* Effect.sleep("10 millis")
        }
      })
      const exit = yield* exited(child)
      assert.strictEqual(exit.signal, "SIGKILL")
      yield* running.admin.clearFaults

      const [killed] = yield* sql<{ status: string; last_page: number; total_pages: number }>`
        SELECT status, last_page, total_pages FROM crm_sync.crawl_runs
        WHERE resource = 'financial_accounts' AND source = 'backfill'`
      assert.strictEqual(killed!.status, "running")
      assert.isAtLeast(killed!.last_page, killedAt)
      assert.isBelow(killed!.last_page, killed!.total_pages, "killed in the middle of the crawl")
      const storedPages = killed!.last_page

      // The killed process's leases lapsed with its session: the daemon's orphan sweep marks its
      // runs interrupted (a live process's runs it leaves alone: their leases are held).
      const swept = yield* sweepOrphans.pipe(Effect.provide(SyncServicesLive))
      assert.strictEqual(swept, 2, "the backfill's run and its financial-account run")
      const [marked] = yield* sql<{ status: string; error: string }>`
        SELECT status, error FROM crm_sync.crawl_runs WHERE resource = 'financial_accounts' AND source = 'backfill'`
      assert.strictEqual(marked!.status, "interrupted")
      assert.include(marked!.error, "the next run resumes it")
      const [open] = yield* sql<{
        n: number
      }>`SELECT count(*)::int AS n FROM crm_sync.job_runs WHERE status = 'running'`
      assert.strictEqual(open!.n, 0)

      const resumedAt = Date.parse((yield* running.admin.state).now)
      const summary = yield* backfill({ progress: "none" })
      const requests = (yield* requestsSince(0)).filter((entry) => Date.parse(entry.at) >= resumedAt)

      // Only the rest of the interrupted crawl was read: no resource the killed process finished,
      // no page it stored.
      assert.isTrue(requests.every((entry) => entry.path === "/v1/financial_accounts"))
      assert.deepStrictEqual(
        pagesAsked(requests, "/v1/financial_accounts"),
        Array.from({ length: killed!.total_pages - storedPages }, (_, i) => storedPages + 1 + i)
      )
      assert.deepStrictEqual(
        summary.rows.map((row) => [row.resource, row.status, row.resumedFrom ?? null]),
        [
          ["reference", "done earlier", null],
          ["businesses", "done earlier", null],
          ["annuity_contracts", "done earlier", null],
          ["financial_accounts", "done", storedPages + 1]
        ]
      )

      // No duplicates, nothing missing: every table equals the sandbox.
      for (const [table, path] of [
        ["businesses", "/v1/businesses"],
        ["annuity_contracts", "/v1/annuity_contracts"],
        ["financial_accounts", "/v1/financial_accounts"]
      ] as const) {
        assert.deepStrictEqual(yield* compareTable(table, yield* listAll(path)), [], table)
      }
      const [runs] = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM crm_sync.crawl_runs WHERE resource = 'financial_accounts'`
      assert.strictEqual(runs!.n, 1, "the killed crawl was resumed, not started again")

      // The killed process's runs are closed as interrupted; the resumed ones succeeded.
      const jobs = yield* sql<{ job: string; status: string }>`
        SELECT job, status FROM crm_sync.job_runs WHERE job IN ('backfill', 'backfill:financial_accounts') ORDER BY id`
      assert.deepStrictEqual(
        jobs.map((job) => [job.job, job.status]),
        [
          ["backfill", "interrupted"],
          ["backfill:financial_accounts", "interrupted"],
          ["backfill", "succeeded"],
          ["backfill:financial_accounts", "succeeded"]
        ]
      )
    })
  )
})
