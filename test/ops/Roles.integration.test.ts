/**
 * ops/sql/roles.sql on a real PostgreSQL: applied to an empty warehouse database, the migration
 * owner migrates it; the runtime role, with `migrations: check`, runs a whole `crm-sync backfill`
 * against the sandbox but cannot run DDL (nor apply migrations), and refuses to start while a
 * migration is pending; the analysts' role reads schema crm and nothing of crm_sync.
 */
import { PgClient } from "@effect/sql-pg"
import { assert, layer } from "@effect/vitest"
import { Cause, Effect, Exit, Redacted } from "effect"
import { Reactivity } from "effect/reactivity"
import { SqlClient } from "effect/sql/SqlClient"
import { spawn } from "node:child_process"
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Sandbox } from "@crm-sync/sandbox"
import { checkMigratedFrom, migrate, migrationsDirectory, splitStatements } from "../../src/warehouse/Migrations.ts"
import { freshDatabase } from "../support/TestDatabase.ts"

const main = new URL("../../src/main.ts", import.meta.url).pathname
const rolesScript = readFileSync(new URL("../../ops/sql/roles.sql", import.meta.url), "utf8")

/** `url` logged in as `role`. */
const as = (url: string, role: string) => {
  const parsed = new URL(url)
  parsed.username = role
  parsed.password = `${role}-secret`
  return parsed.toString()
}

/** A client on `url` for the test's scope. */
const client = (url: string) =>
  PgClient.make({ url: Redacted.make(url), maxConnections: 1 }).pipe(Effect.provide(Reactivity.layer))

/** Runs `statement`; whether PostgreSQL refused it for want of privilege. */
const refused = (sql: PgClient.PgClient, statement: string) =>
  Effect.map(Effect.exit(sql.unsafe(statement)), (exit) =>
    Exit.isFailure(exit) ? /permission denied|must be owner/.test(Cause.pretty(exit.cause)) : false
  )

/** `crm-sync backfill` as a process with `env` (not blocking: the sandbox answers from this one). */
const backfill = (env: Record<string, string>) =>
  Effect.callback<{ readonly status: number | null; readonly output: string }>((resume) => {
    const child = spawn(process.execPath, [main, "backfill"], {
      env: { PATH: process.env.PATH ?? "", LOG_LEVEL: "warn", ...env },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let output = ""
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()))
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()))
    child.on("exit", (status) => resume(Effect.succeed({ status, output })))
    return Effect.sync(() => child.kill("SIGKILL"))
  })

layer(
  Sandbox.layer({ records: 150, seed: 12, limits: { personal: { token: 100_000, company: 100_000, ip: 100_000 } } }),
  { timeout: 120_000, excludeTestServices: true }
)("ops/sql/roles.sql", (it) => {
  it.effect(
    "an owner that migrates, a runtime that syncs without DDL, a reader of crm and its history alone",
    () =>
      Effect.gen(function* () {
        const sandbox = yield* Sandbox
        const url = yield* freshDatabase
        const admin = yield* client(url)
        // Idempotent: it is run again after upgrades.
        for (let run = 0; run < 2; run++) {
          for (const statement of splitStatements(rolesScript)) yield* admin.unsafe(statement)
        }
        for (const role of ["crm_sync_owner", "crm_sync_runtime", "crm_reader"]) {
          yield* admin.unsafe(`ALTER ROLE ${role} PASSWORD '${role}-secret'`)
        }
        const owner = yield* client(as(url, "crm_sync_owner"))
        const runtime = yield* client(as(url, "crm_sync_runtime"))
        const reader = yield* client(as(url, "crm_reader"))

        // The runtime may not migrate an empty warehouse: one line names the role, the right it
        // lacks and what to do. The owner migrates.
        const denied = yield* Effect.flip(Effect.provideService(migrate, SqlClient, runtime))
        assert.include(denied.message, "role crm_sync_runtime")
        assert.include(denied.message, "permission denied for schema public")
        assert.include(denied.message, "run `crm-sync migrate` as the migration owner")
        assert.include(denied.message, "CRM_SYNC_MIGRATIONS=check")
        assert.notInclude(denied.message, "\n")
        const applied = yield* Effect.provideService(migrate, SqlClient, owner)
        assert.isAbove(applied.length, 10)
        // With nothing pending, `apply` looks and takes no lock: the runtime role starts with it too.
        assert.deepStrictEqual(yield* Effect.provideService(migrate, SqlClient, runtime), [])

        // The runtime syncs the whole CRM with `migrations: check`.
        const crm = {
          CRM_BASE_URL: sandbox.baseUrl,
          CRM_TOKEN: sandbox.credentials.personalAccessToken,
          CRM_SYNC_MIGRATIONS: "check"
        }
        const synced = yield* backfill({ ...crm, DATABASE_URL: as(url, "crm_sync_runtime") })
        assert.strictEqual(synced.status, 0, synced.output)
        const [businesses] = yield* runtime<{ n: number }>`SELECT count(*)::int AS n FROM crm.businesses`
        assert.isAbove(businesses!.n, 0)

        // ...and runs no DDL, in either schema.
        assert.isTrue(yield* refused(runtime, "CREATE TABLE crm.scratch (id int)"))
        assert.isTrue(yield* refused(runtime, "CREATE TABLE crm_sync.scratch (id int)"))
        assert.isTrue(yield* refused(runtime, "ALTER TABLE crm.businesses ADD COLUMN scratch int"))
        assert.isTrue(yield* refused(runtime, "DROP TABLE crm_sync.outbox"))

        // A pending migration stops it before anything runs, naming the migration and the remedy.
        const folder = mkdtempSync(join(tmpdir(), "crm-sync-roles-"))
        yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(folder, { recursive: true, force: true })))
        cpSync(migrationsDirectory, folder, { recursive: true })
        writeFileSync(join(folder, "9999_next_release.sql"), "CREATE TABLE crm.next_release (id int);\n")
        const pending = yield* Effect.flip(Effect.provideService(checkMigratedFrom(folder), SqlClient, runtime))
        assert.include(pending.message, "1 migration(s) behind this crm-sync (9999_next_release)")
        assert.include(pending.message, "crm-sync migrate")
        assert.isTrue(
          Exit.isSuccess(
            yield* Effect.exit(Effect.provideService(checkMigratedFrom(migrationsDirectory), SqlClient, runtime))
          )
        )

        // A runtime role that may not read which migrations ran is told so, and roles.sql again mends it.
        yield* admin.unsafe("REVOKE SELECT ON crm_sync_migrations FROM crm_sync_runtime")
        const unreadable = yield* Effect.flip(
          Effect.provideService(checkMigratedFrom(migrationsDirectory), SqlClient, runtime)
        )
        assert.include(unreadable.message, "role crm_sync_runtime")
        assert.include(unreadable.message, "permission denied for table crm_sync_migrations")
        assert.include(unreadable.message, "run ops/sql/roles.sql again")
        for (const statement of splitStatements(rolesScript)) yield* admin.unsafe(statement)
        assert.isTrue(
          Exit.isSuccess(
            yield* Effect.exit(Effect.provideService(checkMigratedFrom(migrationsDirectory), SqlClient, runtime))
          )
        )

        // Analysts read the warehouse, and nothing of crm-sync's own state.
        const [seen] = yield* reader<{ n: number }>`SELECT count(*)::int AS n FROM crm.businesses`
        assert.strictEqual(seen!.n, businesses!.n)
        const [current] = yield* reader<{ n: number }>`SELECT count(*)::int AS n FROM crm.current_businesses`
        assert.isAtMost(current!.n, businesses!.n)
        assert.isAbove(current!.n, 0)
        // ... and its history: the versions the runtime wrote as it synced.
        const [versions] = yield* reader<{ n: number }>`
          SELECT count(*)::int AS n FROM crm_history.businesses WHERE is_current`
        assert.strictEqual(versions!.n, businesses!.n)
        assert.isTrue(yield* refused(reader, "DELETE FROM crm_history.businesses_ended"))
        assert.isTrue(yield* refused(reader, "SELECT * FROM crm_sync.credentials"))
        assert.isTrue(yield* refused(reader, "SELECT * FROM crm_sync.outbox"))
        assert.isTrue(yield* refused(reader, "UPDATE crm.businesses SET name = 'x'"))
      }).pipe(Effect.scoped),
    { timeout: 120_000 }
  )
})
