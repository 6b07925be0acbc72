/**
 * The `crm-sync` command line, and the only place where layers are wired into programs.
 *
 * Every command exits 0 on success and otherwise prints one line saying why: 2 for bad input
 * (a bad config value, a bad flag), 1 for anything else. SIGINT/SIGTERM interrupt the running
 * command, whose finalizers (database pool, embedded PostgreSQL, servers) then run in order.
 */
import { NodeHttpClient, NodeRuntime, NodeServices } from "@effect/platform-node"
import { Console, Effect, Layer, Logger, Option, References, Schema } from "effect"
import { Argument, CliError, Command, Flag } from "effect/cli"
import packageJson from "../package.json" with { type: "json" }
import { AppConfig, ConfigInvalid } from "./config/AppConfig.ts"
import * as Outbox from "./outbound/Outbox.ts"
import { RateBudget } from "./budget/RateBudget.ts"
import * as Connect from "./crm/Connect.ts"
import { Credentials } from "./crm/Credentials.ts"
import { Warehouse } from "./warehouse/Warehouse.ts"
import { sandboxCommand } from "./sandbox/SandboxCommand.ts"
import { renderStatus, statusReport } from "./observability/StatusReport.ts"
import { DatabaseInfo, DatabaseLive, MigratedDatabase } from "./warehouse/Database.ts"
import { migrate as applyMigrations } from "./warehouse/Migrations.ts"

/** Logs go to stderr so that command output (`status --json`) stays clean on stdout. */
const logLevels = { debug: "Debug", info: "Info", warn: "Warn", error: "Error" } as const

const LoggingLive = Layer.unwrap(
  Effect.map(AppConfig, (config) =>
    Layer.mergeAll(
      process.stderr.isTTY ? Logger.layer([Logger.consolePretty()]) : Logger.layer([Logger.consoleJson]),
      Layer.succeed(References.MinimumLogLevel, logLevels[config.log_level])
    )
  )
)

const BaseLive = LoggingLive.pipe(Layer.provideMerge(AppConfig.layer))

/** What every command that talks to the CRM needs: the budget, credentials, HTTP and the warehouse. */
const ApiStack = Layer.mergeAll(RateBudget.layer, Credentials.layer, Warehouse.layer).pipe(
  Layer.provideMerge(NodeHttpClient.layerUndici),
  Layer.provideMerge(MigratedDatabase)
)

class NoConnection extends Schema.TaggedError<NoConnection>()("NoConnection", { message: Schema.String }) {}

const migrate = Command.make("migrate", {}, () =>
  Effect.gen(function* () {
    const applied = yield* applyMigrations
    const info = yield* DatabaseInfo
    yield* Console.log(
      applied.length === 0
        ? `warehouse is up to date (${info.kind}: ${info.location})`
        : `applied ${applied.length} migration(s) to ${info.kind}: ${info.location}\n${applied.map(([id, name]) => `  ${String(id).padStart(4, "0")}_${name}`).join("\n")}`
    )
  }).pipe(Effect.provide(DatabaseLive))
).pipe(Command.withDescription("Apply pending warehouse migrations (schemas crm and crm_sync)."))

const status = Command.make(
  "status",
  { json: Flag.Boolean("json").pipe(Flag.withDescription("Print one JSON object"), Flag.withDefault(false)) },
  ({ json }) =>
    Effect.gen(function* () {
      const report = yield* statusReport(yield* AppConfig, yield* DatabaseInfo)
      yield* Console.log(json ? JSON.stringify(report) : renderStatus(report))
    }).pipe(Effect.provide(MigratedDatabase))
).pipe(Command.withDescription("Show rows and freshness per resource, the rate budget, and the inbox and outbox."))

const outboxRetry = Command.make(
  "retry",
  { id: Argument.Int("id").pipe(Argument.withDescription("The outbox row's id")) },
  ({ id }) =>
    Effect.gen(function* () {
      const result = yield* Outbox.retry(String(id))
      yield* Console.log(
        result.changed
          ? `outbox ${id}: pending again; the writer sends it next`
          : `outbox ${id} is ${result.status}: nothing to retry`
      )
    }).pipe(Effect.provide(MigratedDatabase))
).pipe(Command.withDescription("Send a failed or needs_review outbox row again."))

const outbox = Command.make("outbox").pipe(
  Command.withDescription("The firm's writes to the CRM (crm_sync.outbox)."),
  Command.withSubcommands([outboxRetry])
)

const connect = Command.make(
  "connect",
  {
    connection: Argument.String("connection").pipe(
      Argument.withDescription("The OAuth connection to authorize (default: the first configured)"),
      Argument.optional
    )
  },
  ({ connection }) =>
    Effect.gen(function* () {
      const config = yield* AppConfig
      const name = Option.getOrElse(connection, () => config.connections[0]?.name ?? "")
      if (name === "") return yield* new NoConnection({ message: "no CRM connection is configured" })
      const connected = yield* Connect.connect(name)
      yield* Console.log(
        `connected ${connected.connection}${connected.userId === undefined ? "" : ` as user ${connected.userId}`}` +
          (connected.canWrite === undefined ? "" : connected.canWrite ? ", write access enabled" : ", read-only")
      )
    }).pipe(Effect.provide(ApiStack))
).pipe(
  Command.withDescription(
    "Authorize an OAuth connection (authorization code with PKCE) and store its tokens encrypted."
  )
)

const root = Command.make("crm-sync").pipe(
  Command.withDescription(
    "Keeps a firm's PostgreSQL warehouse in step with its CRM, and writes the firm's changes back."
  ),
  Command.withSubcommands([migrate, status, connect, outbox, sandboxCommand])
)

const oneLine = (text: string) => text.replace(/\s+/g, " ").trim()

const program = Command.run(root, { version: packageJson.version }).pipe(
  Effect.provide(BaseLive),
  Effect.catch((error) =>
    Effect.gen(function* () {
      if (error instanceof ConfigInvalid) {
        yield* Console.error(error.line)
        process.exitCode = 2
      } else if (CliError.isCliError(error)) {
        // Already rendered by the CLI (usage and the problem); only the exit code is ours.
        process.exitCode = error._tag === "ShowHelp" && error.errors.length === 0 ? 0 : 2
      } else {
        const message = error instanceof Error ? error.message : String(error)
        yield* Console.error(`crm-sync: ${oneLine(message)}`)
        process.exitCode = 1
      }
    })
  ),
  Effect.provide(NodeServices.layer)
)

NodeRuntime.runMain(program, { disableErrorReporting: true })
