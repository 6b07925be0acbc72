/**
 * The warehouse connection: `database_url` (CRM_SYNC_DATABASE_URL) when given, else the embedded
 * PostgreSQL under `data_dir` (CRM_SYNC_DATA_DIR). `MigratedDatabase` also applies pending
 * migrations before anything else touches the database, as every command that uses it must (or,
 * with `migrations: check`, stops when one is pending: a runtime role cannot run DDL).
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import { AppConfig, type AppConfigShape } from "../config/AppConfig.ts"
import { acquireEmbeddedDatabase } from "./EmbeddedDatabase.ts"
import { checkMigrated, migrate } from "./Migrations.ts"

export interface DatabaseInfoShape {
  readonly kind: "external" | "embedded"
  /** Where it is, secrets left out: host:port/database, or the embedded data folder. */
  readonly location: string
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

export const DatabaseLive = Layer.unwrap(
  Effect.gen(function* () {
    const config = yield* AppConfig
    const startupParameters = sessionSettings(config)
    if (config.database_url !== undefined) {
      const url = config.database_url
      return Layer.merge(
        PgClient.layer({ url, applicationName: "crm-sync", startupParameters }),
        Layer.succeed(DatabaseInfo, { kind: "external", location: describeUrl(Redacted.value(url)) })
      )
    }
    const embedded = yield* acquireEmbeddedDatabase(config.data_dir)
    return Layer.merge(
      PgClient.layer({ url: embedded.url, applicationName: "crm-sync", startupParameters }),
      Layer.succeed(DatabaseInfo, {
        kind: "embedded",
        location: `${embedded.dataDirectory} (port ${embedded.port}${embedded.owned ? "" : ", shared with another process"})`
      })
    )
  })
)

/** The database with pending migrations applied first — or, with `migrations: check`, refused. */
export const MigratedDatabase = Layer.effectDiscard(
  Effect.flatMap(AppConfig, (config) => (config.migrations === "check" ? checkMigrated : Effect.asVoid(migrate)))
).pipe(Layer.provideMerge(DatabaseLive))
