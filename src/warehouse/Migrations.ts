/**
 * Applies the forward-only migrations of `migrations/NNNN_name.sql` with effect/sql's Migrator.
 *
 * Each file is split into statements (the extended query protocol runs one at a time) and the
 * whole run holds a transaction-scoped advisory lock, so two processes migrating at once are
 * safe: the second waits, then finds nothing left to do.
 *
 * The Migrator runs only files numbered above the newest one applied, so a file slipped in below
 * it would never run, silently. Before anything runs, the numbering is checked instead: no gap
 * (except the retired numbers, which landed skipped) and no unapplied file older than the newest
 * applied one; either refuses the whole run with a message naming the file.
 *
 * `apply` looks before it locks: with nothing pending it needs no right beyond reading
 * `crm_sync_migrations`. A failure names PostgreSQL's reason, and a role that lacks a right
 * (SQLSTATE 42501) gets one line naming it and what to do instead.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Migrator from "effect/sql/Migrator"
import * as Predicate from "effect/Predicate"
import { SqlClient } from "effect/sql/SqlClient"
import { isSqlError, type SqlError } from "effect/sql/SqlError"
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { databaseReason } from "../observability/Text.ts"

export const migrationsDirectory = fileURLToPath(new URL("../../migrations/", import.meta.url))

/** Arbitrary but fixed: the advisory lock key that serializes migrations on one database. */
const MIGRATION_LOCK_KEY = 7_304_118_214

export class MigrationFailed extends Schema.TaggedError<MigrationFailed>()("MigrationFailed", {
  message: Schema.String,
  cause: Schema.Defect()
}) {}

/**
 * Splits a migration file into statements: a `;` at the end of a line ends a statement, except
 * inside a dollar-quoted body (`$$ ... $$`), where function bodies keep their own semicolons.
 */
export const splitStatements = (text: string): ReadonlyArray<string> => {
  const statements: Array<string> = []
  let current: Array<string> = []
  let inDollarQuote = false
  for (const line of text.split("\n")) {
    if (current.length === 0 && (line.trim() === "" || line.trim().startsWith("--"))) continue
    current.push(line)
    const dollars = line.match(/\$\$/g)?.length ?? 0
    if (dollars % 2 === 1) inDollarQuote = !inDollarQuote
    if (!inDollarQuote && /;\s*(--.*)?$/.test(line)) {
      statements.push(
        current
          .join("\n")
          .trim()
          .replace(/;\s*(--.*)?$/, "")
      )
      current = []
    }
  }
  const rest = current.join("\n").trim()
  if (rest !== "") statements.push(rest)
  return statements
}

/** Numbers that landed unused (0003 was followed by 0006): never to be filled in. */
export const RETIRED_NUMBERS: ReadonlySet<number> = new Set([4, 5])

const label = (id: number, name: string) => `${String(id).padStart(4, "0")}_${name}`

/**
 * Why a set of migration files cannot be applied safely to a database that has `applied`, if it
 * cannot: a gap in the numbering (a file missing, or one that would later fill it and never run),
 * a number used twice, or a file numbered below the newest applied one that was never applied.
 */
export const sequenceProblem = (
  files: ReadonlyArray<readonly [number, string]>,
  applied: ReadonlySet<number>
): string | undefined => {
  const sorted = files.toSorted(([a], [b]) => a - b)
  const newest = Math.max(0, ...applied)
  const stranded = sorted.find(([id]) => id < newest && !applied.has(id))
  if (stranded !== undefined) {
    return `migration ${label(...stranded)} is older than the newest applied (${newest}) and was never applied; give it a number above ${newest}`
  }
  let expected = 1
  for (const [id, name] of sorted) {
    while (RETIRED_NUMBERS.has(expected)) expected++
    if (RETIRED_NUMBERS.has(id))
      return `migration ${label(id, name)} uses a retired number; give it a number above ${newest}`
    if (id < expected) return `migration number ${id} is used twice (${label(id, name)})`
    if (id > expected) return `migration ${label(id, name)} leaves a gap: no migration numbered ${expected}`
    expected++
  }
  return undefined
}

const migrationFiles = (directory: string) =>
  readdirSync(directory)
    .flatMap((file) => {
      const match = file.match(/^(\d+)_(.+)\.sql$/)
      return match === null ? [] : [[Number(match[1]), match[2]!, file] as const]
    })
    .toSorted(([a], [b]) => a - b)

const loaderFor = (directory: string): Migrator.Loader<SqlClient> =>
  Effect.try({
    try: () =>
      migrationFiles(directory).map(
        ([id, name, file]) =>
          [
            id,
            name,
            // The loader yields the migration itself, as a module import would.
            Effect.succeed(
              Effect.gen(function* () {
                const sql = yield* SqlClient
                const text = readFileSync(join(directory, file), "utf8")
                for (const statement of splitStatements(text)) yield* sql.unsafe(statement)
              })
            )
          ] as const
      ),
    catch: (cause) => new Migrator.MigrationError({ kind: "ImportError", message: `cannot read migrations: ${cause}` })
  })

/** The ids already applied to this database (none before the first run). */
const appliedIds = Effect.gen(function* () {
  const sql = yield* SqlClient
  const [table] = yield* sql<{ exists: boolean }>`SELECT to_regclass('crm_sync_migrations') IS NOT NULL AS exists`
  if (table?.exists !== true) return new Set<number>()
  const rows = yield* sql<{ id: number }>`SELECT migration_id::int AS id FROM crm_sync_migrations`
  return new Set(rows.map((row) => row.id))
})

const runMigrator = Migrator.make({})

const readFiles = (directory: string) =>
  Effect.try({
    try: () => migrationFiles(directory),
    catch: (cause) => new Migrator.MigrationError({ kind: "ImportError", message: `cannot read migrations: ${cause}` })
  })

/** The migrations of `directory` not applied to this database, after checking the numbering. */
const pendingFrom = (directory: string) =>
  Effect.gen(function* () {
    const files = yield* readFiles(directory)
    const applied = yield* appliedIds
    const problem = sequenceProblem(
      files.map(([id, name]) => [id, name] as const),
      applied
    )
    if (problem !== undefined) return yield* new Migrator.MigrationError({ kind: "BadState", message: problem })
    return files.filter(([id]) => !applied.has(id))
  })

/**
 * The Migrator's own table, as it would create it: here first, because the Migrator swallows a
 * refused CREATE and fails on its next query with "current transaction is aborted" instead of
 * the reason (a role without the right to create it).
 */
const createBookkeeping = Effect.gen(function* () {
  const sql = yield* SqlClient
  const [table] = yield* sql<{ exists: boolean }>`SELECT to_regclass('crm_sync_migrations') IS NOT NULL AS exists`
  if (table?.exists === true) return
  yield* sql`CREATE TABLE crm_sync_migrations (
    migration_id integer primary key,
    created_at timestamp with time zone not null default now(),
    name text not null
  )`
})

/** The SqlError somewhere down an error's causes (the Migrator wraps a failed statement's). */
const sqlErrorIn = (error: unknown): SqlError | undefined => {
  for (let current = error, depth = 0; current !== undefined && depth < 5; depth++) {
    if (isSqlError(current)) return current
    current = Predicate.hasProperty(current, "cause") ? current.cause : undefined
  }
  return undefined
}

/**
 * The one line of a failed migration run or check: PostgreSQL's reason with the failing step;
 * a role that lacks a right (SQLSTATE 42501) is named, with what to do instead.
 */
const describeFailure = (what: string, error: { readonly message: string }) =>
  Effect.gen(function* () {
    const sqlError = sqlErrorIn(error)
    const reason = sqlError === undefined ? undefined : databaseReason(sqlError)
    const detail =
      reason === undefined || error.message.includes(reason) ? error.message : `${error.message}: ${reason}`
    if (sqlError?.reason._tag !== "AuthorizationError") return `${what}: ${detail}`
    const sql = yield* SqlClient
    const role = yield* sql<{ role: string }>`SELECT current_user AS role`.pipe(
      Effect.map(([row]) => row?.role ?? "(unknown)"),
      Effect.orElseSucceed(() => "(unknown)")
    )
    return what === "migration failed"
      ? `${what}: role ${role} lacks the right to run migrations (${reason}): run \`crm-sync migrate\` as the migration ` +
          "owner (crm_sync_owner of ops/sql/roles.sql), or set CRM_SYNC_MIGRATIONS=check for this role"
      : `${what}: role ${role} may not read the migrations applied (${reason}): run ops/sql/roles.sql again as the ` +
          "database's owner, which grants it"
  })

/**
 * Applies every pending migration of `directory`; returns the ones applied, as `[id, name]`. It
 * looks first: with nothing pending it takes no lock and runs no DDL, so a role without DDL rights
 * (the runtime of ops/sql/roles.sql) starts with `apply` too.
 */
export const migrateFrom = (directory: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    if ((yield* pendingFrom(directory)).length === 0) return []
    return yield* sql.withTransaction(
      Effect.gen(function* () {
        // Another process's migrations, and DDL's locks, are waited for as long as they take.
        yield* sql`SET LOCAL lock_timeout = 0`
        yield* sql`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK_KEY})`
        // Again under the lock: another process may have applied them meanwhile.
        yield* pendingFrom(directory)
        yield* createBookkeeping
        return yield* runMigrator({ loader: loaderFor(directory), table: "crm_sync_migrations" })
      })
    )
  }).pipe(
    Effect.catch((cause) =>
      Effect.flatMap(describeFailure("migration failed", cause), (message) =>
        Effect.fail(new MigrationFailed({ message, cause }))
      )
    ),
    Effect.withSpan("Migrations.migrate")
  )

/** Applies every pending migration of crm-sync; returns the ones applied, as `[id, name]`. */
export const migrate = migrateFrom(migrationsDirectory)

/**
 * Fails, naming them, when migrations of `directory` are pending on this database: for a process
 * that must not run DDL (`migrations: check`). Reads `crm_sync_migrations` and nothing else.
 */
export const checkMigratedFrom = (directory: string) =>
  Effect.gen(function* () {
    const applied = yield* appliedIds
    const files = yield* readFiles(directory)
    const pending = files.filter(([id]) => !applied.has(id)).map(([, , file]) => file.replace(/\.sql$/, ""))
    if (pending.length > 0) {
      return yield* new MigrationFailed({
        message:
          `the warehouse is ${pending.length} migration(s) behind this crm-sync (${pending.join(", ")}); ` +
          "with migrations: check (CRM_SYNC_MIGRATIONS=check) this process does not apply them: " +
          "run `crm-sync migrate` with the migration owner's CRM_SYNC_DATABASE_URL first",
        cause: undefined
      })
    }
  }).pipe(
    Effect.catch((cause) =>
      cause instanceof MigrationFailed
        ? Effect.fail(cause)
        : Effect.flatMap(describeFailure("cannot check migrations", cause), (message) =>
            Effect.fail(new MigrationFailed({ message, cause }))
          )
    ),
    Effect.withSpan("Migrations.check")
  )

/** Fails when any migration of crm-sync is pending. */
export const checkMigrated = checkMigratedFrom(migrationsDirectory)

/**
 * The migrations of `directory` not applied to this database, by file name without `.sql`
 * (`0023_client_field_times`), after checking the numbering; reads `crm_sync_migrations` only.
 */
export const pendingMigrationsFrom = (directory: string) =>
  Effect.map(pendingFrom(directory), (files) => files.map(([, , file]) => file.replace(/\.sql$/, "")))

/** crm-sync's migrations not applied to this database (`doctor`). */
export const pendingMigrations = pendingMigrationsFrom(migrationsDirectory)
