/**
 * The command line as a user meets it: a real `node src/main.ts` process, its output and its
 * exit code.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn, spawnSync } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { freshDatabase } from "./support/TestDatabase.ts"

const main = new URL("../src/main.ts", import.meta.url).pathname
const shim = new URL("../bin/crm-sync.js", import.meta.url).pathname

const cli = (args: ReadonlyArray<string>, env: Record<string, string> = {}) => {
  const result = spawnSync(process.execPath, [main, ...args], {
    encoding: "utf8",
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", ...env },
    timeout: 60_000
  })
  return { code: result.status, stdout: result.stdout, stderr: result.stderr }
}

describe("crm-sync CLI", () => {
  it("--help lists the commands", () => {
    const { code, stdout } = cli(["--help"])
    assert.strictEqual(code, 0)
    for (const command of [
      "doctor",
      "run",
      "backfill",
      "reconcile",
      "demo",
      "migrate",
      "status",
      "connect",
      "outbox",
      "webhooks",
      "sandbox"
    ])
      assert.match(stdout, new RegExp(`^\\s+${command}\\s`, "m"))
  })

  it("a bad config value prints one line naming the variable set and exits 2", () => {
    const { code, stderr } = cli(["status"], { WEBHOOK_PORT: "eighty" })
    assert.strictEqual(code, 2)
    assert.strictEqual(stderr.trim().split("\n").length, 1)
    assert.match(stderr, /^config: WEBHOOK_PORT: /)
  })

  it("an unknown command exits 2", () => {
    assert.strictEqual(cli(["frobnicate"]).code, 2)
  })

  it("a resource backfill does not know is bad usage, named with the choices, before anything else", () => {
    // No CRM configured: the flag is refused first (exit 2), not the missing connection (exit 1).
    const { code, stderr } = cli(["backfill", "--resource", "nope"])
    assert.strictEqual(code, 2)
    assert.include(stderr, 'Invalid value for flag --resource: "nope"')
    for (const name of ["businesses", "annuity_contracts", "financial_accounts", "reference", "books"])
      assert.include(stderr, `"${name}"`)
  })

  it.live("migrate applies every migration once; a second run changes nothing; status --json reports", () =>
    Effect.gen(function* () {
      const url = yield* freshDatabase
      const first = cli(["migrate"], { DATABASE_URL: url })
      assert.strictEqual(first.code, 0, first.stderr)
      assert.match(first.stdout, /applied \d+ migration/)
      const second = cli(["migrate"], { DATABASE_URL: url })
      assert.strictEqual(second.code, 0, second.stderr)
      assert.match(second.stdout, /up to date/)
      const status = cli(["status", "--json"], { DATABASE_URL: url })
      assert.strictEqual(status.code, 0, status.stderr)
      const report = JSON.parse(status.stdout)
      assert.strictEqual(report.database.kind, "external")
      assert.notInclude(status.stdout, url, "the database URL (with its password) is never printed")
      assert.deepStrictEqual(report.inbox, {})
    }).pipe(Effect.scoped)
  )

  it("with no DATABASE_URL, migrate creates an embedded database that persists", () => {
    const dataDir = mkdtempSync(join(tmpdir(), "crm-sync-cli-"))
    try {
      const first = cli(["migrate"], { CRM_SYNC_DATA_DIR: dataDir })
      assert.strictEqual(first.code, 0, first.stderr)
      assert.match(first.stdout, /applied \d+ migration\(s\) to embedded/)
      const second = cli(["migrate"], { CRM_SYNC_DATA_DIR: dataDir })
      assert.strictEqual(second.code, 0, second.stderr)
      assert.match(second.stdout, /up to date \(embedded/)
    } finally {
      rmSync(dataDir, { recursive: true, force: true })
    }
  })
  it("--help lists every environment variable, old names beside the new", () => {
    const { stdout } = cli(["--help"])
    assert.match(stdout, /^ENVIRONMENT$/m)
    assert.match(stdout, /CRM_SYNC_DATABASE_URL\s+PostgreSQL URL .*\(also DATABASE_URL\)/)
    assert.match(stdout, /CRM_SYNC_ADMIN_PORT\s+.*\(default: 9090\)/)
    assert.include(cli(["backfill", "--help"]).stdout, "see crm-sync --help")
  })

  it.live("the installed command exits 128 + the signal's number when its Node process is killed", () =>
    Effect.gen(function* () {
      // Started without crm-sync's V8 flags, the shim runs the command in a child Node process.
      const started = spawn(process.execPath, [shim, "sandbox", "--port", "0", "--records", "10"], {
        env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "" },
        stdio: ["ignore", "pipe", "inherit"]
      })
      const exited = new Promise<number | null>((resolve) => started.on("exit", (code) => resolve(code)))
      yield* Effect.promise(
        () =>
          new Promise<void>((resolve) => {
            let seen = ""
            started.stdout.on("data", (chunk: Buffer) => {
              seen += chunk.toString()
              if (seen.includes("CRM sandbox ready")) resolve()
            })
          })
      )
      const children = spawnSync("pgrep", ["-P", String(started.pid)], { encoding: "utf8" })
        .stdout.trim()
        .split("\n")
      assert.strictEqual(children.length, 1, "one child process")
      process.kill(Number(children[0]), "SIGKILL")
      assert.strictEqual(yield* Effect.promise(() => exited), 137)
    })
  )
})
