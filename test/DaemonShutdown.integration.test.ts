/**
 * `crm-sync run` with fifty connections whose books overlap (one user's token, fifty times), stopped
 * by SIGTERM during its start, while first crawls are in flight: it stops taking jobs, interrupts
 * the ones in hand (at most `sync.workers` of them), and exits with code 0, every run closed (none
 * left `running`). The time limit
 * below only detects a hang; the 10-second figure of the contract is measured by the benchmark.
 */
import { assert, layer } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Effect, Redacted } from "effect"
import { Reactivity } from "effect/reactivity"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Sandbox } from "@crm-sync/sandbox"
import { eventually, freePort, get, startDaemon } from "./support/Daemon.ts"
import { freshDatabase } from "./support/TestDatabase.ts"

const CONNECTIONS = 50
const unthrottled = { token: 1_000_000, company: 1_000_000, ip: 1_000_000 }

layer(Sandbox.layer({ records: 2000, seed: 7, limits: { personal: unthrottled } }), {
  timeout: 180_000,
  excludeTestServices: true
})("crm-sync run with many connections", (it) => {
  it.effect("stops on SIGTERM during its start: exit code 0, the pool's runs interrupted, none left running", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      const url = yield* freshDatabase
      const adminPort = yield* freePort
      const folder = mkdtempSync(join(tmpdir(), "crm-sync-shutdown-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(folder, { recursive: true, force: true })))
      const configFile = join(folder, "config.json")
      writeFileSync(
        configFile,
        JSON.stringify({
          connections: Array.from({ length: CONNECTIONS }, (_, i) => ({
            name: `advisor-${i + 1}`,
            base_url: sandbox.baseUrl,
            credential: "personal",
            token: sandbox.credentials.personalAccessToken,
            limits: unthrottled
          }))
        })
      )
      // Every page answered a little late, so the first crawls are still in flight at the signal.
      yield* sandbox.admin.addFault({ kind: "latency", ms: 50, path: "/v1/financial_accounts" })
      const daemon = yield* startDaemon({
        DATABASE_URL: url,
        CRM_SYNC_CONFIG: configFile,
        WEBHOOK_PORT: String(yield* freePort),
        ADMIN_PORT: String(adminPort),
        LOG_LEVEL: "warn"
      })
      const exited = Effect.callback<number | null>((resume) => {
        if (daemon.child.exitCode !== null) return resume(Effect.succeed(daemon.child.exitCode))
        daemon.child.once("exit", (code) => resume(Effect.succeed(code)))
      })
      const sql = yield* PgClient.make({ url: Redacted.make(url), maxConnections: 1 }).pipe(
        Effect.provide(Reactivity.layer)
      )
      yield* eventually("readiness", get(`http://127.0.0.1:${adminPort}/readyz`), (response) => response.status === 200)
      // Mid-start: crawls have stored pages, and runs are open.
      yield* eventually(
        "crawls in flight",
        sql<{ pages: number; open: number }>`
          SELECT (SELECT count(*)::int FROM crm_sync.crawl_runs WHERE last_page > 0) AS pages,
                 (SELECT count(*)::int FROM crm_sync.job_runs WHERE status = 'running') AS open`.pipe(Effect.orDie),
        (rows) => rows[0]!.pages > 0 && rows[0]!.open > 0,
        60
      )

      daemon.child.kill("SIGTERM")
      // A hang detector, not a measure: the contract's 10 seconds is the benchmark's to show.
      const code = yield* exited.pipe(
        Effect.timeout("60 seconds"),
        Effect.orElseSucceed(() => "hung" as const)
      )
      assert.strictEqual(code, 0, `exit code after SIGTERM; the log's end:\n${daemon.output().slice(-3000)}`)
      const runs = yield* sql<{ open: number; interrupted: number }>`
        SELECT count(*) FILTER (WHERE status = 'running')::int AS open,
               count(*) FILTER (WHERE status = 'interrupted')::int AS interrupted
        FROM crm_sync.job_runs`.pipe(Effect.orDie)
      assert.strictEqual(runs[0]!.open, 0, "every run closed (interrupted or finished)")
      // The work in hand at the signal was the pool's (sync.workers, default 4), not every connection's.
      assert.isAtMost(runs[0]!.interrupted, 4, `runs interrupted by the signal: ${runs[0]!.interrupted}`)
    }).pipe(Effect.scoped)
  )
})
