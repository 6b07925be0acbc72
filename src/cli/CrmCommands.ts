/**
 * The commands that talk to the CRM outside the daemon: `backfill`, `reconcile`, `connect` and the
 * webhook subscription's `subscribe` / `unsubscribe`.
 */
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { AppConfig } from "../config/AppConfig.ts"
import * as Connect from "../crm/Connect.ts"
import { backfill as runBackfill } from "../sync/Backfill.ts"
import type { BackfillSummary } from "../sync/BackfillSummary.ts"
import type { BackfillResourceName } from "../sync/BackfillResources.ts"
import type { ReconcileReport } from "../sync/ReconcileReport.ts"
import { reconcile as runReconcile } from "../sync/Reconciler.ts"
import * as Subscriptions from "../webhooks/Subscriptions.ts"
import { ApiStack } from "./ApiStack.ts"
import { NoConnection, noCrmConfigured, withBase } from "./Base.ts"

export const backfill = (input: { readonly resource: BackfillResourceName | undefined; readonly json: boolean }) =>
  Effect.gen(function* () {
    const config = yield* AppConfig
    if (config.connections.length === 0) return yield* noCrmConfigured
    yield* runBackfill({
      resource: input.resource,
      // With --json, progress goes to stderr as log lines and the summary to stdout as JSON.
      ...(input.json
        ? {
            progress: "lines" as const,
            render: (summary: BackfillSummary, failed: boolean) => JSON.stringify({ ok: !failed, ...summary })
          }
        : {})
    })
  }).pipe(
    // A signal ends the command as an interruption, which the command line exits 0 on (a daemon's
    // normal stop); a backfill stopped part way is not done, and a Job must run it again. The
    // backfill has printed its table and the line saying how to resume.
    Effect.onInterrupt(() =>
      Effect.sync(() => {
        process.exitCode = 1
      })
    ),
    Effect.provide(ApiStack),
    withBase
  )

export const reconcile = (input: { readonly connection: string | undefined; readonly json: boolean }) =>
  Effect.gen(function* () {
    const config = yield* AppConfig
    if (config.connections.length === 0) return yield* noCrmConfigured
    yield* runReconcile({
      connection: input.connection,
      ...(input.json
        ? {
            render: (reports: ReadonlyArray<ReconcileReport>) =>
              JSON.stringify({ ok: reports.every((report) => report.status !== "failed"), reports })
          }
        : {})
    })
  }).pipe(Effect.provide(ApiStack), withBase)

export const connect = (input: { readonly connection: string | undefined; readonly listen: string | undefined }) =>
  Effect.gen(function* () {
    const config = yield* AppConfig
    const name = input.connection ?? config.connections[0]?.name ?? ""
    if (name === "") return yield* new NoConnection({ message: "no CRM connection is configured" })
    const connected = yield* Connect.connect(name, { listenHost: input.listen })
    yield* Console.log(
      `connected ${connected.connection}${connected.userId === undefined ? "" : ` as user ${connected.userId}`}` +
        (connected.canWrite === undefined ? "" : connected.canWrite ? ", write access enabled" : ", read-only")
    )
    yield* Console.log(yield* resubscribeLine(connected.connection))
  }).pipe(Effect.provide(ApiStack), withBase)

/**
 * A refused grant takes the webhook subscription with it (spec §3): `connect` makes it again when
 * crm-sync had made one, and says in one line what it did or what is left to do.
 */
const resubscribeLine = (name: string) =>
  Subscriptions.resubscribe(name).pipe(
    Effect.map(
      Option.match({
        onNone: () =>
          `webhooks: ${name} has no subscription made by crm-sync; run \`crm-sync webhooks subscribe ${name}\` to receive events`,
        onSome: (result) => `webhooks: ${name} subscribed (subscription ${result.subscription.id})`
      })
    ),
    Effect.catch((error) =>
      Effect.succeed(
        `webhooks: ${name} could not subscribe again (${error.message}); run \`crm-sync webhooks subscribe ${name}\``
      )
    )
  )

export const subscribe = (input: { readonly connection: string | undefined }) =>
  Effect.gen(function* () {
    const result = yield* Subscriptions.subscribe(input.connection)
    yield* Console.log(`${result.connection}: subscribed (subscription ${result.subscription.id})`)
  }).pipe(Effect.provide(ApiStack), withBase)

export const unsubscribe = (input: { readonly connection: string | undefined }) =>
  Effect.gen(function* () {
    const result = yield* Subscriptions.unsubscribe(input.connection)
    yield* Console.log(`${result.connection}: unsubscribed`)
  }).pipe(Effect.provide(ApiStack), withBase)
