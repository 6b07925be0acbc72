/**
 * The warehouse connection: `database_url` (CRM_SYNC_DATABASE_URL) when given, else the embedded
 * PostgreSQL under `data_dir` (CRM_SYNC_DATA_DIR). `MigratedDatabase` also applies pending
 * migrations before anything else touches the database, as every command that uses it must (or,
 * with `migrations: check`, stops when one is pending: a runtime role cannot run DDL). Both connect
 * once first: a database that cannot be reached ends the command with one line naming the cause
 * and the target (host:port/database and role, never the password).
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql/SqlError"
import { Reactivity } from "effect/reactivity"
import type * as Scope from "effect/Scope"
import { AppConfig, type AppConfigShape } from "../config/AppConfig.ts"
import { oneLine } from "../observability/Text.ts"
import { acquireEmbeddedDatabase } from "./EmbeddedDatabase.ts"
import { checkMigrated, migrate } from "./Migrations.ts"

export interface DatabaseInfoShape {
  readonly kind: "external" | "embedded"
  /** Where it is, secrets left out: host:port/database, or the embedded data folder. */
  readonly location: string
  /**
   * A client of its own on the same database, one connection, named `crm-sync <purpose>` in
   * pg_stat_activity: for the readiness check and the status report, which a pool busy with
   * hundreds of connections' jobs must not keep waiting.
   */
  readonly dedicated?: (purpose: string) => Effect.Effect<SqlClient, SqlError, Scope.Scope>
}

export class DatabaseInfo extends Context.Service<DatabaseInfo, DatabaseInfoShape>()(
  "crm-sync/warehouse/DatabaseInfo"
) {}

const describeUrl = (url: string) => {
  try {
    const parsed = new URL(url)
    return `${parsed.hostname}:${parsed.port || "5432"}${parsed.pathname}`
  } catch {
    return "(unparseable CRM_SYNC_DATABASE_URL)"
  }
}

/**
 * What every crm-sync session starts with (`database.*` of the config): a lock wait fails after
 * `lock_timeout`, a session idle in a transaction is closed after `idle_in_transaction`
 * (docs/sync.md, "Locks").
 */
const sessionSettings = (config: Pick<AppConfigShape, "database">) => ({
  lock_timeout: String(Duration.toMillis(config.database.lock_timeout)),
  idle_in_transaction_session_timeout: String(Duration.toMillis(config.database.idle_in_transaction))
})

/** The role an URL logs in as, if it names one (never its password). */
const userOf = (url: string) => {
  try {
    return decodeURIComponent(new URL(url).username)
  } catch {
    return ""
  }
}

export class DatabaseUnreachable extends Schema.TaggedError<DatabaseUnreachable>()("DatabaseUnreachable", {
  message: Schema.String,
  cause: Schema.Defect()
}) {}

/**
 * Connects once before anything else uses the database, so that a wrong password, a closed port or
 * a misspelled database name ends the command with one line naming PostgreSQL's (or the socket's)
 * reason and the target, instead of a later step's `PgConnection: Failed to connect`.
 */
const reachable = (target: string) =>
  Layer.effectDiscard(
    Effect.flatMap(SqlClient, (sql) => sql`SELECT 1`).pipe(
      Effect.mapError(
        (cause) =>
          new DatabaseUnreachable({ message: `cannot connect to the warehouse at ${target}: ${oneLine(cause)}`, cause })
      )
    )
  )

/** A client on `url` with crm-sync's session settings, checked to answer; with DatabaseInfo. */
const connected = (
  maxConnections: number,
  url: Redacted.Redacted<string>,
  startupParameters: Record<string, string>,
  info: DatabaseInfoShape,
  target: string
) =>
  Layer.merge(
    reachable(target).pipe(
      Layer.provideMerge(PgClient.layer({ url, applicationName: "crm-sync", startupParameters, maxConnections }))
    ),
    Layer.succeed(DatabaseInfo, {
      ...info,
      dedicated: (purpose) =>
        PgClient.make({
          url,
          applicationName: `crm-sync ${purpose}`,
          startupParameters,
          maxConnections: 1
        }).pipe(Effect.provide(Reactivity.layer))
    })
  )

export const DatabaseLive = Layer.unwrap(
  Effect.gen(function* () {
    const config = yield* AppConfig
    const startupParameters = sessionSettings(config)
    if (config.database_url !== undefined) {
      const url = config.database_url
      const location = describeUrl(Redacted.value(url))
      const user = userOf(Redacted.value(url))
      return connected(
        config.database.pool_size,
        url,
        startupParameters,
        { kind: "external", location },
        user === "" ? location : `${location} as ${user}`
      )
    }
    const embedded = yield* acquireEmbeddedDatabase(config.data_dir)
    const location = `${embedded.dataDirectory} (port ${embedded.port}${embedded.owned ? "" : ", shared with another process"})`
    return connected(
      config.database.pool_size,
      embedded.url,
      startupParameters,
      { kind: "embedded", location },
      `embedded PostgreSQL ${location}`
    )
  })
)

/** The database with pending migrations applied first — or, with `migrations: check`, refused. */
export const MigratedDatabase = Layer.effectDiscard(
  Effect.flatMap(AppConfig, (config) => (config.migrations === "check" ? checkMigrated : Effect.asVoid(migrate)))
).pipe(Layer.provideMerge(DatabaseLive))
