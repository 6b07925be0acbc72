/**
 * `crm-sync run` as an operator meets it: a real process against the sandbox and a real
 * PostgreSQL. It syncs, accepts a signed delivery, pushes an outbox row, serves its health and
 * status, and stops cleanly on SIGTERM; with no CRM configured it refuses to start.
 */
import { assert, describe, layer } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer } from "effect"
import { PgClient } from "@effect/sql-pg"
import { spawn, spawnSync } from "node:child_process"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Redacted } from "effect"
import { Reactivity } from "effect/reactivity"
import { Sandbox } from "@crm-sync/sandbox"
import { eventFixture } from "./fixtures/Fixtures.ts"
import { deliverSigned, eventually, freePort, get } from "./support/Daemon.ts"
import { freshDatabase } from "./support/TestDatabase.ts"

const main = new URL("../src/main.ts", import.meta.url).pathname
const SECRET = `whsec_${Buffer.from("crm-sync daemon test secret").toString("base64")}`

const ADMIN_TOKEN = "daemon-test-admin-token"

/** The environment of a daemon syncing the sandbox into `url`, its webhooks on `port`, its admin listener on `adminPort`. */
const daemonEnv = (sandbox: Sandbox["Service"], url: string, port: number, adminPort: number) => ({
  PATH: process.env.PATH ?? "",
  DATABASE_URL: url,
  CRM_BASE_URL: sandbox.baseUrl,
  CRM_TOKEN: sandbox.credentials.personalAccessToken,
  CRM_WEBHOOK_SECRET: SECRET,
  WEBHOOK_PORT: String(port),
  ADMIN_PORT: String(adminPort),
  CRM_SYNC_ADMIN_TOKEN: ADMIN_TOKEN,
  LOG_LEVEL: "warn"
})

/** A signed delivery of a fixture to a running daemon; returns the HTTP status. */
const deliver = (base: string, id: string, body: string) => deliverSigned(base, SECRET, id, body)

layer(
  Sandbox.layer({ records: 300, seed: 3, limits: { personal: { token: 100_000, company: 100_000, ip: 100_000 } } }),
  {
    timeout: 120_000,
    excludeTestServices: true
  }
)("crm-sync run", (it) => {
  it.effect("syncs, accepts webhooks, writes the outbox, serves status, and stops cleanly on SIGTERM", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      const url = yield* freshDatabase
      const port = yield* freePort
      const adminPort = yield* freePort
      const child = spawn(process.execPath, [main, "run"], {
        env: daemonEnv(sandbox, url, port, adminPort),
        stdio: ["ignore", "pipe", "pipe"]
      })
      let output = ""
      child.stdout.on("data", (chunk) => (output += chunk))
      child.stderr.on("data", (chunk) => (output += chunk))
      const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)))
      yield* Effect.addFinalizer(() => Effect.sync(() => child.kill("SIGKILL")))
      const base = `http://127.0.0.1:${port}`
      const admin = `http://127.0.0.1:${adminPort}`
      const authorized = { authorization: `Bearer ${ADMIN_TOKEN}` }

      yield* eventually("readiness", get(`${admin}/readyz`), (response) => response.status === 200)
      assert.strictEqual((yield* get(`${admin}/healthz`)).status, 200)
      assert.strictEqual((yield* get(`${base}/healthz`)).status, 200, "the webhook port answers /healthz")
      yield* eventually("state gauges on /metrics", get(`${admin}/metrics`, authorized), (response) =>
        /crm_sync_outbox_rows\{[^}]*status="needs_review"/.test(response.text)
      )
      // The process's own health beside them: memory, heap, event-loop delay.
      const metrics = (yield* get(`${admin}/metrics`, authorized)).text
      assert.match(metrics, /^crm_sync_process_resident_memory_bytes \d+/m)
      assert.match(metrics, /^crm_sync_process_heap_used_bytes \d+/m)
      assert.match(metrics, /^crm_sync_event_loop_delay_seconds\{quantile="0\.99"\} [\d.e-]+/m)
      // The webhook port faces the internet: nothing for operators there, however it is spelled.
      for (const path of ["/status", "/metrics", "/readyz", "/", "/STATUS", "/status/", "//status", "/%73tatus"]) {
        const response = yield* get(`${base}${path}`)
        assert.strictEqual(response.status, 404, path)
        assert.notInclude(response.text, "crm_sync", path)
      }
      // The admin listener wants its token, except for the probes.
      assert.strictEqual((yield* get(`${admin}/status`)).status, 401)
      assert.strictEqual((yield* get(`${admin}/metrics`)).status, 401)
      assert.strictEqual((yield* get(`${admin}/`, { authorization: "Bearer wrong" })).status, 401)

      // The poller and crawlers fill the warehouse on their first turn.
      const status = yield* eventually(
        "the first sync",
        Effect.map(get(`${admin}/status`, authorized), (response) =>
          response.status === 200 ? JSON.parse(response.text) : {}
        ),
        (report) =>
          report.resources?.businesses?.rows > 0 &&
          report.resources?.financial_accounts?.rows > 0 &&
          report.resources?.annuity_contracts?.rows > 0
      )
      assert.notInclude(JSON.stringify(status), sandbox.credentials.personalAccessToken, "no secret in /status")
      const page = yield* get(`${admin}/`, authorized)
      assert.strictEqual(page.status, 200)
      assert.include(page.text, "<h2>Rate budget</h2>")
      assert.include(page.text, "financial_accounts")
      assert.notInclude(page.text, sandbox.credentials.personalAccessToken, "no secret on the status page")

      // A signed delivery is accepted and applied.
      assert.strictEqual(yield* deliver(base, "msg_daemon_test_1", JSON.stringify(eventFixture("task.created"))), 200)

      const sql = yield* PgClient.make({ url: Redacted.make(url), maxConnections: 1 }).pipe(
        Effect.provide(Reactivity.layer)
      )
      const task = eventFixture("task.created") as { id: string }
      yield* eventually(
        "the task row",
        sql<{ n: number }>`SELECT count(*)::int AS n FROM crm.tasks WHERE id = ${task.id}`.pipe(Effect.orDie),
        (rows) => rows[0]!.n === 1
      )

      // The firm's write goes out.
      const book = (yield* sandbox.admin.state).books[0]!.id
      yield* sql`INSERT INTO crm_sync.outbox (operation, payload)
                 VALUES ('prospect.create', ${JSON.stringify({ book_id: book, first_name: "Daemon", last_name: "Test" })}::jsonb)`.pipe(
        Effect.orDie
      )
      yield* eventually(
        "the outbox row to succeed",
        sql<{ status: string }>`SELECT status FROM crm_sync.outbox`.pipe(Effect.orDie),
        (rows) => rows[0]?.status === "succeeded"
      )

      // SIGTERM: out within 10 seconds, exit code 0.
      const stoppedAt = Date.now()
      child.kill("SIGTERM")
      const code = yield* Effect.promise(() => exited)
      assert.isBelow(Date.now() - stoppedAt, 10_000, "exits within 10 seconds")
      assert.strictEqual(code, 0, output.slice(-2000))
      const jobs = yield* sql<{
        n: number
      }>`SELECT count(*)::int AS n FROM crm_sync.job_runs WHERE status = 'running'`.pipe(Effect.orDie)
      assert.strictEqual(jobs[0]!.n, 0, "no job left marked running")
    }).pipe(Effect.scoped)
  )
})

layer(
  Sandbox.layer({ records: 100, seed: 5, limits: { personal: { token: 100_000, company: 100_000, ip: 100_000 } } }),
  { timeout: 120_000, excludeTestServices: true }
)("crm-sync run killed", (it) => {
  it.effect("a delivery accepted just before kill -9 is applied by the next daemon, once", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      const url = yield* freshDatabase
      const port = yield* freePort
      const adminPort = yield* freePort
      const folder = mkdtempSync(join(tmpdir(), "crm-sync-kill-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(folder, { recursive: true, force: true })))
      // A claim outlives its dead holder by this long (default 2 minutes).
      const configFile = join(folder, "config.json")
      writeFileSync(configFile, JSON.stringify({ webhooks: { lease_timeout: "2 seconds" } }))
      const start = () => {
        const child = spawn(process.execPath, [main, "run"], {
          env: { ...daemonEnv(sandbox, url, port, adminPort), CRM_SYNC_CONFIG: configFile },
          stdio: ["ignore", "ignore", "ignore"]
        })
        const exited = new Promise<NodeJS.Signals | number | null>((resolve) =>
          child.on("exit", (code, signal) => resolve(signal ?? code))
        )
        return { child, exited }
      }
      const base = `http://127.0.0.1:${port}`
      const sql = yield* PgClient.make({ url: Redacted.make(url), maxConnections: 3 }).pipe(
        Effect.provide(Reactivity.layer)
      )
      const task = eventFixture("task.created") as { id: string }
      const tasks = sql<{ n: number }>`SELECT count(*)::int AS n FROM crm.tasks WHERE id = ${task.id}`.pipe(
        Effect.orDie
      )
      const inbox = sql<{ status: string; locked_by: string | null; attempts: number }>`
        SELECT status, locked_by, attempts FROM crm_sync.webhook_inbox WHERE hook_id = 'msg_kill_1'`.pipe(Effect.orDie)

      const first = start()
      yield* Effect.addFinalizer(() => Effect.sync(() => first.child.kill("SIGKILL")))
      yield* eventually("readiness", get(`http://127.0.0.1:${adminPort}/readyz`), (response) => response.status === 200)

      // Hold crm.tasks so the processor claims the delivery and then waits to write it.
      const release = yield* Deferred.make<void>()
      const holding = yield* Deferred.make<void>()
      const holder = yield* Effect.forkChild(
        sql.withTransaction(
          Effect.gen(function* () {
            yield* sql`LOCK TABLE crm.tasks IN SHARE MODE`
            yield* Deferred.succeed(holding, undefined)
            yield* Deferred.await(release)
          })
        )
      )
      yield* Deferred.await(holding)
      assert.strictEqual(yield* deliver(base, "msg_kill_1", JSON.stringify(eventFixture("task.created"))), 200)
      yield* eventually("the processor's claim", inbox, (rows) => rows[0]?.locked_by !== null && rows.length === 1)

      first.child.kill("SIGKILL")
      assert.strictEqual(yield* Effect.promise(() => first.exited), "SIGKILL")
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(holder).pipe(Effect.orDie)
      assert.strictEqual((yield* tasks)[0]!.n, 0, "not applied before the kill")
      assert.notStrictEqual((yield* inbox)[0]!.status, "processed")

      // The next daemon takes the dead process's claim once it has lapsed, and applies it.
      const second = start()
      yield* Effect.addFinalizer(() => Effect.sync(() => second.child.kill("SIGKILL")))
      const processed = yield* eventually("the delivery processed", inbox, (rows) => rows[0]?.status === "processed")
      assert.strictEqual((yield* tasks)[0]!.n, 1)
      assert.strictEqual(processed[0]!.attempts, 2, "claimed by the killed daemon, then by the next")
      second.child.kill("SIGTERM")
      assert.strictEqual(yield* Effect.promise(() => second.exited), 0)
    }).pipe(Effect.scoped)
  )
})

describe("crm-sync run that cannot start", () => {
  layer(Layer.empty)((it) => {
    it.effect("says so in one line when its port is taken", () =>
      Effect.gen(function* () {
        const url = yield* freshDatabase
        const blocker = createServer()
        yield* Effect.promise(() => new Promise<void>((resolve) => blocker.listen(0, () => resolve())))
        yield* Effect.addFinalizer(() => Effect.sync(() => blocker.close()))
        const address = blocker.address()
        const port = typeof address === "object" && address !== null ? address.port : 0
        const result = spawnSync(process.execPath, [main, "run"], {
          encoding: "utf8",
          env: {
            PATH: process.env.PATH ?? "",
            DATABASE_URL: url,
            CRM_BASE_URL: "http://127.0.0.1:9",
            CRM_TOKEN: "crm_pat_unused",
            WEBHOOK_PORT: String(port),
            LOG_LEVEL: "error"
          },
          timeout: 60_000
        })
        assert.strictEqual(result.status, 1)
        assert.match(result.stderr.trim(), new RegExp(`^crm-sync: .*EADDRINUSE.*${port}$`))
      }).pipe(Effect.scoped)
    )

    it.effect("refuses to start, saying what to configure", () =>
      Effect.gen(function* () {
        const url = yield* freshDatabase
        const result = spawnSync(process.execPath, [main, "run"], {
          encoding: "utf8",
          env: { PATH: process.env.PATH ?? "", DATABASE_URL: url },
          timeout: 60_000
        })
        assert.strictEqual(result.status, 1)
        assert.match(result.stderr.trim(), /^crm-sync: no CRM is configured: set CRM_BASE_URL and CRM_TOKEN/)
        assert.strictEqual(result.stderr.trim().split("\n").length, 1)
      }).pipe(Effect.scoped)
    )
  })
})
