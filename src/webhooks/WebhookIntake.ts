/**
 * WebhookIntake: the HTTP side of webhooks. One route per configured endpoint, `POST /webhooks/<name>`,
 * each with its own signing secrets (several during a rotation) and an optional fixed event type
 * (spec §6.3: `client.created`, `client.updated` and `prospect.created` carry no `event_type`, so
 * only their endpoint says what they are). A delivery is stored only once verified, and answered 200
 * only after its commit (spec §6.1: "returns a 2xx response promptly after verifying and durably
 * accepting the delivery"); a refusal stores nothing and is counted in
 * `crm_sync_webhook_deliveries_total` by reason, and in `crm_sync.webhook_refusals` (WebhookRefusals).
 */
import * as ByteSize from "effect/ByteSize"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Predicate from "effect/Predicate"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as HttpIncomingMessage from "effect/http/HttpIncomingMessage"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import { AppConfig, type WebhookEndpoint } from "../config/AppConfig.ts"
import * as Metrics from "../observability/Metrics.ts"
import { InboxUnavailable, InboxWriter } from "./InboxWriter.ts"
import type { InboxRow } from "./WebhookInbox.ts"
import { WebhookRefusals } from "./WebhookRefusals.ts"
import { parseJsonBody } from "./JsonBody.ts"
import { tooDeep } from "./JsonDepth.ts"
import {
  type DeliveryHeaders,
  makeSignatureVerifier,
  readDeliveryHeaders,
  type RejectionReason,
  type SignatureVerifier,
  WebhookRejected
} from "./WebhookSignature.ts"

/** An endpoint whose secret is not a valid `whsec_<base64>` key: reported at startup. */
export class WebhookConfigError extends Schema.TaggedError<WebhookConfigError>()("WebhookConfigError", {
  endpoint: Schema.String,
  message: Schema.String
}) {}

/** How long a delivery may wait for its commit before it is answered 503. */
const ACCEPT_TIMEOUT = Duration.seconds(10)

/** The path of an endpoint, as the sender must be configured with it. */
export const endpointPath = (name: string) => `/webhooks/${name}` as const

interface Endpoint {
  readonly name: string
  readonly eventType: string | null
  readonly verifier: SignatureVerifier
}

/** What the inbox needs to know of a body: whether it is JSON, and the event type it names. */
const inspectBody = (body: Uint8Array): Result.Result<string | null, string> =>
  parseJsonBody(body).pipe(
    Result.map((json) =>
      Predicate.isObject(json) && "event_type" in json && Predicate.isString(json.event_type) && json.event_type !== ""
        ? json.event_type
        : null
    ),
    Result.mapError((problem) =>
      problem._tag === "NotJson"
        ? `body is not JSON: ${problem.detail}`
        : problem._tag === "TooDeep"
          ? tooDeep
          : "body is not UTF-8"
    )
  )

const respond = (status: number, body: Record<string, string>) => HttpServerResponse.jsonUnsafe(body, { status })

const count = (endpoint: string, result: string) => Metrics.increment(Metrics.webhookDeliveries, { endpoint, result })

const rejected = (reason: RejectionReason, detail: string) => new WebhookRejected({ reason, detail })

/**
 * A refusal: counted, recorded for `status` and logged (a WARN per endpoint at most every few
 * minutes, so a flood of them cannot flood the logs; each one at debug level), answered.
 */
const refuse = (intake: Intake, endpoint: string, rejection: WebhookRejected) =>
  Effect.as(
    Effect.andThen(
      Effect.andThen(
        count(endpoint, rejection.reason),
        intake.refusals.record(endpoint, rejection.reason, rejection.detail)
      ),
      Effect.logDebug("webhook delivery refused").pipe(
        Effect.annotateLogs({ endpoint, reason: rejection.reason, detail: rejection.detail })
      )
    ),
    respond(rejection.status, { error: rejection.reason, detail: rejection.detail })
  )

/** The 200 answers, made once (responses are immutable values). */
const answers = {
  accepted: respond(200, { status: "accepted" }),
  duplicate: respond(200, { status: "duplicate" }),
  not_json: respond(200, { status: "not_json" })
} as const

/** Answered when too many bodies are being read at once (see `Intake.inflightBytes`). */
const busy = HttpServerResponse.jsonUnsafe(
  { error: "busy", detail: "too many deliveries being read; retry shortly" },
  // Closing the connection spares reading (into memory) the body it refused.
  { status: 503, headers: { "retry-after": "1", connection: "close" } }
)

/** The intake as its layer assembles it: the endpoints, where deliveries go, and the body limits. */
interface Intake {
  readonly endpoints: ReadonlyMap<string, Endpoint>
  readonly writer: InboxWriter["Service"]
  readonly refusals: WebhookRefusals["Service"]
  readonly maxBytes: number
  readonly maxInflight: number
  /**
   * Body bytes being read at once, across every delivery: each reserves its declared length
   * (or the maximum) before its body is read. Beyond `max_inflight_bytes` the answer is 503 with
   * Retry-After before anything is read, so a flood of unsigned bodies cannot take the memory
   * (honest senders retry).
   */
  inflightBytes: number
}

// ---------------------------------------------------------------------------------------------
// Verification: headers, timestamp, body, signature
// ---------------------------------------------------------------------------------------------

const readBody = (request: HttpServerRequest.HttpServerRequest, maxBytes: number) =>
  request.arrayBuffer.pipe(
    Effect.provideService(HttpIncomingMessage.MaxBodySize, ByteSize.bytes(maxBytes)),
    Effect.map((buffer) => new Uint8Array(buffer)),
    Effect.mapError((error) =>
      error.reason._tag === "RequestParseError" && error.reason.reason === "BodyTooLarge"
        ? rejected("body_too_large", `the body exceeds ${maxBytes} bytes`)
        : rejected("unreadable_body", "the body could not be read")
    )
  )

/**
 * Steps 3 to 6 of `handle`: the delivery's headers and its body, or why it is refused. Headers
 * first (400), then the timestamp (401), then the body (413 past the limit, whatever
 * Content-Length claimed), then the signature over those exact bytes (401).
 */
const verify = Effect.fnUntraced(function* (
  endpoint: Endpoint,
  request: HttpServerRequest.HttpServerRequest,
  maxBytes: number
) {
  const headers = readDeliveryHeaders(request.headers)
  if (Result.isFailure(headers)) return yield* Effect.fail(headers.failure)
  // Timestamp first (no body needed), then the body, then the HMAC over its exact bytes.
  const fresh = endpoint.verifier.checkTimestamp(headers.success, yield* Clock.currentTimeMillis)
  if (Result.isFailure(fresh)) return yield* Effect.fail(fresh.failure)
  const body = yield* readBody(request, maxBytes)
  const verified = endpoint.verifier.checkSignature(headers.success, body)
  if (Result.isFailure(verified)) return yield* Effect.fail(verified.failure)
  return { headers: headers.success, body }
})

// ---------------------------------------------------------------------------------------------
// Storing: the inbox row, committed before the answer
// ---------------------------------------------------------------------------------------------

/**
 * The inbox row of a verified delivery. A signed body that is not JSON is stored as `dead` with the
 * reason (and answered 200): a retry would bring the same bytes.
 */
const inboxRow = (
  name: string,
  endpoint: Endpoint,
  delivery: { readonly headers: DeliveryHeaders; readonly body: Uint8Array }
): InboxRow => {
  const inspected = inspectBody(delivery.body)
  return {
    hookId: delivery.headers.id,
    endpoint: name,
    eventType: Result.isSuccess(inspected) ? (inspected.success ?? endpoint.eventType) : endpoint.eventType,
    body: delivery.body,
    signedAt: delivery.headers.timestamp * 1000,
    status: Result.isSuccess(inspected) ? "pending" : "dead",
    error: Result.isFailure(inspected) ? inspected.failure : null
  }
}

/**
 * Stores the row through the group-commit InboxWriter and answers once it is committed: 200, also
 * for a repeat of a stored hook-id (which changes nothing); 503 when the database cannot take it,
 * and the sender retries.
 */
const store = Effect.fnUntraced(function* (
  writer: InboxWriter["Service"],
  name: string,
  row: InboxRow,
  startedNanos: bigint
) {
  // A database that hangs rather than refuses must not hold the sender until it gives up:
  // past ACCEPT_TIMEOUT the answer is 503. Should the row commit after all, the sender's
  // retry is a duplicate and gets its 2xx then.
  const stored = yield* Effect.result(
    writer.accept(row).pipe(
      Effect.timeoutOrElse({
        duration: ACCEPT_TIMEOUT,
        orElse: () => Effect.fail(new InboxUnavailable({ message: "the inbox did not commit in time" }))
      })
    )
  )
  if (Result.isFailure(stored)) {
    yield* count(name, "unavailable")
    yield* Effect.logWarning("webhook delivery not stored; answered 503").pipe(
      Effect.annotateLogs({ endpoint: name, hook_id: row.hookId, error: stored.failure.message })
    )
    return respond(503, { error: "unavailable", detail: "the delivery could not be stored; retry later" })
  }
  const result = row.status === "dead" ? "not_json" : stored.success === "inserted" ? "accepted" : "duplicate"
  yield* count(name, result)
  const elapsedNanos = (yield* Clock.currentTimeNanos) - startedNanos
  yield* Metrics.observe(Metrics.webhookAckSeconds, Number(elapsedNanos) / 1e9, { endpoint: name })
  return answers[result]
})

/** One delivery to a known endpoint, once its body may be read: verified, then stored. */
const accept = Effect.fnUntraced(function* (
  intake: Intake,
  name: string,
  endpoint: Endpoint,
  request: HttpServerRequest.HttpServerRequest
) {
  const startedNanos = yield* Clock.currentTimeNanos
  const delivery = yield* Effect.result(verify(endpoint, request, intake.maxBytes))
  if (Result.isFailure(delivery)) return yield* refuse(intake, name, delivery.failure)
  return yield* store(intake.writer, name, inboxRow(name, endpoint, delivery.success), startedNanos)
})

// ---------------------------------------------------------------------------------------------
// The HTTP side: endpoint, declared length, bytes in flight
// ---------------------------------------------------------------------------------------------

/**
 * One delivery. It goes through, in order, and stops at the first failure:
 *   1. the endpoint must exist: 404;
 *   2. a declared Content-Length over `webhooks.max_body_bytes`: 413 before reading anything;
 *   3. the `hook-*` / `webhook-*` / `svix-*` headers must be present and well formed: 400;
 *   4. the timestamp must be within `webhooks.tolerance` of now: 401;
 *   5. the body is read as raw bytes, counting them as they stream in: 413 past the limit,
 *      whatever Content-Length claimed; this happens before any HMAC is computed;
 *   6. the signature over those exact bytes must match one of the endpoint's secrets: 401.
 * Then it is stored (`store`). A span per delivery (exported with OTEL_EXPORTER_OTLP_ENDPOINT, see
 * observability/Telemetry.ts).
 */
const handle = (intake: Intake) =>
  Effect.fn("WebhookIntake.deliver")(function* (name: string, request: HttpServerRequest.HttpServerRequest) {
    const endpoint = intake.endpoints.get(name)
    if (endpoint === undefined) {
      return yield* refuse(intake, "unknown", rejected("unknown_endpoint", `no webhook endpoint named ${name}`))
    }
    const { maxBytes } = intake
    const declared = request.headers["content-length"]
    if (declared !== undefined && Number(declared) > maxBytes) {
      return yield* refuse(intake, name, rejected("body_too_large", `the body exceeds ${maxBytes} bytes`))
    }
    const reserved = declared !== undefined && Number.isFinite(Number(declared)) ? Number(declared) : maxBytes
    if (intake.inflightBytes + reserved > intake.maxInflight) {
      yield* count(name, "busy")
      return busy
    }
    intake.inflightBytes += reserved
    return yield* accept(intake, name, endpoint, request).pipe(
      Effect.ensuring(Effect.sync(() => (intake.inflightBytes -= reserved)))
    )
  })

export class WebhookIntake extends Context.Service<
  WebhookIntake,
  {
    /** Handles one delivery to the named endpoint; never fails (every outcome is a response). */
    readonly handle: (
      endpoint: string,
      request: HttpServerRequest.HttpServerRequest
    ) => Effect.Effect<HttpServerResponse.HttpServerResponse>
    /** The configured endpoint names. */
    readonly endpoints: ReadonlyArray<string>
  }
>()("crm-sync/webhooks/WebhookIntake") {
  static readonly layer = Layer.effect(
    WebhookIntake,
    Effect.gen(function* () {
      const config = yield* AppConfig
      const writer = yield* InboxWriter
      const endpoints = new Map<string, Endpoint>()
      for (const endpoint of config.webhooks.endpoints) {
        endpoints.set(endpoint.name, yield* makeEndpoint(endpoint, config.webhooks.tolerance))
      }
      const intake: Intake = {
        endpoints,
        writer,
        refusals: yield* WebhookRefusals,
        maxBytes: config.webhooks.max_body_bytes,
        maxInflight: config.webhooks.max_inflight_bytes,
        inflightBytes: 0
      }
      return WebhookIntake.of({ handle: handle(intake), endpoints: [...endpoints.keys()] })
    })
  ).pipe(Layer.provideMerge(WebhookRefusals.layer))

  /**
   * Registers `POST /webhooks/<name>` for every configured endpoint, and `POST /webhooks/:name`
   * for the rest (404, counted). `main.ts` serves these with the health routes on `webhook_port`.
   */
  static readonly routes = HttpRouter.use(
    Effect.fnUntraced(function* (router) {
      const intake = yield* WebhookIntake
      for (const name of intake.endpoints) {
        yield* router.add("POST", endpointPath(name), (request) => intake.handle(name, request))
      }
      yield* router.add("POST", "/webhooks/:name", (request) =>
        Effect.flatMap(HttpRouter.params, (params) => intake.handle(params.name ?? "", request))
      )
    })
  )
}

const makeEndpoint = (endpoint: WebhookEndpoint, tolerance: Parameters<typeof makeSignatureVerifier>[1]) =>
  Effect.try({
    try: (): Endpoint => ({
      name: endpoint.name,
      eventType: endpoint.event_type ?? null,
      verifier: makeSignatureVerifier(endpoint.secrets, tolerance)
    }),
    catch: () =>
      new WebhookConfigError({
        endpoint: endpoint.name,
        message: `webhooks.endpoints.${endpoint.name}: a signing secret is not a valid whsec_<base64> key`
      })
  })
