/**
 * The commands that talk to the CRM outside the daemon: `backfill`, `reconcile`, `connect` and the
 * webhook subscription's `subscribe` / `unsubscribe`.
 */
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
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
  }).pipe(Effect.provide(ApiStack), withBase)

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
