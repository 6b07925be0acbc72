/**
 * `crm-sync doctor`'s checks that need no CRM: the warehouse (reachable, its version, migrations,
 * the role's rights), the webhook endpoints (signing secrets, ports) and the schedules against the
 * budget (`plan`'s verdict). Each check returns a `Check`, never fails: what is wrong is data,
 * with what to do about it. Nothing here writes.
 */
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql/SqlClient"
import { createServer } from "node:net"
import type { AppConfigShape } from "../config/AppConfig.ts"
import { planReport } from "../admin/PlanReport.ts"
import { oneLine } from "../observability/Text.ts"
import { pendingMigrations } from "../warehouse/Migrations.ts"

/** One line of the report: ✓ pass, ✗ fail (with what to do), – skipped (with why). */
export interface Check {
  readonly check: string
  readonly status: "pass" | "fail" | "skip"
  readonly message: string
  /** What to do, on a failure. */
  readonly fix?: string
}

export const pass = (check: string, message: string): Check => ({ check, status: "pass", message })
export const fail = (check: string, message: string, fix: string): Check => ({ check, status: "fail", message, fix })
export const skip = (check: string, message: string): Check => ({ check, status: "skip", message })

const mark = { pass: "✓", fail: "✗", skip: "–" } as const

/** `✓ check: message`, or `✗ check: message: fix`. */
export const renderCheck = (check: Check): string =>
  `${mark[check.status]} ${check.check}: ${check.message}${check.fix === undefined ? "" : `; ${check.fix}`}`

// ---------------------------------------------------------------------------------------------
// PostgreSQL
// ---------------------------------------------------------------------------------------------

/** `gen_random_uuid()` is in core from 13; the suite runs on 18. */
export const MIN_POSTGRES = 13

const Version = Schema.Struct({ num: Schema.Number, version: Schema.String, role: Schema.String })

export const postgresVersion = Effect.gen(function* () {
  const sql = yield* SqlClient
  const [row] = yield* sql`
    SELECT current_setting('server_version_num')::int AS num, current_setting('server_version') AS version,
           current_user AS role`.pipe(Effect.flatMap(Schema.decodeUnknownEffect(Schema.Array(Version))))
  const major = Math.floor((row?.num ?? 0) / 10_000)
  return major >= MIN_POSTGRES
    ? pass("postgresql version", `PostgreSQL ${row?.version} (${MIN_POSTGRES} or later is supported)`)
    : fail(
        "postgresql version",
        `PostgreSQL ${row?.version} is older than ${MIN_POSTGRES}`,
        `upgrade the server to PostgreSQL ${MIN_POSTGRES} or later`
      )
}).pipe(Effect.catch((error) => Effect.succeed(fail("postgresql version", oneLine(error), "check the server"))))

/** The pending migrations, or why they cannot be known; `[]` when the warehouse is up to date. */
export const migrationsCheck = (config: AppConfigShape) =>
  pendingMigrations.pipe(
    Effect.map((pending) => ({
      pending,
      check:
        pending.length === 0
          ? pass("migrations", "every migration is applied")
          : fail(
              "migrations",
              `${pending.length} pending: ${pending.length > 4 ? `${pending.slice(0, 3).join(", ")} ... ${pending.at(-1)}` : pending.join(", ")}`,
              config.migrations === "check"
                ? "run `crm-sync migrate` with the migration owner's CRM_SYNC_DATABASE_URL"
                : "run `crm-sync migrate` (every command applies them first with migrations: apply)"
            )
    })),
    Effect.catch((error) =>
      Effect.succeed({
        pending: undefined,
        check: fail("migrations", oneLine(error), "see docs/operations.md on migrations")
      })
    )
  )

const Named = Schema.Array(Schema.Struct({ name: Schema.String }))

/**
 * The runtime's rights (ops/sql/roles.sql): USAGE on schemas crm and crm_sync, and SELECT,
 * INSERT, UPDATE, DELETE on every table in them; CREATE on the database too when pending
 * migrations are to be applied by this role. Looked up in the catalogue, nothing is tried.
 */
export const roleRights = (config: AppConfigShape, pending: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const missing: Array<string> = []
    if (pending.length > 0 && config.migrations === "apply") {
      const [create] = yield* sql<{ ok: boolean }>`SELECT has_database_privilege(current_database(), 'CREATE') AS ok`
      if (create?.ok !== true) missing.push("CREATE on the database (to apply the pending migrations)")
    }
    const schemas = yield* sql`
      SELECT nspname AS name FROM pg_namespace
      WHERE nspname IN ('crm', 'crm_sync') AND NOT has_schema_privilege(oid, 'USAGE')`.pipe(
      Effect.flatMap(Schema.decodeUnknownEffect(Named))
    )
    for (const schema of schemas) missing.push(`USAGE on schema ${schema.name}`)
    const tables = yield* sql`
      SELECT n.nspname || '.' || c.relname AS name
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname IN ('crm', 'crm_sync') AND c.relkind IN ('r', 'p')
        AND NOT (has_table_privilege(c.oid, 'SELECT') AND has_table_privilege(c.oid, 'INSERT')
                 AND has_table_privilege(c.oid, 'UPDATE') AND has_table_privilege(c.oid, 'DELETE'))
      ORDER BY 1`.pipe(Effect.flatMap(Schema.decodeUnknownEffect(Named)))
    if (tables.length > 0) {
      const names = tables.map((table) => table.name)
      missing.push(
        `SELECT, INSERT, UPDATE, DELETE on ${names.slice(0, 5).join(", ")}${names.length > 5 ? ` and ${names.length - 5} more` : ""}`
      )
    }
    const [role] = yield* sql<{ role: string }>`SELECT current_user AS role`
    return missing.length === 0
      ? pass("database role", `role ${role?.role} has the rights crm-sync needs`)
      : fail(
          "database role",
          `role ${role?.role} lacks ${missing.join("; ")}`,
          "run ops/sql/roles.sql as the database's owner (it grants the runtime role its rights)"
        )
  }).pipe(Effect.catch((error) => Effect.succeed(fail("database role", oneLine(error), "check the role's grants"))))

// ---------------------------------------------------------------------------------------------
// Webhooks
// ---------------------------------------------------------------------------------------------

/**
 * Why a signing secret is not a Standard Webhooks secret, if it is not: `whsec_` and the base64
 * of 24 to 64 random bytes. The config already checks the characters; this also catches a
 * secret cut short when copied (it still decodes, to a different key, and every signature fails).
 */
export const secretProblem = (secret: string): string | undefined => {
  if (!secret.startsWith("whsec_")) return "does not start with whsec_"
  const encoded = secret.slice("whsec_".length)
  const bytes = Buffer.from(encoded, "base64")
  if (bytes.toString("base64").replace(/=+$/, "") !== encoded.replace(/=+$/, "")) return "is not valid base64"
  if (bytes.length < 24 || bytes.length > 64) return `decodes to ${bytes.length} bytes, not 24 to 64`
  return undefined
}

/** Each endpoint's secrets (`only`: the endpoints of that connection, and those of none). */
export const endpointChecks = (config: AppConfigShape, only?: string): ReadonlyArray<Check> => {
  const endpoints = config.webhooks.endpoints.filter(
    (endpoint) => only === undefined || endpoint.connection === undefined || endpoint.connection === only
  )
  if (endpoints.length === 0) {
    return [skip("webhooks", "no webhook endpoint is configured: events are not received (polls and crawls only)")]
  }
  return endpoints.map((endpoint) => {
    const problems = endpoint.secrets.flatMap((secret, index) => {
      const problem = secretProblem(Redacted.value(secret))
      return problem === undefined ? [] : [`secret ${index + 1} ${problem}`]
    })
    const name = `webhook endpoint ${endpoint.name}`
    return problems.length === 0
      ? pass(name, `${endpoint.secrets.length} signing secret(s) of the Standard Webhooks form`)
      : fail(
          name,
          problems.join("; "),
          "copy the endpoint's signing secret again, whole, as the CRM shows it (whsec_...)"
        )
  })
}

/** Whether `port` can be bound on `host` now (`EADDRINUSE` and the like say no). */
const canBind = (port: number, host: string | undefined) =>
  Effect.callback<string | undefined>((resume) => {
    const server = createServer()
    server.once("error", (error: NodeJS.ErrnoException) => resume(Effect.succeed(error.code ?? error.message)))
    server.listen({ port, host, exclusive: true }, () => server.close(() => resume(Effect.succeed(undefined))))
  })

/** Whether a crm-sync process holds the port: its `/healthz` answers 200 (both ports serve it). */
const crmSyncAnswers = (port: number) =>
  Effect.tryPromise(() =>
    fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(2_000), redirect: "manual" })
  ).pipe(
    Effect.map((response) => response.status === 200),
    Effect.orElseSucceed(() => false)
  )

/** The daemon's listening port is free, or held by a running crm-sync (the daemon itself). */
export const portCheck = (name: string, setting: string, port: number, host: string | undefined) =>
  Effect.gen(function* () {
    if (port === 0) return pass(name, "port 0: the system picks a free one at start")
    const refused = yield* canBind(port, host)
    if (refused === undefined) return pass(name, `port ${port} is free`)
    if (refused === "EADDRINUSE" && (yield* crmSyncAnswers(port))) {
      return pass(name, `port ${port} is held by a running crm-sync (its /healthz answers)`)
    }
    return fail(
      name,
      `port ${port} cannot be bound (${refused === "EADDRINUSE" ? "another program holds it" : refused})`,
      `stop that program or set ${setting} to a free port`
    )
  })

// ---------------------------------------------------------------------------------------------
// Schedules and the budget
// ---------------------------------------------------------------------------------------------

/** `plan`'s verdict for each connection: whether its schedules fit its strictest bucket. */
export const planChecks = (config: AppConfigShape, only: string | undefined) =>
  planReport(config, only).pipe(
    Effect.map((plans) =>
      plans.map((plan) => {
        const name = `schedules of ${plan.connection}`
        const use = `${Math.round(plan.demand_per_hour)} of ${Math.round(plan.limit_per_hour)} requests/hour before crawls`
        if (plan.fits) return pass(name, `fit the budget (${use})`)
        const suggestion = plan.suggestions[0]
        return fail(
          name,
          `do not fit the budget: ${plan.warnings[0] ?? use}`,
          suggestion === undefined
            ? "see `crm-sync plan`"
            : `set ${suggestion.setting} to "${suggestion.value}" (\`crm-sync plan\` shows the whole plan)`
        )
      })
    ),
    Effect.catch((error) => Effect.succeed([fail("schedules", oneLine(error), "see `crm-sync plan`")]))
  )
