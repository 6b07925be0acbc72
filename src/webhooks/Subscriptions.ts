/**
 * Webhook subscriptions of a connection (spec §3, §4, §5 rule 6), behind
 * `crm-sync webhooks subscribe` and `crm-sync webhooks unsubscribe`.
 *
 * A subscription belongs to the app, the user and the company the connection's OAuth token was
 * issued for; it covers every book that user can reach in that company (spec §4 rule 7). Both
 * commands are idempotent as the CRM defines them (spec §3): subscribing again returns the existing
 * subscription (the spec gives 201 for the first; a repeat returns the same id), unsubscribing
 * when there is none is a 204. So these
 * functions simply make the call: running them twice is safe.
 *
 * Personal access tokens cannot create or remove subscriptions (spec §5 rule 6); such a connection
 * is refused here, before any request, with a message saying what to do instead.
 */
import { Effect, Schema } from "effect"
import { AppConfig, type Connection } from "../config/AppConfig.ts"
import { CrmClient, UnknownConnection } from "../crm/CrmClient.ts"
import type { WebhookSubscription } from "../crm/Models.ts"

/** The connection cannot hold a webhook subscription (its credential is a personal token). */
export class SubscriptionRefused extends Schema.TaggedError<SubscriptionRefused>()("SubscriptionRefused", {
  connection: Schema.String,
  message: Schema.String
}) {}

export interface Subscribed {
  readonly connection: string
  readonly subscription: WebhookSubscription
}

/** The named connection, or the first configured one; only an OAuth connection may subscribe. */
const oauthConnection = Effect.fnUntraced(function* (name: string | undefined) {
  const config = yield* AppConfig
  const connection: Connection | undefined =
    name === undefined ? config.connections[0] : config.connections.find((candidate) => candidate.name === name)
  if (connection === undefined) return yield* new UnknownConnection({ connection: name ?? "" })
  if (connection.credential !== "oauth") {
    return yield* new SubscriptionRefused({
      connection: connection.name,
      message:
        `connection ${connection.name} uses a personal access token, which cannot manage webhook subscriptions ` +
        `(spec §5 rule 6): configure it with credential "oauth" and run \`crm-sync connect\` first`
    })
  }
  return connection
})

/**
 * `POST /v1/webhook_subscription` for the connection (default: the first configured). Returns the
 * subscription, the same one on every repeat (spec §3).
 */
export const subscribe = Effect.fn("Subscriptions.subscribe")(function* (connectionName?: string) {
  const connection = yield* oauthConnection(connectionName)
  const client = yield* CrmClient.make(connection.name)
  const subscription = yield* client.subscribeWebhooks()
  yield* Effect.logInfo("webhook subscription present").pipe(
    Effect.annotateLogs({
      connection: connection.name,
      subscription_id: subscription.id,
      user_id: subscription.user_id
    })
  )
  return { connection: connection.name, subscription } satisfies Subscribed
})

/**
 * `DELETE /v1/webhook_subscription` for the connection: removes only this app's subscription for
 * the token's user (spec §4 rule 8); a 204 whether or not one existed.
 */
export const unsubscribe = Effect.fn("Subscriptions.unsubscribe")(function* (connectionName?: string) {
  const connection = yield* oauthConnection(connectionName)
  const client = yield* CrmClient.make(connection.name)
  yield* client.unsubscribeWebhooks()
  yield* Effect.logInfo("webhook subscription absent").pipe(Effect.annotateLogs({ connection: connection.name }))
  return { connection: connection.name }
})
