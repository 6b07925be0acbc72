/**
 * What every command but `sandbox` runs on: the config (file and environment), logs on stderr at
 * the configured level (text on a terminal, JSON lines otherwise, or as `log_format` says), and
 * OTLP export when `OTEL_EXPORTER_OTLP_ENDPOINT` is set. The command line (CommandLine.ts) loads a
 * command's module, and through it this one, only when it runs.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import packageJson from "../../package.json" with { type: "json" }
import { AppConfig } from "../config/AppConfig.ts"
import { LoggingLayer } from "../observability/Logs.ts"
import { TelemetryLive } from "../observability/Telemetry.ts"

const logLevels = { debug: "Debug", info: "Info", warn: "Warn", error: "Error" } as const

/** Logs go to stderr so that command output (`status --json`) stays clean on stdout. */
export const LoggingLive = Layer.unwrap(
  Effect.map(AppConfig, (config) =>
    LoggingLayer(config.log_format ?? (process.stderr.isTTY ? "text" : "json"), logLevels[config.log_level])
  )
)

export const BaseLive = LoggingLive.pipe(Layer.provideMerge(AppConfig.layer))

/** A command's program with the config, logging and telemetry it runs on. */
export const withBase = <A, E, R>(program: Effect.Effect<A, E, R>) =>
  program.pipe(Effect.provide(BaseLive), Effect.provide(TelemetryLive(packageJson.version)))

/**
 * A command's program on a config it loaded itself (`doctor`, which reports a config that does
 * not load as a failed check instead of stopping), with the logging and telemetry of `withBase`.
 */
export const withConfig =
  (config: AppConfig["Service"]) =>
  <A, E, R>(program: Effect.Effect<A, E, R>) =>
    program.pipe(
      Effect.provide(LoggingLive.pipe(Layer.provideMerge(Layer.succeed(AppConfig, config)))),
      Effect.provide(TelemetryLive(packageJson.version))
    )

/** A command used the wrong way: printed as one line, exit code 2. */
export class UsageError extends Schema.TaggedError<UsageError>()("UsageError", { message: Schema.String }) {}

export class NoConnection extends Schema.TaggedError<NoConnection>()("NoConnection", { message: Schema.String }) {}

export const noCrmConfigured = new NoConnection({
  message:
    "no CRM is configured: set CRM_BASE_URL and CRM_TOKEN, or CRM_SYNC_CONFIG (see config/README.md); `npm start` runs the daemon against the bundled sandbox"
})
