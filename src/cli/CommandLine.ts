/**
 * The `crm-sync` command line (src/main.ts loads it): the commands, their flags and their help. A
 * command's module (src/cli/) is imported only when that command runs, so `--help` and a mistyped flag answer
 * without loading the daemon, and a production install runs without the sandbox package.
 *
 * Every command exits 0 on success and otherwise prints one line saying why: 2 for bad input
 * (a bad config value, a bad flag), 1 for anything else. SIGINT/SIGTERM interrupt the running
 * command, whose finalizers (database pool, embedded PostgreSQL, servers) then run in order.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as NodeServices from "@effect/platform-node/NodeServices"
import * as Cause from "effect/Cause"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Runtime from "effect/Runtime"
import * as Argument from "effect/cli/Argument"
import * as CliError from "effect/cli/CliError"
import * as CliOutput from "effect/cli/CliOutput"
import * as Command from "effect/cli/Command"
import * as Flag from "effect/cli/Flag"
import type { HelpDoc } from "effect/cli/HelpDoc"
import packageJson from "../../package.json" with { type: "json" }
import { type Variable, Variables } from "../config/Variables.ts"
import { BackfillResourceNames } from "../sync/BackfillResources.ts"

/** A command's module, loaded when it runs. */
const load = <M, A, E, R>(module: () => Promise<M>, use: (loaded: M) => Effect.Effect<A, E, R>) =>
  Effect.flatMap(Effect.promise(module), use)

const warehouseCommands = () => import("./WarehouseCommands.ts")
const crmCommands = () => import("./CrmCommands.ts")

/** The sandbox's command line, when the development package is installed (a production install leaves it out). */
const sandboxCli = await import("@crm-sync/sandbox/cli").catch(() => undefined)

const notInstalled = (command: string): Effect.Effect<never, unknown> =>
  Effect.fail({
    _tag: "UsageError" as const,
    message: `${command} needs the CRM sandbox (@crm-sync/sandbox), which a production install leaves out: run it from the repository after \`npm install\``
  })

/** `--json`: the command's result as one JSON object on stdout (logs stay on stderr). */
const jsonFlag = Flag.Boolean("json").pipe(Flag.withDescription("Print one JSON object"), Flag.withDefault(false))

const doctor = Command.make(
  "doctor",
  {
    connection: Flag.String("connection").pipe(
      Flag.withDescription("Only this connection (default: every configured one)"),
      Flag.optional
    ),
    json: jsonFlag,
    deep: Flag.Boolean("deep").pipe(
      Flag.withDescription("Also read one page of each listing and report schema drift (writes nothing)"),
      Flag.withDefault(false)
    )
  },
  ({ connection, json, deep }) =>
    load(
      () => import("./DoctorCommand.ts"),
      (module) => module.doctor({ connection: Option.getOrUndefined(connection), json, deep })
    )
).pipe(
  Command.withDescription(
    "Check the setup, one line each: config and secrets, PostgreSQL, each CRM connection, clock, webhooks, budget."
  )
)

const run = Command.make("run", {}, () =>
  load(
    () => import("./Daemon.ts"),
    (daemon) => daemon.run()
  )
).pipe(
  Command.withDescription(
    "Run the daemon: webhook intake and event processor, business poller, crawlers and the outbound writer."
  )
)

const demo = Command.make(
  "demo",
  {
    records: Flag.Int("records").pipe(
      Flag.withDescription("Records the sandbox generates (default: 2000)"),
      Flag.withDefault(2000)
    )
  },
  (input): Effect.Effect<void, unknown> =>
    sandboxCli === undefined
      ? notInstalled("crm-sync demo")
      : load(
          () => import("./DemoCommand.ts"),
          (module) => module.demo(input)
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
      Flag.withDescription(
        "Only this resource (books, users, teams, project_templates and me mean reference; default: all)"
      ),
      Flag.optional
    ),
    json: jsonFlag
  },
  ({ resource, json }) =>
    load(crmCommands, (module) => module.backfill({ resource: Option.getOrUndefined(resource), json }))
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
    load(crmCommands, (module) => module.reconcile({ connection: Option.getOrUndefined(connection), json }))
).pipe(
  Command.withDescription(
    "Compare the warehouse with the CRM within a share of the rate budget, repair drift and write a report."
  )
)

const migrate = Command.make("migrate", { json: jsonFlag }, (input) =>
  load(warehouseCommands, (module) => module.migrate(input))
).pipe(Command.withDescription("Apply pending warehouse migrations (schemas crm and crm_sync)."))

const status = Command.make(
  "status",
  {
    connection: Flag.String("connection").pipe(
      Flag.withDescription("Only this connection: its health, jobs and plan (default: a summary of all)"),
      Flag.optional
    ),
    json: jsonFlag,
    watch: Flag.Boolean("watch").pipe(
      Flag.withDescription(
        "Redraw the view in place until Ctrl-C, like top (off a terminal: one snapshot after another)"
      ),
      Flag.withDefault(false)
    ),
    interval: Flag.Finite("interval").pipe(
      Flag.withDescription("Seconds between two --watch refreshes (default: 5)"),
      Flag.optional
    )
  },
  ({ connection, json, watch, interval }) =>
    load(warehouseCommands, (module) =>
      module.status({
        connection: Option.getOrUndefined(connection),
        json,
        watch,
        interval: Option.getOrUndefined(interval)
      })
    )
).pipe(
  Command.withDescription(
    "Show the connections' health, rows and freshness per resource, the rate budget, and the inbox and outbox."
  )
)

const plan = Command.make("plan", { json: jsonFlag }, (input) =>
  load(warehouseCommands, (module) => module.plan(input))
).pipe(
  Command.withDescription(
    "Show whether the schedules fit the rate budget: requests per hour per job, crawl durations, freshness."
  )
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
    load(crmCommands, (module) =>
      module.connect({ connection: Option.getOrUndefined(connection), listen: Option.getOrUndefined(listen) })
    )
).pipe(
  Command.withDescription(
    "Authorize an OAuth connection (authorization code with PKCE) and store its tokens encrypted."
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
  (input) => load(warehouseCommands, (module) => module.outboxRetry(input))
).pipe(Command.withDescription("Send a failed or needs_review outbox row again."))

const outbox = Command.make("outbox").pipe(
  Command.withDescription("The firm's writes to the CRM (crm_sync.outbox)."),
  Command.withSubcommands([outboxRetry])
)

const oauthConnection = Argument.String("connection").pipe(
  Argument.withDescription("OAuth connection (default: the first)"),
  Argument.optional
)

const subscribe = Command.make("subscribe", { connection: oauthConnection }, ({ connection }) =>
  load(crmCommands, (module) => module.subscribe({ connection: Option.getOrUndefined(connection) }))
).pipe(Command.withDescription("Subscribe the connection's user to webhook events (OAuth connections only)."))

const unsubscribe = Command.make("unsubscribe", { connection: oauthConnection }, ({ connection }) =>
  load(crmCommands, (module) => module.unsubscribe({ connection: Option.getOrUndefined(connection) }))
).pipe(Command.withDescription("Remove the connection's webhook subscription."))

const webhooksReplay = Command.make(
  "replay",
  {
    dead: Flag.Boolean("dead").pipe(Flag.withDescription("Replay every dead delivery"), Flag.withDefault(false)),
    hookId: Argument.String("hook-id").pipe(Argument.withDescription("One delivery to replay"), Argument.optional),
    json: jsonFlag
  },
  ({ dead, hookId, json }) =>
    load(warehouseCommands, (module) => module.webhooksReplay({ dead, hookId: Option.getOrUndefined(hookId), json }))
).pipe(Command.withDescription("Process stored deliveries again: every dead one (--dead), or one by hook id."))

const webhooks = Command.make("webhooks").pipe(
  Command.withDescription("Webhook subscriptions and the inbox."),
  Command.withSubcommands([subscribe, unsubscribe, webhooksReplay])
)

const sandbox =
  sandboxCli?.makeSandboxCommand() ??
  Command.make("sandbox", {}, () => notInstalled("crm-sync sandbox")).pipe(
    Command.withDescription("Run the CRM sandbox (not installed: a development package)")
  )

const root = Command.make("crm-sync").pipe(
  Command.withDescription(
    "Keeps a firm's PostgreSQL warehouse in step with its CRM, and writes the firm's changes back."
  ),
  Command.withSubcommands([
    doctor,
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
    sandbox
  ])
)

/** The help's last section: every variable on the root's help, a pointer to it on the commands'. */
const environmentHelp = (doc: HelpDoc): string => {
  if (doc.usage.startsWith("crm-sync sandbox")) return ""
  if (!doc.usage.startsWith("crm-sync <subcommand>"))
    return "\n\nENVIRONMENT\n  Settings come from CRM_SYNC_* and CRM_* variables (each also as NAME_FILE): see crm-sync --help\n"
  const rows: ReadonlyArray<Variable> = Object.values(Variables)
  const width = Math.max(...rows.map((row) => row.name.length)) + 2
  const lines = rows.map(
    (row) => `  ${row.name.padEnd(width)}${row.about}${row.alias === undefined ? "" : ` (also ${row.alias})`}`
  )
  return [
    "\n\nENVIRONMENT",
    ...lines,
    `  ${"OTEL_EXPORTER_OTLP_ENDPOINT".padEnd(width)}Send traces, metrics and logs over OTLP/HTTP`,
    "",
    "  Each variable may instead name a file as NAME_FILE (a mounted secret). The config file's",
    "  keys and the rest of the settings: config/README.md.",
    ""
  ].join("\n")
}

const defaultFormatter = CliOutput.defaultFormatter()
const formatter: CliOutput.Formatter = {
  ...defaultFormatter,
  formatHelpDoc: (doc) => defaultFormatter.formatHelpDoc(doc).replace(/\n*$/, "") + environmentHelp(doc)
}

/** Errors crm-sync prints as one line and exit code 2 (bad input); matched by tag, so none is loaded here. */
const badInput = (error: unknown): string | undefined => {
  const tagged = error as { readonly _tag?: unknown; readonly line?: unknown; readonly message?: unknown }
  if (tagged?._tag === "ConfigInvalid" && typeof tagged.line === "string") return tagged.line
  if (tagged?._tag === "UsageError" && typeof tagged.message === "string") return `crm-sync: ${tagged.message}`
  return undefined
}

const oneLine = (error: unknown) =>
  Effect.promise(() => import("../observability/Text.ts")).pipe(Effect.map((text) => text.oneLine(error)))

const program = Command.run(root, { version: packageJson.version }).pipe(
  Effect.catch((error) =>
    Effect.gen(function* () {
      const usage = badInput(error)
      if (usage !== undefined) {
        yield* Console.error(usage)
        process.exitCode = 2
      } else if (CliError.isCliError(error)) {
        // Already rendered by the CLI (usage and the problem); only the exit code is ours.
        process.exitCode = error._tag === "ShowHelp" && error.errors.length === 0 ? 0 : 2
      } else {
        yield* Console.error(`crm-sync: ${yield* oneLine(error)}`)
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
            `crm-sync: unexpected error: ${yield* oneLine(Cause.squash(cause))}` +
              (debug ? "" : " (CRM_SYNC_LOG_LEVEL=debug prints its cause)")
          )
          if (debug) yield* Console.error(Cause.pretty(cause))
          process.exitCode = 1
        })
  ),
  Effect.provide(CliOutput.layer(formatter)),
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
