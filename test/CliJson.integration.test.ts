/**
 * `--json` as a script uses it: each command prints exactly one JSON object on stdout (logs and
 * progress stay on stderr) — migrate, backfill, reconcile, webhooks replay, outbox retry, status, plan.
 * (It found that every log line went to stdout: Logger.consoleJson ignores LogToStderr.)
 */
import { PgClient } from "@effect/sql-pg"
import { assert, layer } from "@effect/vitest"
import { Effect, Redacted } from "effect"
import { Reactivity } from "effect/reactivity"
import { spawn } from "node:child_process"
import { Sandbox } from "@crm-sync/sandbox"
import { freshDatabase } from "./support/TestDatabase.ts"

const main = new URL("../src/main.ts", import.meta.url).pathname

/** Runs crm-sync to its end (not blocking: the sandbox answers from this process). */
const cli = (args: ReadonlyArray<string>, env: Record<string, string>) =>
  Effect.callback<{ readonly code: number | null; readonly stdout: string; readonly stderr: string }>((resume) => {
    const child = spawn(process.execPath, [main, ...args], {
      env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", LOG_LEVEL: "info", ...env },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()))
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()))
    child.on("exit", (code) => resume(Effect.succeed({ code, stdout, stderr })))
    return Effect.sync(() => child.kill("SIGKILL"))
  })

/** stdout is one JSON object, and nothing else. */
const oneObject = (result: { readonly stdout: string; readonly stderr: string }) => {
  const lines = result.stdout.trim().split("\n")
  assert.strictEqual(lines.length, 1, `one line on stdout:\n${result.stdout}\nstderr:\n${result.stderr.slice(-1500)}`)
  const value = JSON.parse(lines[0]!)
  assert.isTrue(typeof value === "object" && value !== null && !Array.isArray(value), lines[0])
  return value as Record<string, any>
}

layer(
  Sandbox.layer({ records: 120, seed: 9, limits: { personal: { token: 100_000, company: 100_000, ip: 100_000 } } }),
  { timeout: 180_000, excludeTestServices: true }
)("--json", (it) => {
  it.effect(
    "every scripted command prints one JSON object on stdout",
    () =>
      Effect.gen(function* () {
        const sandbox = yield* Sandbox
        const url = yield* freshDatabase
        const env = {
          DATABASE_URL: url,
          CRM_BASE_URL: sandbox.baseUrl,
          CRM_TOKEN: sandbox.credentials.personalAccessToken
        }

        const migrated = oneObject(yield* cli(["migrate", "--json"], env))
        assert.isAbove(migrated.applied.length, 10)
        assert.strictEqual(migrated.database.kind, "external")
        assert.deepStrictEqual(oneObject(yield* cli(["migrate", "--json"], env)).applied, [])

        const backfill = yield* cli(["backfill", "--json"], env)
        assert.strictEqual(backfill.code, 0, backfill.stderr.slice(-1500))
        assert.include(backfill.stderr, '"msg":"crawl: complete"', "log lines on stderr")
        const summary = oneObject(backfill)
        assert.isTrue(summary.ok)
        assert.deepStrictEqual(
          summary.rows.map((row: { resource: string; status: string }) => [row.resource, row.status]),
          [
            ["reference", "done"],
            ["businesses", "done"],
            ["annuity_contracts", "done"],
            ["financial_accounts", "done"]
          ]
        )

        const reconcile = oneObject(yield* cli(["reconcile", "--json"], env))
        assert.isTrue(reconcile.ok)
        assert.strictEqual(reconcile.reports[0].connection, "default")

        assert.deepStrictEqual(oneObject(yield* cli(["webhooks", "replay", "--dead", "--json"], env)), {
          replayed: 0,
          left_dead: 0
        })

        const sql = yield* PgClient.make({ url: Redacted.make(url), maxConnections: 1 }).pipe(
          Effect.provide(Reactivity.layer)
        )
        const [row] = yield* sql<{ id: number }>`
          INSERT INTO crm_sync.outbox (operation, payload, status, error)
          VALUES ('prospect.create', '{"first_name": "A"}'::jsonb, 'needs_review', 'payload.book_id: Missing key')
          RETURNING id::int AS id`
        const retried = oneObject(yield* cli(["outbox", "retry", String(row!.id), "--json"], env))
        assert.deepStrictEqual(
          { id: retried.id, changed: retried.changed, status: retried.status },
          { id: row!.id, changed: true, status: "pending" }
        )

        const status = oneObject(yield* cli(["status", "--json"], env))
        assert.isAbove(status.resources.financial_accounts.rows, 0)
        // The history: one version per account the backfill wrote.
        assert.strictEqual(
          status.resources.financial_accounts.history.versions,
          status.resources.financial_accounts.rows
        )

        // Without --json, ages a person reads at a glance.
        const text = yield* cli(["status"], env)
        assert.match(text.stdout, /financial_accounts\s+\d+\s+\d+\s+(< 1 s|\d+ s|\d+ min) ago/)
        assert.match(text.stdout, /job {9}\S+ \(default\): succeeded (< 1 s|\d+ s|\d+ min) ago/, text.stdout)

        const plan = oneObject(yield* cli(["plan", "--json"], env))
        assert.deepStrictEqual(
          plan.connections.map((connection: { connection: string }) => connection.connection),
          ["default"]
        )
        // The history's growth: a first backfill ended no version (each row is its own current one).
        assert.strictEqual(status.resources.financial_accounts.history.last_day, 0)
        assert.strictEqual(plan.history_versions_per_day.financial_accounts, 0)
      }).pipe(Effect.scoped),
    { timeout: 180_000 }
  )
})
