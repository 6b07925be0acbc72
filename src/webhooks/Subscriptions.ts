/**
 * Webhook subscriptions of a connection (spec §3, §4, §5 rule 6), behind `crm-sync webhooks
 * subscribe` / `unsubscribe` and the daily check. A subscription covers every book the token's
 * user can reach in its company (spec §4 rule 7). Both commands are idempotent as the CRM defines
 * them (a repeat subscribe returns the same subscription, unsubscribing when there is none is a
 * 204); personal access tokens are refused before any request (spec §5 rule 6). What each did is
 * recorded in `crm_sync.webhook_subscriptions`.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql/SqlClient"
import { AppConfig, type Connection } from "../config/AppConfig.ts"
import { CrmClient, type CrmClientShape, UnknownConnection } from "../crm/CrmClient.ts"
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
export const subscribe = Effect.fn("Subscriptions.subscribe")(function* (
  connectionName?: string,
  detail = "subscribed by crm-sync webhooks subscribe"
) {
  const connection = yield* oauthConnection(connectionName)
  const client = yield* CrmClient.make(connection.name)
  const subscription = yield* client.subscribeWebhooks()
  yield* record(connection.name, {
    state: "present",
    subscription_id: subscription.id,
    user_id: subscription.user_id,
    detail
  })
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
 * After `crm-sync connect`: the connection's subscription made again, when crm-sync had made one
 * and not removed it on purpose (a refused grant took it with it, spec §3; a repeat returns the
 * same one). None when crm-sync never subscribed the connection.
 */
export const resubscribe = Effect.fn("Subscriptions.resubscribe")(function* (connectionName: string) {
  const sql = yield* SqlClient
  const [stored] = yield* sql`
    SELECT subscription_id, state FROM crm_sync.webhook_subscriptions WHERE connection = ${connectionName}`.pipe(
    Effect.flatMap(Schema.decodeUnknownEffect(StoredRows))
  )
  if (stored === undefined || stored.state === "unsubscribed") return Option.none<Subscribed>()
  return Option.some(yield* subscribe(connectionName, "subscribed again by crm-sync connect"))
})

/**
 * `DELETE /v1/webhook_subscription` for the connection: removes only this app's subscription for
 * the token's user (spec §4 rule 8); a 204 whether or not one existed.
 */
export const unsubscribe = Effect.fn("Subscriptions.unsubscribe")(function* (connectionName?: string) {
  const connection = yield* oauthConnection(connectionName)
  const client = yield* CrmClient.make(connection.name)
  yield* client.unsubscribeWebhooks()
  yield* record(connection.name, {
    state: "unsubscribed",
    subscription_id: null,
    user_id: null,
    detail: "removed by crm-sync webhooks unsubscribe"
  })
  yield* Effect.logInfo("webhook subscription absent").pipe(Effect.annotateLogs({ connection: connection.name }))
  return { connection: connection.name }
})

// ---------------------------------------------------------------------------------------------
// What crm-sync knows of each subscription, and the daily check
// ---------------------------------------------------------------------------------------------

export type SubscriptionState = "present" | "replaced" | "unreachable" | "unsubscribed"

const StoredRows = Schema.Array(
  Schema.Struct({
    subscription_id: Schema.NullOr(Schema.String),
    state: Schema.Literals(["present", "replaced", "unreachable", "unsubscribed"])
  })
)

/** Writes the connection's row; `previous_id` keeps the id a replacement displaced. */
const record = (
  connection: string,
  row: {
    readonly state: SubscriptionState
    readonly subscription_id: string | null
    readonly user_id: string | null
    readonly detail: string
    readonly previous_id?: string | null
  }
) =>
  Effect.flatMap(
    SqlClient,
    (sql) => sql`
      INSERT INTO crm_sync.webhook_subscriptions AS s
        (connection, subscription_id, user_id, state, previous_id, detail, changed_at, checked_at)
      VALUES (${connection}, ${row.subscription_id}, ${row.user_id}, ${row.state}, ${row.previous_id ?? null},
              ${row.detail}, now(), now())
      ON CONFLICT (connection) DO UPDATE SET
        subscription_id = COALESCE(excluded.subscription_id, s.subscription_id),
        user_id = COALESCE(excluded.user_id, s.user_id),
        previous_id = COALESCE(excluded.previous_id, s.previous_id),
        changed_at = CASE WHEN s.state IS DISTINCT FROM excluded.state
                            OR s.subscription_id IS DISTINCT FROM excluded.subscription_id
                          THEN now() ELSE s.changed_at END,
        state = excluded.state, detail = excluded.detail, checked_at = now()`
  )

export interface SubscriptionCheck {
  readonly connection: string
  /** `skipped`: never subscribed through crm-sync, or unsubscribed on purpose. */
  readonly state: SubscriptionState | "skipped"
  readonly subscription_id: string | null
  readonly previous_id: string | null
}

/**
 * Asks the CRM for the connection's subscription (`POST /v1/webhook_subscription` returns the
 * existing one, spec §3) and compares it with the stored one. A connection crm-sync never
 * subscribed, or one unsubscribed on purpose, is left alone. A refused grant is `unreachable`
 * (the connection already says it needs `crm-sync connect`); other CRM failures fail the check,
 * which runs again later. It exists because the subscription can vanish without a word (an
 * administrative disconnect, the app deleted, spec §3), and every event from then on is lost: the
 * POST then creates a new one, whose different id is logged as an error and exported
 * (`crm_sync_webhook_subscription_ok`).
 */
export const check = Effect.fn("Subscriptions.check")(function* (client: CrmClientShape) {
  const sql = yield* SqlClient
  const connection = client.connection.name
  const [stored] = yield* sql`
    SELECT subscription_id, state FROM crm_sync.webhook_subscriptions WHERE connection = ${connection}`.pipe(
    Effect.flatMap(Schema.decodeUnknownEffect(StoredRows))
  )
  if (stored === undefined || stored.state === "unsubscribed" || client.connection.credential !== "oauth") {
    return { connection, state: "skipped", subscription_id: null, previous_id: null } satisfies SubscriptionCheck
  }
  const asked = yield* client.subscribeWebhooks().pipe(
    Effect.map(Option.some),
    Effect.catchIf(
      (error) =>
        ["NeedsReauthorization", "Unauthorized", "Forbidden", "MissingCredentials"].includes(error.reason._tag),
      (error) =>
        Effect.as(
          record(connection, { state: "unreachable", subscription_id: null, user_id: null, detail: error.message }),
          Option.none()
        )
    )
  )
  if (Option.isNone(asked)) {
    yield* Effect.logWarning(
      "webhook subscription: the CRM refused the check; the connection needs `crm-sync connect`"
    ).pipe(Effect.annotateLogs({ connection }))
    return {
      connection,
      state: "unreachable",
      subscription_id: stored.subscription_id,
      previous_id: null
    } satisfies SubscriptionCheck
  }
  const subscription = asked.value
  const same = stored.subscription_id === subscription.id
  if (same) {
    yield* record(connection, {
      state: "present",
      subscription_id: subscription.id,
      user_id: subscription.user_id,
      detail: "checked"
    })
    return {
      connection,
      state: "present",
      subscription_id: subscription.id,
      previous_id: null
    } satisfies SubscriptionCheck
  }
  const detail =
    `the subscription ${stored.subscription_id ?? "(unknown)"} was gone and the check created ${subscription.id}: ` +
    `events in between were never sent; reconcile repairs tasks, meetings and notes, nothing repairs clients, prospects and contacts`
  yield* record(connection, {
    state: "replaced",
    subscription_id: subscription.id,
    user_id: subscription.user_id,
    previous_id: stored.subscription_id,
    detail
  })
  yield* Effect.logError(`webhook subscription of ${connection}: ${detail}`)
  return {
    connection,
    state: "replaced",
    subscription_id: subscription.id,
    previous_id: stored.subscription_id
  } satisfies SubscriptionCheck
})

/**
 * The subscriptions crm-sync made and has not ended, by connection, with their state and when it
 * last changed (unix seconds).
 */
export const activeSubscriptions = Effect.gen(function* () {
  const sql = yield* SqlClient
  return yield* sql<{ connection: string; state: string; changed_at: number }>`
    SELECT connection, state, extract(epoch FROM changed_at)::float8 AS changed_at
    FROM crm_sync.webhook_subscriptions WHERE state <> 'unsubscribed'`
})
