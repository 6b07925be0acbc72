/**
 * Applies the forward-only migrations of `migrations/NNNN_name.sql` with effect/sql's Migrator.
 *
 * Each file is split into statements (the extended query protocol runs one at a time) and the
 * whole run holds a transaction-scoped advisory lock, so two processes migrating at once are
 * safe: the second waits, then finds nothing left to do.
 */
import { Effect, Schema } from "effect"
import * as Migrator from "effect/sql/Migrator"
import { SqlClient } from "effect/sql/SqlClient"
import { readdirSync, readFileSync } from "node:fs"
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

const fileLoader: Migrator.Loader<SqlClient> = Effect.try({
  try: () =>
    readdirSync(migrationsDirectory)
      .flatMap((file) => {
        const match = file.match(/^(\d+)_(.+)\.sql$/)
        return match === null ? [] : [[Number(match[1]), match[2]!, file] as const]
      })
      .toSorted(([a], [b]) => a - b)
      .map(
        ([id, name, file]) =>
          [
            id,
            name,
            // The loader yields the migration itself, as a module import would.
            Effect.succeed(
              Effect.gen(function* () {
                const sql = yield* SqlClient
                const text = readFileSync(`${migrationsDirectory}${file}`, "utf8")
                for (const statement of splitStatements(text)) yield* sql.unsafe(statement)
              })
            )
          ] as const
      ),
  catch: (cause) => new Migrator.MigrationError({ kind: "ImportError", message: `cannot read migrations: ${cause}` })
})

const runMigrator = Migrator.make({})

/** Applies every pending migration; returns the ones applied, as `[id, name]`. */
export const migrate = Effect.gen(function* () {
  const sql = yield* SqlClient
  return yield* sql.withTransaction(
    Effect.gen(function* () {
      yield* sql`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK_KEY})`
      return yield* runMigrator({ loader: fileLoader, table: "crm_sync_migrations" })
    })
  )
}).pipe(
  Effect.mapError((cause) => new MigrationFailed({ message: `migration failed: ${cause.message}`, cause })),
  Effect.withSpan("Migrations.migrate")
)
