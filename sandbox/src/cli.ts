/**
 * The `sandbox` command's flags and help, cheap to load: crm-sync's command line mounts it, and
 * the emulator itself (SandboxCommand.ts) is imported only when the command runs.
 */
import * as Effect from "effect/Effect"
import { Command, Flag } from "effect/cli"
import { DurationString } from "./Durations.ts"

const flags = {
  port: Flag.Int("port").pipe(
    Flag.withDescription("TCP port, 0 picks a free one (default: 4010)"),
    Flag.withDefault(4010)
  ),
  host: Flag.String("host").pipe(
    Flag.withDescription("Interface to listen on (default: 127.0.0.1)"),
    Flag.withDefault("127.0.0.1")
  ),
  records: Flag.Int("records").pipe(
    Flag.withDescription("Approximate number of generated CRM records (default: 1000)"),
    Flag.withDefault(1000)
  ),
  seed: Flag.Int("seed").pipe(
    Flag.withDescription("Seed of the generated data and faults (default: 1)"),
    Flag.withDefault(1)
  ),
  window: Flag.String("window").pipe(
    Flag.withSchema(DurationString),
    Flag.withDescription("Rate-limit window, e.g. 10s for quick experiments (default: 1h, as the spec)"),
    Flag.withDefault("1h")
  ),
  debounce: Flag.String("debounce").pipe(
    Flag.withSchema(DurationString),
    Flag.withDescription("client.updated debounce window (default: 60s)"),
    Flag.withDefault("60s")
  ),
  webhookHeaderPrefix: Flag.Literals("webhook-header-prefix", ["hook", "webhook", "svix"]).pipe(
    Flag.withDescription("Prefix of the webhook signature headers (default: hook)"),
    Flag.withDefault("hook")
  ),
  adminToken: Flag.String("admin-token").pipe(
    Flag.withDescription("Require this bearer token on the /_sandbox admin API"),
    Flag.optional
  )
}

/** Builds the `sandbox` command (a fresh value each call, for mounting under another command). */
export const makeSandboxCommand = () =>
  Command.make("sandbox", flags, (input) =>
    Effect.flatMap(
      Effect.promise(() => import("./SandboxCommand.ts")),
      (module) => module.runSandbox(input)
    )
  ).pipe(
    Command.withDescription(
      "Run the CRM sandbox: the v1 API, OAuth, rate limits, idempotency, webhooks and fault injection, on generated data"
    ),
    Command.withExamples([
      { command: "crm-sync sandbox --records 100000", description: "100k generated records on port 4010" },
      { command: "crm-sync sandbox --port 0 --window 10s", description: "a free port and 10-second rate windows" }
    ])
  )
