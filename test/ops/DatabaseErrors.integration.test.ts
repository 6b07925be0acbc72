/**
 * A database crm-sync cannot reach is named with its cause: a wrong password, a closed port and a
 * misspelled database each end a command with one line giving PostgreSQL's (or the socket's)
 * reason and the target (host:port/database), never the password, whether the command applies
 * migrations first (the default) or only checks them.
 */
import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import { inject } from "vitest"
import { freePort } from "../support/Daemon.ts"

const main = new URL("../../src/main.ts", import.meta.url).pathname

/** `crm-sync <args>` with `env`: its exit code, stdout and stderr. */
const crmSync = (args: ReadonlyArray<string>, env: Record<string, string>) =>
  Effect.callback<{ readonly code: number | null; readonly stdout: string; readonly stderr: string }>((resume) => {
    const child = spawn(process.execPath, [main, ...args], {
      env: { PATH: process.env.PATH ?? "", ...env },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()))
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()))
    child.on("exit", (code) => resume(Effect.succeed({ code, stdout, stderr })))
    return Effect.sync(() => child.kill("SIGKILL"))
  })

it.effect(
  "a wrong password, a closed port and a misspelled database: one line with the cause and the target",
  () =>
    Effect.gen(function* () {
      const server = new URL(inject("databaseUrl"))
      const password = server.password
      const wrongPassword = new URL(server)
      wrongPassword.password = "not-the-password-42"
      const closedPort = new URL(server)
      closedPort.port = String(yield* freePort)
      const misspelled = new URL(server)
      misspelled.pathname = "/warehous"
      const cases = [
        {
          url: wrongPassword,
          cause: `password authentication failed for user "${server.username}"`,
          secret: "not-the-password-42"
        },
        { url: closedPort, cause: `ECONNREFUSED 127.0.0.1:${closedPort.port}`, secret: password },
        { url: misspelled, cause: 'database "warehous" does not exist', secret: password }
      ]
      for (const { url, cause, secret } of cases) {
        const target = `${url.hostname}:${url.port}${url.pathname}`
        for (const migrations of ["apply", "check"]) {
          const result = yield* crmSync(["status"], {
            CRM_SYNC_DATABASE_URL: url.toString(),
            CRM_SYNC_MIGRATIONS: migrations,
            CRM_SYNC_LOG_LEVEL: "warn"
          })
          const where = `${cause} (${migrations}): ${result.stderr}`
          assert.strictEqual(result.code, 1, where)
          const lines = result.stderr.trim().split("\n")
          assert.lengthOf(lines, 1, where)
          assert.include(lines[0], cause, where)
          assert.include(lines[0], target, where)
          assert.notInclude(result.stderr + result.stdout, secret, where)
        }
      }
    }),
  { timeout: 120_000 }
)
