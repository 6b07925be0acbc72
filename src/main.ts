/**
 * The `crm-sync` command line: each command's program and the layers it runs on (the backfill and
 * the reconciliation bring the sync services they need themselves: SyncServicesLive).
 *
 * Every command exits 0 on success and otherwise prints one line saying why: 2 for bad input
 * (a bad config value, a bad flag), 1 for anything else. SIGINT/SIGTERM interrupt the running
 * command, whose finalizers (database pool, embedded PostgreSQL, servers) then run in order.
 */
import { NodeHttpClient, NodeHttpServer, NodeRuntime, NodeServices } from "@effect/platform-node"
import { Cause, Console, Duration, Effect, Exit, Layer, Logger, Option, References, Runtime, Schema } from "effect"
import { TelemetryLive } from "./observability/Telemetry.ts"
import { oneLine } from "./observability/Text.ts"
import { HttpRouter } from "effect/http"
import { createServer } from "node:http"
import { Argument, CliError, Command, Flag } from "effect/cli"
import packageJson from "../package.json" with { type: "json" }
import { AppConfig, type AppConfigShape, ConfigInvalid } from "./config/AppConfig.ts"
import * as Outbox from "./outbound/Outbox.ts"
import { RateBudget } from "./budget/RateBudget.ts"
import * as Connect from "./crm/Connect.ts"
import { Credentials } from "./crm/Credentials.ts"
import { Warehouse } from "./warehouse/Warehouse.ts"
import { sandboxCommand } from "./sandbox/SandboxCommand.ts"
import { Sandbox } from "./sandbox/Sandbox.ts"
import { demoActivity, prepareDemo } from "./sandbox/Demo.ts"
import { CrmClient } from "./crm/CrmClient.ts"
import { OutboundWriterLive } from "./outbound/OutboundWriter.ts"
import { AdminRoutes } from "./observability/AdminRoutes.ts"
import { LivenessRoute } from "./observability/Health.ts"
import { RuntimeMetricsLive } from "./observability/RuntimeMetrics.ts"
import { StateMetricsLive } from "./observability/StateMetrics.ts"
import { backfill as runBackfill, BackfillResourceNames, type BackfillSummary } from "./sync/Backfill.ts"
import { type ReconcileReport, reconcile as runReconcile, ReconcileSchedulerLive } from "./sync/Reconciler.ts"
import { SyncJobsLive } from "./sync/SyncJobs.ts"
import { EventProcessor, EventProcessorLive, replay } from "./webhooks/EventProcessor.ts"
import { InboxWriter } from "./webhooks/InboxWriter.ts"
import * as Subscriptions from "./webhooks/Subscriptions.ts"
import { TranscriptReader } from "./webhooks/TranscriptReader.ts"
import { WebhookInbox } from "./webhooks/WebhookInbox.ts"
import { WebhookIntake } from "./webhooks/WebhookIntake.ts"
import { renderStatus, statusReport } from "./observability/StatusReport.ts"
import { planReport, renderPlan } from "./observability/PlanReport.ts"
import { DatabaseInfo, DatabaseLive, MigratedDatabase } from "./warehouse/Database.ts"
import { migrate as applyMigrations } from "./warehouse/Migrations.ts"

/** Logs go to stderr so that command output (`status --json`) stays clean on stdout. */
const logLevels = { debug: "Debug", info: "Info", warn: "Warn", error: "Error" } as const

const LoggingLive = Layer.unwrap(
  Effect.map(AppConfig, (config) =>
    Layer.mergeAll(
      // Logger.consoleJson writes with console.log whatever LogToStderr says: JSON lines go to
      // stderr explicitly (the pretty logger honours LogToStderr).
      process.stderr.isTTY
        ? Logger.layer([Logger.consolePretty()])
        : Logger.layer([Logger.withConsoleError(Logger.formatJson)]),
      Layer.succeed(Logger.LogToStderr, true),
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

/** A command used the wrong way: printed as one line, exit code 2. */
class UsageError extends Schema.TaggedError<UsageError>()("UsageError", { message: Schema.String }) {}

class NoConnection extends Schema.TaggedError<NoConnection>()("NoConnection", { message: Schema.String }) {}

const noCrmConfigured = new NoConnection({
  message:
    "no CRM is configured: set CRM_BASE_URL and CRM_TOKEN, or CRM_SYNC_CONFIG (see config/README.md); `npm start` runs the daemon against the bundled sandbox"
})

/**
 * The daemon: webhook intake on `webhook_port`; status page, status, metrics and probes on
 * `admin_port`; the event
 * processor; the read-sync jobs; the outbound writer. At start it reports each connection's
 * access (auth type, write access) from `GET /v1/me`.
 */
const Daemon = Layer.unwrap(
  Effect.gen(function* () {
    const config = yield* AppConfig
    if (config.connections.length === 0) return yield* noCrmConfigured
    // No log line per request: deliveries arrive by the thousand; metrics count them instead.
    // Paths match exactly (case, trailing and doubled slashes), so an ingress rule on the exact
    // path cannot be bypassed by spelling it another way.
    const serveOptions = { disableLogger: true, routerConfig: exactPaths } as const
    const webhookHttp = HttpRouter.serve(Layer.mergeAll(WebhookIntake.routes, LivenessRoute), serveOptions).pipe(
      Layer.provide(WebhookIntake.layer),
      Layer.provide(InboxWriter.layer),
      Layer.provide(NodeHttpServer.layer(() => webhookServer(config), { port: config.webhook_port }))
    )
    const adminHttp = HttpRouter.serve(AdminRoutes, serveOptions).pipe(
      Layer.provide(NodeHttpServer.layer(createServer, { port: config.admin_port, host: config.admin_host }))
    )
    const processing = EventProcessorLive.pipe(
      Layer.provideMerge(EventProcessor.layer),
      Layer.provide(TranscriptReader.layer)
    )
    const access = Layer.effectDiscard(
      Effect.forEach(config.connections, (connection) =>
        Connect.reportAccess().pipe(
          Effect.provide(CrmClient.layerFor(connection.name)),
          Effect.catch((error) => Effect.logWarning(`connection ${connection.name}: ${error.message}`))
        )
      )
    )
    const started = Layer.effectDiscard(
      Effect.logInfo(
        `crm-sync running: ${config.connections.length} connection(s), webhooks on port ${config.webhook_port}, ` +
          `status page and metrics on port ${config.admin_port}`
      )
    )
    return Layer.mergeAll(
      access,
      webhookHttp,
      adminHttp,
      processing,
      SyncJobsLive,
      ReconcileSchedulerLive,
      OutboundWriterLive,
      StateMetricsLive,
      RuntimeMetricsLive,
      started
    ).pipe(Layer.provide(WebhookInbox.layer))
  })
).pipe(Layer.provide(ApiStack))

/** Routing that matches a path only as written: no case folding, no trailing or doubled slashes. */
/**
 * The internet-facing server: a delivery must arrive whole within `webhooks.read_timeout` (headers
 * within the lesser of it and 5 s), and at most `webhooks.max_connections` connections are kept;
 * a slow or idle client cannot hold memory for Node's default 300 s.
 */
const webhookServer = (config: AppConfigShape) => {
  const readMs = Duration.toMillis(config.webhooks.read_timeout)
  const server = createServer({
    requestTimeout: readMs,
    headersTimeout: Math.min(readMs, 5_000),
    // Node checks those deadlines on this period (default 30 s, which would let a slow client
    // stay half a minute whatever the timeouts say).
    connectionsCheckingInterval: 1_000
  })
  server.maxConnections = config.webhooks.max_connections
  server.keepAliveTimeout = 5_000
  return server
}

const exactPaths = { caseSensitive: true, ignoreTrailingSlash: false, ignoreDuplicateSlashes: false } as const

/** `--json`: the command's result as one JSON object on stdout (logs stay on stderr). */
const jsonFlag = Flag.Boolean("json").pipe(Flag.withDescription("Print one JSON object"), Flag.withDefault(false))

const migrate = Command.make("migrate", { json: jsonFlag }, ({ json }) =>
  Effect.gen(function* () {
    const applied = yield* applyMigrations
    const info = yield* DatabaseInfo
    if (json) {
      return yield* Console.log(
        JSON.stringify({ applied: applied.map(([id, name]) => ({ id, name })), database: info })
      )
    }
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

const plan = Command.make(
  "plan",
  {
    json: Flag.Boolean("json").pipe(
      Flag.withDescription("Print one JSON array, a plan per connection"),
      Flag.withDefault(false)
    )
  },
  ({ json }) =>
    Effect.gen(function* () {
      const plans = yield* planReport(yield* AppConfig)
      yield* Console.log(json ? JSON.stringify(plans) : renderPlan(plans))
    }).pipe(Effect.provide(MigratedDatabase))
).pipe(
  Command.withDescription(
    "Show whether the schedules fit the rate budget: requests per hour per job, crawl durations, freshness."
  )
)

const outboxRetry = Command.make(
  "retry",
  {
    id: Argument.Int("id").pipe(Argument.withDescription("The outbox row's id")),
    newKey: Flag.Boolean("new-key").pipe(
      Flag.withDescription(
        "Send it with a new idempotency key even though an earlier attempt may have created the record (check the CRM first: this can create a duplicate)"
      ),
      Flag.withDefault(false)
    ),
    json: jsonFlag
  },
  ({ id, newKey, json }) =>
    Effect.gen(function* () {
      const result = yield* Outbox.retry(String(id), { newKey })
      if (newKey && result.changed) {
        yield* Console.error(
          `outbox ${id}: new idempotency key, as asked: if an earlier attempt created the record, this creates it again`
        )
      }
      if (json) {
        return yield* Console.log(
          JSON.stringify({ id, changed: result.changed, status: result.status, new_key: result.newKey })
        )
      }
      yield* Console.log(
        result.changed
          ? `outbox ${id}: pending again${result.newKey ? " with a new idempotency key" : ", same idempotency key"}; the writer sends it next`
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
    ),
    listen: Flag.String("listen").pipe(
      Flag.withDescription(
        "Address to listen on for the browser's callback (default: the redirect_uri's host; 0.0.0.0 inside a container with a published port)"
      ),
      Flag.optional
    )
  },
  ({ connection, listen }) =>
    Effect.gen(function* () {
      const config = yield* AppConfig
      const name = Option.getOrElse(connection, () => config.connections[0]?.name ?? "")
      if (name === "") return yield* new NoConnection({ message: "no CRM connection is configured" })
      const connected = yield* Connect.connect(name, { listenHost: Option.getOrUndefined(listen) })
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

const run = Command.make("run", {}, () => Layer.launch(Daemon)).pipe(
  Command.withDescription(
    "Run the daemon: webhook intake and event processor, business poller, crawlers and the outbound writer."
  )
)

const demo = Command.make(
  "demo",
  {
    records: Flag.Int("records").pipe(Flag.withDescription("Records the sandbox generates"), Flag.withDefault(2000))
  },
  ({ records }) =>
    Effect.gen(function* () {
      const base = yield* AppConfig
      const sandbox = yield* Sandbox
      const { config, tokens } = yield* prepareDemo(base)
      yield* Effect.logInfo(`demo: CRM sandbox at ${sandbox.baseUrl}; the daemon syncs it into the warehouse`)
      const program = Effect.gen(function* () {
        yield* (yield* Credentials).store(config.connections[0]!, tokens)
        yield* Subscriptions.subscribe(config.connections[0]!.name)
        const book = (yield* sandbox.admin.state).books[0]!.id
        // One write of the firm's own, for the outbound writer to push.
        yield* Outbox.enqueue("prospect.create", { book_id: book, first_name: "Ada", last_name: "Outbox" })
        yield* Effect.forkScoped(demoActivity)
        yield* Effect.logInfo(
          `demo: try \`crm-sync status\` in another shell, or the status page at http://127.0.0.1:${config.admin_port}/`
        )
        return yield* Layer.launch(Daemon)
      })
      return yield* Effect.scoped(program).pipe(
        Effect.provide(ApiStack),
        Effect.provide(Layer.succeed(AppConfig, config))
      )
    }).pipe(
      Effect.provide(Layer.unwrap(Effect.map(Effect.succeed(records), (n) => Sandbox.layer({ port: 0, records: n }))))
    )
).pipe(
  Command.withDescription(
    "Run the daemon against the bundled CRM sandbox, on embedded PostgreSQL: what `npm start` does."
  )
)

const backfill = Command.make(
  "backfill",
  {
    // A closed choice: a name it does not know is bad usage (exit 2, the choices listed) before
    // anything else is looked at.
    resource: Flag.Literals("resource", BackfillResourceNames).pipe(
      Flag.withDescription("Only this resource (books, users, teams, project_templates and me mean reference)"),
      Flag.optional
    ),
    json: jsonFlag
  },
  ({ resource, json }) =>
    Effect.gen(function* () {
      const config = yield* AppConfig
      if (config.connections.length === 0) return yield* noCrmConfigured
      yield* runBackfill({
        resource: Option.getOrUndefined(resource),
        // With --json, progress goes to stderr as log lines and the summary to stdout as JSON.
        ...(json
          ? {
              progress: "lines" as const,
              render: (summary: BackfillSummary, failed: boolean) => JSON.stringify({ ok: !failed, ...summary })
            }
          : {})
      })
    }).pipe(Effect.provide(ApiStack))
).pipe(
  Command.withDescription(
    "Crawl every readable resource from scratch: resumable, safe beside the daemon, with progress and an ETA."
  )
)

const reconcile = Command.make(
  "reconcile",
  {
    connection: Flag.String("connection").pipe(
      Flag.withDescription("Only this connection (default: every configured one)"),
      Flag.optional
    ),
    json: jsonFlag
  },
  ({ connection, json }) =>
    Effect.gen(function* () {
      const config = yield* AppConfig
      if (config.connections.length === 0) return yield* noCrmConfigured
      yield* runReconcile({
        connection: Option.getOrUndefined(connection),
        ...(json
          ? {
              render: (reports: ReadonlyArray<ReconcileReport>) =>
                JSON.stringify({ ok: reports.every((report) => report.status !== "failed"), reports })
            }
          : {})
      })
    }).pipe(Effect.provide(ApiStack))
).pipe(
  Command.withDescription(
    "Compare the warehouse with the CRM within a share of the rate budget, repair drift and write a report."
  )
)

const oauthConnection = Argument.String("connection").pipe(
  Argument.withDescription("OAuth connection (default: the first)"),
  Argument.optional
)

const subscribe = Command.make("subscribe", { connection: oauthConnection }, ({ connection }) =>
  Effect.gen(function* () {
    const result = yield* Subscriptions.subscribe(Option.getOrUndefined(connection))
    yield* Console.log(`${result.connection}: subscribed (subscription ${result.subscription.id})`)
  }).pipe(Effect.provide(ApiStack))
).pipe(Command.withDescription("Subscribe the connection's user to webhook events (OAuth connections only)."))

const unsubscribe = Command.make("unsubscribe", { connection: oauthConnection }, ({ connection }) =>
  Effect.gen(function* () {
    const result = yield* Subscriptions.unsubscribe(Option.getOrUndefined(connection))
    yield* Console.log(`${result.connection}: unsubscribed`)
  }).pipe(Effect.provide(ApiStack))
).pipe(Command.withDescription("Remove the connection's webhook subscription."))

const webhooksReplay = Command.make(
  "replay",
  {
    dead: Flag.Boolean("dead").pipe(Flag.withDescription("Replay every dead delivery"), Flag.withDefault(false)),
    hookId: Argument.String("hook-id").pipe(Argument.withDescription("One delivery to replay"), Argument.optional),
    json: jsonFlag
  },
  ({ dead, hookId, json }) =>
    Effect.gen(function* () {
      if (dead === Option.isSome(hookId)) {
        return yield* new UsageError({ message: "webhooks replay takes either --dead or one hook id" })
      }
      const replayed = yield* replay(Option.isSome(hookId) ? { _tag: "One", hookId: hookId.value } : { _tag: "Dead" })
      yield* Console.log(
        json ? JSON.stringify({ replayed }) : `${replayed} deliver${replayed === 1 ? "y" : "ies"} back to pending`
      )
    }).pipe(Effect.provide(WebhookInbox.layer), Effect.provide(MigratedDatabase))
).pipe(Command.withDescription("Process stored deliveries again: every dead one (--dead), or one by hook id."))

const webhooks = Command.make("webhooks").pipe(
  Command.withDescription("Webhook subscriptions and the inbox."),
  Command.withSubcommands([subscribe, unsubscribe, webhooksReplay])
)

const root = Command.make("crm-sync").pipe(
  Command.withDescription(
    "Keeps a firm's PostgreSQL warehouse in step with its CRM, and writes the firm's changes back."
  ),
  Command.withSubcommands([
    run,
    backfill,
    reconcile,
    demo,
    migrate,
    status,
    plan,
    connect,
    outbox,
    webhooks,
    sandboxCommand
  ])
)

const program = Command.run(root, { version: packageJson.version }).pipe(
  Effect.provide(BaseLive),
  // Traces, metrics and logs over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set.
  Effect.provide(TelemetryLive(packageJson.version)),
  Effect.catch((error) =>
    Effect.gen(function* () {
      if (error instanceof ConfigInvalid) {
        yield* Console.error(error.line)
        process.exitCode = 2
      } else if (error instanceof UsageError) {
        yield* Console.error(`crm-sync: ${error.message}`)
        process.exitCode = 2
      } else if (CliError.isCliError(error)) {
        // Already rendered by the CLI (usage and the problem); only the exit code is ours.
        process.exitCode = error._tag === "ShowHelp" && error.errors.length === 0 ? 0 : 2
      } else {
        yield* Console.error(`crm-sync: ${oneLine(error)}`)
        process.exitCode = 1
      }
    })
  ),
  // A defect (a bug, or something no error type foresaw) must not end the command in silence:
  // one line always, the whole cause with CRM_SYNC_LOG_LEVEL=debug.
  Effect.catchCause((cause) =>
    Cause.hasInterruptsOnly(cause)
      ? Effect.failCause(cause)
      : Effect.gen(function* () {
          const debug = (process.env.CRM_SYNC_LOG_LEVEL ?? process.env.LOG_LEVEL) === "debug"
          yield* Console.error(
            `crm-sync: unexpected error: ${oneLine(Cause.squash(cause))}` +
              (debug ? "" : " (CRM_SYNC_LOG_LEVEL=debug prints its cause)")
          )
          if (debug) yield* Console.error(Cause.pretty(cause))
          process.exitCode = 1
        })
  ),
  Effect.provide(NodeServices.layer)
)

// A signal is how a daemon is told to stop: finishing cleanly after SIGTERM/SIGINT is success.
NodeRuntime.runMain(program, {
  disableErrorReporting: true,
  teardown: (exit, onExit) =>
    Exit.isFailure(exit) && !Cause.hasInterruptsOnly(exit.cause)
      ? Runtime.defaultTeardown(exit, onExit)
      : onExit(Number(process.exitCode ?? 0))
})
