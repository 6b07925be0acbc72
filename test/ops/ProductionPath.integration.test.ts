/**
 * The production path as shipped, on a real PostgreSQL: ops/sql/roles.sql on a fresh database,
 * the Deployment's migrate step (its init container, with the owner's URL from the owner's
 * Secret), then the daemon as crm_sync_runtime with exactly the environment the shipped Deployment
 * gives its container: read from ops/kubernetes/crm-sync.yaml, the Secret's keys as its
 * instructions list them, the ConfigMap's mount pointing at ops/kubernetes/config.json as shipped.
 * Only the two listening ports are moved to free ones (the machine is shared). The daemon gets
 * ready; when its role's password changes under it, `/readyz` and the log name PostgreSQL's
 * reason and the database, never a password.
 */
import { PgClient } from "@effect/sql-pg"
import { assert, it } from "@effect/vitest"
import { Effect, Redacted } from "effect"
import { Reactivity } from "effect/reactivity"
import { spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { readFileSync } from "node:fs"
import { splitStatements } from "../../src/warehouse/Migrations.ts"
import { eventually, freePort, get } from "../support/Daemon.ts"
import { freshDatabase } from "../support/TestDatabase.ts"
import { containerEnv, containersOf, manifestObjects } from "./manifests.ts"

const main = new URL("../../src/main.ts", import.meta.url).pathname
const kubernetes = new URL("../../ops/kubernetes/", import.meta.url).pathname
const manifests = readFileSync(new URL("crm-sync.yaml", `file://${kubernetes}`), "utf8")
const rolesScript = readFileSync(new URL("../../ops/sql/roles.sql", import.meta.url), "utf8")

/** `url` logged in as `role` with `password`. */
const as = (url: string, role: string, password: string) => {
  const parsed = new URL(url)
  parsed.username = role
  parsed.password = password
  return parsed.toString()
}

/** The keys the instructions put in Secret `name` (`kubectl create secret generic <name> --from-literal=KEY=...`). */
const secretKeys = (name: string): ReadonlyArray<string> => {
  const command = new RegExp(`kubectl create secret generic ${name} \\\\\\n((?:#[^\\n]*\\\\\\n)*#[^\\n]*)`)
  const match = command.exec(manifests)
  assert.isNotNull(match, `the manifest's instructions create the Secret ${name}`)
  return [...match![1]!.matchAll(/--from-literal=([A-Z_]+)=/g)].map((key) => key[1]!)
}

/** A stand-in value for each key of the runtime's Secret. */
const secretValue = (key: string, databaseUrl: string) =>
  key === "CRM_SYNC_DATABASE_URL"
    ? databaseUrl
    : key === "CRM_SYNC_ENCRYPTION_KEY"
      ? randomBytes(32).toString("base64")
      : key.startsWith("CRM_WEBHOOK_SECRET")
        ? `whsec_${randomBytes(24).toString("base64")}`
        : randomBytes(12).toString("hex")

/** The daemon's JSON log lines. */
const logLines = (output: string): ReadonlyArray<{ readonly message: string; readonly level: string }> =>
  output.split("\n").flatMap((line) => {
    if (!line.startsWith("{")) return []
    const parsed = JSON.parse(line)
    return typeof parsed.msg === "string" ? [{ message: parsed.msg, level: String(parsed.level) }] : []
  })

/** Runs `crm-sync <args>` with exactly `env`; its exit code and output. */
const crmSync = (args: ReadonlyArray<string>, env: Record<string, string>) =>
  Effect.callback<{ readonly code: number | null; readonly output: string }>((resume) => {
    const child = spawn(process.execPath, [main, ...args], { env, stdio: ["ignore", "pipe", "pipe"] })
    let output = ""
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()))
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()))
    child.on("exit", (code) => resume(Effect.succeed({ code, output })))
    return Effect.sync(() => child.kill("SIGKILL"))
  })

it.live(
  "roles.sql, the owner's migrate step, then the daemon as crm_sync_runtime with the Deployment's environment",
  () =>
    Effect.gen(function* () {
      const url = yield* freshDatabase
      const admin = yield* PgClient.make({ url: Redacted.make(url), maxConnections: 1 }).pipe(
        Effect.provide(Reactivity.layer)
      )
      for (const statement of splitStatements(rolesScript)) yield* admin.unsafe(statement)
      const ownerPassword = randomBytes(9).toString("hex")
      const runtimePassword = randomBytes(9).toString("hex")
      yield* admin.unsafe(`ALTER ROLE crm_sync_owner PASSWORD '${ownerPassword}'`)
      yield* admin.unsafe(`ALTER ROLE crm_sync_runtime PASSWORD '${runtimePassword}'`)

      const secrets = {
        "crm-sync": Object.fromEntries(
          secretKeys("crm-sync").map((key) => [key, secretValue(key, as(url, "crm_sync_runtime", runtimePassword))])
        ),
        "crm-sync-owner": Object.fromEntries(
          secretKeys("crm-sync-owner").map((key) => [key, secretValue(key, as(url, "crm_sync_owner", ownerPassword))])
        )
      }
      const deployment = containersOf(manifestObjects(manifests), "Deployment", "crm-sync")
      const system = { PATH: process.env.PATH ?? "" }

      // The migrate step, as the Deployment's init container runs it.
      assert.lengthOf(deployment.init, 1, "one init container: the migrate step")
      const step = deployment.init[0]!
      assert.deepStrictEqual(step.args, ["migrate"])
      const migrated = yield* crmSync(step.args, { ...system, ...containerEnv(step, secrets) })
      assert.strictEqual(migrated.code, 0, migrated.output)
      assert.match(migrated.output, /applied \d+ migration\(s\)/)
      // Run again (the next pod's start): nothing to do.
      const again = yield* crmSync(step.args, { ...system, ...containerEnv(step, secrets) })
      assert.strictEqual(again.code, 0, again.output)
      assert.include(again.output, "warehouse is up to date")

      // The daemon, as the Deployment's container runs it.
      const [container] = deployment.main
      const env = containerEnv(container!, secrets)
      assert.strictEqual(env.CRM_SYNC_MIGRATIONS, "check")
      assert.strictEqual(env.CRM_SYNC_CONFIG, "/etc/crm-sync/config.json")
      const adminPort = yield* freePort
      const shipped: Record<string, string> = {
        ...env,
        // The ConfigMap is made from ops/kubernetes/config.json and mounted at /etc/crm-sync.
        CRM_SYNC_CONFIG: `${kubernetes}config.json`,
        CRM_SYNC_WEBHOOK_PORT: String(yield* freePort),
        CRM_SYNC_ADMIN_PORT: String(adminPort)
      }
      const child = spawn(process.execPath, [main, ...container!.args], {
        env: { ...system, ...shipped },
        stdio: ["ignore", "pipe", "pipe"]
      })
      let output = ""
      child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()))
      child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()))
      const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)))
      yield* Effect.addFinalizer(() => Effect.sync(() => child.kill("SIGKILL")))
      const readyz = get(`http://127.0.0.1:${adminPort}/readyz`)
      const ready = yield* eventually(
        "readiness",
        readyz,
        (response) => response.status === 200 || child.exitCode !== null,
        60
      )
      assert.strictEqual(ready.status, 200, output.slice(-2000))

      // Its role's password changes and its connections drop: /readyz and the log say why.
      yield* admin.unsafe(`ALTER ROLE crm_sync_runtime PASSWORD '${randomBytes(9).toString("hex")}'`)
      yield* admin.unsafe("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'crm_sync_runtime'")
      // (A request may first meet a pooled connection as it is cut: "Connection closed".)
      const refused = 'password authentication failed for user "crm_sync_runtime"'
      const unready = yield* eventually(
        "unreadiness naming the cause",
        readyz,
        (response) => response.status === 503 && response.text.includes(refused),
        60
      )
      const target = `${new URL(url).hostname}:${new URL(url).port}${new URL(url).pathname}`
      assert.include(unready.text, target)
      assert.notInclude(unready.text, runtimePassword)
      const warning = yield* eventually(
        "the log naming the cause",
        Effect.sync(() =>
          logLines(output).find((line) => line.message.startsWith("not ready") && line.message.includes(refused))
        ),
        (line) => line !== undefined,
        60
      )
      assert.strictEqual(warning!.level, "warn")
      assert.include(warning!.message, target)
      assert.notInclude(output, runtimePassword)
      child.kill("SIGTERM")
      assert.strictEqual(yield* Effect.promise(() => exited), 0, output.slice(-2000))
    }).pipe(Effect.scoped),
  { timeout: 240_000 }
)
