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
  companies: Flag.Int("companies").pipe(
    Flag.withDescription("Number of companies (a partner's firms; default: 3)"),
    Flag.optional
  ),
  booksPerCompany: Flag.Int("books-per-company").pipe(
    Flag.withDescription("Books per company (default: 3)"),
    Flag.optional
  ),
  usersPerCompany: Flag.Int("users-per-company").pipe(
    Flag.withDescription("Users per company, at least 2 (default: 4)"),
    Flag.optional
  ),
  recordsPerCompany: Flag.Int("records-per-company").pipe(
    Flag.withDescription("Records per company, spread evenly over every company (replaces --records)"),
    Flag.optional
  ),
  overlap: Flag.Finite("overlap").pipe(
    Flag.withDescription("Share of its company's books each user sees, 0 to 1 (1: all; 0: one each)"),
    Flag.optional
  ),
  userTokens: Flag.Boolean("user-tokens").pipe(
    Flag.withDescription("One seeded read-only personal token per user (GET /_sandbox/tokens lists them)"),
    Flag.withDefault(false)
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
      { command: "crm-sync sandbox --port 0 --window 10s", description: "a free port and 10-second rate windows" },
      {
        command:
          "crm-sync sandbox --companies 500 --books-per-company 1 --users-per-company 2 --records-per-company 20 --user-tokens",
        description: "a partner's 500 firms, a token per user"
      }
    ])
  )
