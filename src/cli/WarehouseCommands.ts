/**
 * The commands that need only the warehouse: `migrate`, `status` (`--watch`: StatusWatch.ts),
 * `plan`, `outbox retry` and `webhooks replay`. Each prints one JSON object with `--json`. Each
 * imports what it reads when it runs, so `status` does not load the event processor.
 */
import * as Console from "effect/Console"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Schema from "effect/Schema"
import { AppConfig } from "../config/AppConfig.ts"
import { DatabaseInfo, DatabaseLive, MigratedDatabase } from "../warehouse/Database.ts"
import { migrate as applyMigrations } from "../warehouse/Migrations.ts"
import { UsageError, withBase } from "./Base.ts"
import { DEFAULT_INTERVAL_SECONDS, MIN_INTERVAL_SECONDS, watch } from "./StatusWatch.ts"

const statusModule = () => import("../admin/StatusReport.ts")
const planModule = () => import("../admin/PlanReport.ts")
const historyModule = () => import("../warehouse/History.ts")
const outboxModule = () => import("../outbound/Outbox.ts")
const processorModule = () => import("../webhooks/EventProcessor.ts")
const inboxModule = () => import("../webhooks/WebhookInbox.ts")

export const migrate = (input: { readonly json: boolean }) =>
  Effect.gen(function* () {
    const applied = yield* applyMigrations
    const info = yield* DatabaseInfo
    if (input.json) {
      return yield* Console.log(
        JSON.stringify({ applied: applied.map(([id, name]) => ({ id, name })), database: info })
      )
    }
    yield* Console.log(
      applied.length === 0
        ? `warehouse is up to date (${info.kind}: ${info.location})`
        : `applied ${applied.length} migration(s) to ${info.kind}: ${info.location}\n${applied.map(([id, name]) => `  ${String(id).padStart(4, "0")}_${name}`).join("\n")}`
    )
  }).pipe(Effect.provide(DatabaseLive), withBase)

/** How `status` was asked for; `--watch` redraws the view every `--interval` seconds. */
export interface StatusInput {
  readonly json: boolean
  readonly connection?: string | undefined
  readonly watch?: boolean
  readonly interval?: number | undefined
}

/** Flags that cannot go together, refused before the database is opened. */
const statusUsage = (input: StatusInput): string | undefined => {
  if (input.watch === true && input.json)
    return "status --watch redraws the terminal view and cannot print --json: run status --json at the interval you need"
  if (input.interval !== undefined && input.watch !== true)
    return "status --interval sets how often --watch redraws: add --watch"
  if (input.interval !== undefined && !(input.interval >= MIN_INTERVAL_SECONDS && input.interval <= 3600))
    return `status --interval takes seconds from ${MIN_INTERVAL_SECONDS} to 3600, not ${input.interval}`
  return undefined
}

/** `--connection NAME`: the report of that connection alone (its plan is the only one made). */
export const status = (input: StatusInput) => {
  const usage = statusUsage(input)
  if (usage !== undefined) return Effect.fail(new UsageError({ message: usage }))
  return Effect.gen(function* () {
    const { renderStatus, statusReport, PLAN_TTL } = yield* Effect.promise(statusModule)
    const config = yield* AppConfig
    const only = input.connection
    if (only !== undefined && !config.connections.some((connection) => connection.name === only)) {
      const names = config.connections.map((connection) => connection.name)
      return yield* new UsageError({
        message: `status --connection: no connection named ${only} in this config (${names.length === 0 ? "none configured" : `configured: ${names.slice(0, 10).join(", ")}${names.length > 10 ? ", ..." : ""}`})`
      })
    }
    const database = yield* DatabaseInfo
    if (input.watch !== true) {
      const report = yield* statusReport(config, database, only)
      return yield* Console.log(input.json ? JSON.stringify(report) : renderStatus(report))
    }
    // The plans follow hourly rates: remade every PLAN_TTL, as for the status page, not at each
    // frame; one that failed is tried again at the next.
    const { planReport } = yield* Effect.promise(planModule)
    const plans = yield* Effect.cachedWithTTL(planReport(config, only), (exit) =>
      Exit.isSuccess(exit) ? PLAN_TTL : Duration.zero
    )
    const render = Effect.gen(function* () {
      const report = yield* statusReport(config, database, only, yield* plans)
      return { text: renderStatus(report), at: report.generated_at }
    })
    yield* watch(render, input.interval ?? DEFAULT_INTERVAL_SECONDS, () =>
      process.stdout.isTTY ? { rows: process.stdout.rows, columns: process.stdout.columns } : undefined
    )
  }).pipe(Effect.provide(MigratedDatabase), withBase)
}

/** `--json`: `{"generated_at": ..., "connections": [a plan per connection]}` (docs/client-and-budget.md). */
export const plan = (input: { readonly json: boolean }) =>
  Effect.gen(function* () {
    const { planReport, renderPlan } = yield* Effect.promise(planModule)
    const plans = yield* planReport(yield* AppConfig)
    const { historyStats } = yield* Effect.promise(historyModule)
    // The history's growth: versions that ended in the last day, per resource (docs/history.md).
    const history = Object.fromEntries((yield* historyStats).map((row) => [row.resource, row.last_day]))
    yield* Console.log(
      input.json
        ? JSON.stringify({
            generated_at: new Date().toISOString(),
            connections: plans,
            history_versions_per_day: history
          })
        : `${renderPlan(plans)}\nhistory: versions ended in the last day: ${Object.entries(history)
            .map(([resource, n]) => `${resource} ${n}`)
            .join(", ")}`
    )
  }).pipe(Effect.provide(MigratedDatabase), withBase)

/** `outbox retry` of a row that is not waiting to be sent again: nothing was done (exit 1). */
class NothingToRetry extends Schema.TaggedError<NothingToRetry>()("NothingToRetry", { message: Schema.String }) {}

export const outboxRetry = (input: { readonly id: number; readonly newKey: boolean; readonly json: boolean }) =>
  Effect.gen(function* () {
    const { id, newKey, json } = input
    const Outbox = yield* Effect.promise(outboxModule)
    const result = yield* Outbox.retry(String(id), { newKey })
    if (newKey && result.changed) {
      yield* Console.error(
        `outbox ${id}: new idempotency key, as asked: if an earlier attempt created the record, this creates it again`
      )
    }
    if (json) {
      yield* Console.log(JSON.stringify({ id, changed: result.changed, status: result.status, new_key: result.newKey }))
    } else if (result.changed) {
      yield* Console.log(
        `outbox ${id}: pending again${result.newKey ? " with a new idempotency key" : ", same idempotency key"}; the writer sends it next`
      )
    }
    if (!result.changed) {
      return yield* new NothingToRetry({
        message: `outbox ${id} is ${result.status}: only a failed or needs_review row is sent again`
      })
    }
  }).pipe(Effect.provide(MigratedDatabase), withBase)

export const webhooksReplay = (input: {
  readonly dead: boolean
  readonly hookId: string | undefined
  readonly json: boolean
}) =>
  Effect.gen(function* () {
    if (input.dead === (input.hookId !== undefined)) {
      return yield* new UsageError({ message: "webhooks replay takes either --dead or one hook id" })
    }
    const [{ replay }, { WebhookInbox }] = yield* Effect.promise(() => Promise.all([processorModule(), inboxModule()]))
    const { replayed, leftDead } = yield* replay(
      input.hookId !== undefined ? { _tag: "One", hookId: input.hookId } : { _tag: "Dead" }
    ).pipe(Effect.provide(WebhookInbox.layer))
    const left =
      leftDead === 0
        ? ""
        : `; ${leftDead} left dead: no event_type to decode ${leftDead === 1 ? "it" : "them"} by (see its error); ` +
          "its copy on the endpoint of its event type completes it once that endpoint's signing secret is right"
    yield* Console.log(
      input.json
        ? JSON.stringify({ replayed, left_dead: leftDead })
        : `${replayed} deliver${replayed === 1 ? "y" : "ies"} back to pending${left}`
    )
  }).pipe(Effect.provide(MigratedDatabase), withBase)
