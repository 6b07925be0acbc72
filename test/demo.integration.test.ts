/**
 * `npm start` (`crm-sync demo`) as a new user meets it: the bundled sandbox and the whole daemon,
 * nothing configured. Within seconds the warehouse holds every readable resource, the demo's
 * users' changes arrive as webhook deliveries and are applied, the demo's own write goes out
 * through the outbox, `crm-sync doctor` on the demo's config passes beside it, and Ctrl-C ends it
 * cleanly.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn, spawnSync } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { freePort, eventually, get } from "./support/Daemon.ts"
import { freshDatabase } from "./support/TestDatabase.ts"

const main = new URL("../src/main.ts", import.meta.url).pathname

interface Status {
  readonly resources: Record<string, { readonly rows: number }>
  readonly inbox: Record<string, number>
  readonly outbox: Record<string, number>
}

describe("crm-sync demo", () => {
  it.live(
    "syncs the sandbox, applies its users' webhooks, pushes its outbox row, and stops on SIGINT",
    () =>
      Effect.gen(function* () {
        const adminPort = yield* freePort
        const dataDir = mkdtempSync(join(tmpdir(), "crm-sync-demo-"))
        yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dataDir, { recursive: true, force: true })))
        const demo = spawn(process.execPath, [main, "demo", "--records", "300"], {
          env: {
            PATH: process.env.PATH ?? "",
            HOME: process.env.HOME ?? "",
            CRM_SYNC_DATABASE_URL: yield* freshDatabase,
            CRM_SYNC_DATA_DIR: dataDir,
            CRM_SYNC_WEBHOOK_PORT: String(yield* freePort),
            CRM_SYNC_ADMIN_PORT: String(adminPort),
            CRM_SYNC_LOG_LEVEL: "warn"
          },
          stdio: ["ignore", "pipe", "pipe"]
        })
        let output = ""
        demo.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()))
        demo.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()))
        const exited = new Promise<number | null>((resolve) => demo.on("exit", (code) => resolve(code)))
        yield* Effect.addFinalizer(() => Effect.sync(() => demo.kill("SIGKILL")))

        const status = get(`http://127.0.0.1:${adminPort}/status`).pipe(
          Effect.map((answer) => (answer.status === 200 ? (JSON.parse(answer.text) as Status) : undefined))
        )
        const settled = yield* eventually(
          "the demo's first sync, a webhook applied and the outbox row sent",
          status,
          (report) =>
            report !== undefined &&
            report.resources.financial_accounts!.rows > 0 &&
            report.resources.businesses!.rows > 0 &&
            (report.inbox.processed ?? 0) > 0 &&
            (report.outbox.succeeded ?? 0) > 0,
          90
        )
        assert.isAbove(settled!.resources.annuity_contracts!.rows, 0)

        // The first-run check, from another shell, on the demo's setup: every check passes (the
        // ports are held by the demo's own daemon). The demo runs in this process's child, so a
        // blocking run of doctor does not stall it.
        const doctor = spawnSync(process.execPath, [main, "doctor"], {
          encoding: "utf8",
          env: {
            PATH: process.env.PATH ?? "",
            HOME: process.env.HOME ?? "",
            CRM_SYNC_CONFIG: join(dataDir, "demo-config.json"),
            CRM_SYNC_LOG_LEVEL: "warn"
          },
          timeout: 60_000
        })
        assert.strictEqual(doctor.status, 0, `${doctor.stdout}\n${doctor.stderr}`)
        assert.match(doctor.stdout, /^✓ webhook port: port \d+ is held by a running crm-sync/m)
        assert.match(doctor.stdout, /^✓ oauth grant \(sandbox\): /m)
        assert.notMatch(doctor.stdout, /^[✗–] /m)

        demo.kill("SIGINT")
        assert.strictEqual(yield* Effect.promise(() => exited), 0, output.slice(-2000))
      }).pipe(Effect.scoped),
    { timeout: 120_000 }
  )
})
