/**
 * Shared pieces of the webhook tests: signing secrets, deliveries signed with `standardwebhooks`
 * exactly as a sender would, and the intake served on an ephemeral loopback port with an
 * `HttpClient` pointed at it.
 */
import { NodeHttpServer } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import { HttpClient, HttpClientRequest, HttpRouter } from "effect/http"
import { randomBytes } from "node:crypto"
import { Webhook } from "standardwebhooks"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { Credentials } from "../../src/crm/Credentials.ts"
import { HealthRoutes } from "../../src/admin/Health.ts"
import { InboxWriter } from "../../src/webhooks/InboxWriter.ts"
import { WebhookInbox } from "../../src/webhooks/WebhookInbox.ts"
import { WebhookIntake } from "../../src/webhooks/WebhookIntake.ts"

/** A fresh Standard Webhooks signing secret, `whsec_<base64 of 24 random bytes>`. */
export const makeSecret = () => `whsec_${randomBytes(24).toString("base64")}`

export interface SignOptions {
  /** Unix seconds; default now. */
  readonly timestamp?: number
  /** `hook-` (default), `webhook-` or `svix-`. */
  readonly prefix?: string
}

/** The three delivery headers for `body`, signed with `secret`. */
export const signedHeaders = (secret: string, id: string, body: string, options: SignOptions = {}) => {
  const timestamp = options.timestamp ?? Math.floor(Date.now() / 1000)
  const prefix = options.prefix ?? "hook-"
  return {
    [`${prefix}id`]: id,
    [`${prefix}timestamp`]: String(timestamp),
    [`${prefix}signature`]: new Webhook(secret).sign(id, new Date(timestamp * 1000), body)
  }
}

let sequence = 0
/** A unique delivery id, shaped like the delivery platform's. */
export const hookId = () =>
  `msg_${Date.now().toString(36)}_${(sequence++).toString(36)}_${randomBytes(4).toString("hex")}`

export interface Response {
  readonly status: number
  readonly body: string
}

/** POSTs `body` (sent byte for byte) to `path` on the test server. */
export const post = (path: string, body: string | Uint8Array, headers: Record<string, string>) =>
  Effect.gen(function* () {
    const client = yield* HttpClient.HttpClient
    const request = HttpClientRequest.post(path).pipe(
      HttpClientRequest.setHeaders(headers),
      typeof body === "string"
        ? HttpClientRequest.bodyText(body, "application/json")
        : HttpClientRequest.bodyUint8Array(body, "application/json")
    )
    const response = yield* client.execute(request)
    return { status: response.status, body: yield* response.text } satisfies Response
  })

/** Signs and POSTs a delivery to `/webhooks/<endpoint>`. */
export const deliver = (endpoint: string, secret: string, body: string, id = hookId(), options: SignOptions = {}) =>
  post(`/webhooks/${endpoint}`, body, signedHeaders(secret, id, body, options))

/**
 * The intake stack (inbox, group-commit writer, intake, routes) plus health routes, served on an
 * ephemeral port, with Credentials (which readiness asks); needs `AppConfig` and a `SqlClient`.
 */
export const IntakeServer = HttpRouter.serve(Layer.mergeAll(WebhookIntake.routes, HealthRoutes), {
  disableLogger: true,
  disableListenLog: true
}).pipe(
  Layer.provideMerge(WebhookIntake.layer),
  Layer.provideMerge(InboxWriter.layer),
  Layer.provideMerge(WebhookInbox.layer),
  Layer.provideMerge(Credentials.layer),
  Layer.provideMerge(NodeHttpServer.layerTest)
)

export const configLayer = (document: Record<string, unknown>) => AppConfig.layerFrom(document)

/**
 * Stores a delivery in the inbox as the intake would after verifying it (event type from the
 * body, else the endpoint's fixed one), for tests of the processor alone. Returns its hook-id.
 */
export const enqueue = (
  body: Record<string, unknown> | string,
  options: { endpoint?: string; eventType?: string; id?: string; signedAt?: number | undefined } = {}
) =>
  Effect.gen(function* () {
    const inbox = yield* WebhookInbox
    const text = typeof body === "string" ? body : JSON.stringify(body)
    const json = typeof body === "string" ? undefined : body
    const id = options.id ?? hookId()
    const eventType = typeof json?.event_type === "string" ? json.event_type : (options.eventType ?? null)
    yield* inbox.insert([
      {
        hookId: id,
        endpoint: options.endpoint ?? "default",
        eventType,
        body: new TextEncoder().encode(text),
        signedAt: options.signedAt ?? Date.now(),
        status: "pending",
        error: null
      }
    ])
    return id
  })
