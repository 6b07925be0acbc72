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
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Migrator from "effect/sql/Migrator"
import { SqlClient } from "effect/sql/SqlClient"
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

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

/** Applies every pending migration of `directory`; returns the ones applied, as `[id, name]`. */
export const migrateFrom = (directory: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    return yield* sql.withTransaction(
      Effect.gen(function* () {
        // Another process's migrations, and DDL's locks, are waited for as long as they take.
        yield* sql`SET LOCAL lock_timeout = 0`
        yield* sql`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK_KEY})`
        const files = yield* Effect.try({
          try: () => migrationFiles(directory).map(([id, name]) => [id, name] as const),
          catch: (cause) =>
            new Migrator.MigrationError({ kind: "ImportError", message: `cannot read migrations: ${cause}` })
        })
        const problem = sequenceProblem(files, yield* appliedIds)
        if (problem !== undefined) return yield* new Migrator.MigrationError({ kind: "BadState", message: problem })
        return yield* runMigrator({ loader: loaderFor(directory), table: "crm_sync_migrations" })
      })
    )
  }).pipe(
    Effect.mapError((cause) => new MigrationFailed({ message: `migration failed: ${cause.message}`, cause })),
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
    const files = yield* Effect.try({
      try: () => migrationFiles(directory),
      catch: (cause) =>
        new Migrator.MigrationError({ kind: "ImportError", message: `cannot read migrations: ${cause}` })
    })
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
    Effect.mapError((cause) =>
      cause instanceof MigrationFailed
        ? cause
        : new MigrationFailed({ message: `cannot check migrations: ${cause.message}`, cause })
    ),
    Effect.withSpan("Migrations.check")
  )

/** Fails when any migration of crm-sync is pending. */
export const checkMigrated = checkMigratedFrom(migrationsDirectory)
