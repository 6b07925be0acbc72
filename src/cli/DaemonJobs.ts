/**
 * The daemon's jobs: sync's read-sync jobs (sync/SyncJobs.ts) with the webhooks' subscription
 * check (webhooks/Subscriptions.ts) on the same scheduler, and the re-check of a refused grant's
 * subscription. Sync and webhooks meet only in the warehouse; this file, above both, composes them.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as PubSub from "effect/PubSub"
import { SqlClient } from "effect/sql/SqlClient"
import { AppConfig } from "../config/AppConfig.ts"
import type { CrmClientShape } from "../crm/CrmClient.ts"
import { Credentials } from "../crm/Credentials.ts"
import * as Metrics from "../observability/Metrics.ts"
import type { JobOutcome } from "../sync/JobRuns.ts"
import type { ScheduledJob } from "../sync/Scheduler.ts"
import { toSyncError } from "../sync/SyncError.ts"
import { clients, JobNames, syncJobsWith, SyncServicesLive } from "../sync/SyncJobs.ts"
import * as Subscriptions from "../webhooks/Subscriptions.ts"

/** The webhook subscription check (Subscriptions.check) of an OAuth connection. */
const subscriptionJob = (client: CrmClientShape, interval: Duration.Duration) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const connection = client.connection.name
    return {
      job: JobNames.subscription,
      connection,
      interval,
      lease: `subscription:${connection}`,
      alsoCounts: [],
      run: Subscriptions.check(client).pipe(
        Effect.provideService(SqlClient, sql),
        Effect.map((checked): JobOutcome => ({
          requests: checked.state === "skipped" ? 0 : 1,
          detail: { ...checked }
        })),
        Effect.mapError(toSyncError(JobNames.subscription, { connection }))
      )
    } satisfies ScheduledJob
  })

/** The webhook subscription check of an OAuth connection, every `schedules.subscription_check`. */
const subscriptionJobs = (client: CrmClientShape) =>
  client.connection.credential === "oauth"
    ? Effect.flatMap(AppConfig, (config) => Effect.all([subscriptionJob(client, config.schedules.subscription_check)]))
    : Effect.succeed([])

/**
 * The subscription check of a connection whose grant this process just found refused, at once
 * rather than at the next daily check: the CRM removed the subscription with the grant, and the
 * check records it `unreachable`, so `crm_sync_webhook_subscription_ok` turns 0 now.
 */
export const recheckOnRefusal = (
  oauth: ReadonlyArray<CrmClientShape>,
  refusals: PubSub.Subscription<string>
): Effect.Effect<never, never, SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    while (true) {
      const name = yield* PubSub.take(refusals)
      const client = oauth.find((candidate) => candidate.connection.name === name)
      if (client === undefined) continue
      yield* Subscriptions.check(client).pipe(
        Effect.provideService(SqlClient, sql),
        Effect.tap((checked) =>
          checked.state === "skipped"
            ? Effect.void
            : Metrics.set(Metrics.webhookSubscriptionOk, checked.state === "present" ? 1 : 0, { connection: name })
        ),
        Effect.catch((error) =>
          Effect.logWarning("webhook subscription: the re-check after a refused grant failed").pipe(
            Effect.annotateLogs({ connection: name, error: error.message })
          )
        )
      )
    }
  })

/**
 * The re-check of an OAuth connection's webhook subscription as soon as this process finds its
 * grant refused (the scheduled checks run on the scheduler).
 */
export const SubscriptionRecheckLive = Layer.effectDiscard(
  Effect.gen(function* () {
    const oauth = (yield* clients).filter((client) => client.connection.credential === "oauth")
    const refusals = yield* (yield* Credentials).refusals
    yield* Effect.forkScoped(recheckOnRefusal(oauth, refusals))
  })
).pipe(Layer.provide(SyncServicesLive))

/**
 * All read-sync jobs of the daemon (one scheduler), the re-check of a refused grant's subscription,
 * the orphan sweep and the history prune. The re-check is built first: it listens for refusals
 * before any job runs, so none found meanwhile is missed.
 */
export const SyncJobsLive = syncJobsWith([subscriptionJobs]).pipe(Layer.provide(SubscriptionRecheckLive))
