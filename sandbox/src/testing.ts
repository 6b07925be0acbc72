/**
 * Test helpers for any suite that runs against the sandbox: a raw HTTP call that shows exactly
 * what came back (status, headers, text, parsed JSON), assertions on the request log and the
 * webhook delivery log, a webhook receiver to register as a partner endpoint, signature
 * verification with `standardwebhooks`, and the full OAuth authorization-code + PKCE round trip.
 * Every helper takes the sandbox (or its admin handle) explicitly; none needs a test framework.
 * The waiting helpers poll in real time: run them under `it.live` (or `layer(..., {
 * excludeTestServices: true })`), not under a `TestClock`.
 */
import { NodeHttpServer } from "@effect/platform-node"
import { Clock, Duration, Effect, type Layer, Option, Schema, type Scope } from "effect"
import { FetchHttpClient, HttpClient, HttpClientRequest, HttpServerRequest, HttpServerResponse } from "effect/http"
import { createHash, randomBytes } from "node:crypto"
import { createServer } from "node:http"
import { Webhook } from "standardwebhooks"
import type { SandboxAdmin, TokenInfo } from "./Admin.ts"
import { type TokenResponse, USER_TOKEN_LABEL } from "./Auth.ts"
import { parseJsonOption } from "./Http.ts"
import type { WebhookHeaderPrefix } from "./Options.ts"
import { matchesFilter, type RequestFilter, type RequestLogEntry } from "./RequestLog.ts"
import type { DeliveryFilter, DeliveryRecord, MessageRecord } from "./Webhooks.ts"

type Admin = SandboxAdmin["Service"]

/** A failed expectation about the sandbox's logs or answers. */
export class SandboxExpectationError extends Schema.TaggedError<SandboxExpectationError>()("SandboxExpectationError", {
  message: Schema.String
}) {}

// ---------------------------------------------------------------------------------------------
// HTTP

export interface CallOptions {
  readonly method?: "GET" | "POST" | "PUT" | "PATCH" | "DELETE"
  /** Sent as `Authorization: Bearer <token>`. */
  readonly token?: string | undefined
  readonly headers?: Readonly<Record<string, string>>
  /** Sent as JSON with `Content-Type: application/json`. */
  readonly json?: unknown
  /** Sent as is (set the Content-Type yourself). */
  readonly body?: string
  /** Do not follow redirects (the OAuth authorize step). */
  readonly manualRedirect?: boolean
}

export interface CallResult {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  readonly text: string
  /** The body parsed as JSON, or undefined when it is not JSON. */
  readonly json: any
}

const parseJson = (text: string): unknown => Option.getOrUndefined(parseJsonOption(text))

/** One HTTP request to `baseUrl + path`, answered whatever its status. Needs an `HttpClient`. */
export const call = Effect.fn("sandbox.testing.call")(function* (
  baseUrl: string,
  path: string,
  options: CallOptions = {}
) {
  const client = yield* HttpClient.HttpClient
  let request = HttpClientRequest.make(options.method ?? "GET")(new URL(path, baseUrl).toString())
  if (options.token !== undefined) request = HttpClientRequest.bearerToken(request, options.token)
  if (options.json !== undefined)
    request = HttpClientRequest.bodyText(request, JSON.stringify(options.json), "application/json")
  if (options.body !== undefined)
    request = HttpClientRequest.bodyText(request, options.body, options.headers?.["content-type"] ?? "text/plain")
  if (options.headers !== undefined) request = HttpClientRequest.setHeaders(request, options.headers)
  const execute = client.execute(request)
  const response = yield* options.manualRedirect === true
    ? execute.pipe(Effect.provideService(FetchHttpClient.RequestInit, { redirect: "manual" }))
    : execute
  const text = yield* response.text
  const result: CallResult = { status: response.status, headers: response.headers, text, json: parseJson(text) }
  return result
})

/** The HTTP client the helpers expect, for tests that do not provide one. */
export const httpClientLayer: Layer.Layer<HttpClient.HttpClient> = FetchHttpClient.layer

// ---------------------------------------------------------------------------------------------
// Users' tokens

/**
 * The seeded personal tokens of option `userTokens`, one per user and company, in user order
 * (the first user, a member of two companies, has two): `{ id, token, user_id, company_id, … }`.
 */
export const userTokens = (admin: Admin): Effect.Effect<ReadonlyArray<TokenInfo>> =>
  Effect.map(admin.tokens, (tokens) => tokens.filter((token) => token.label === USER_TOKEN_LABEL && !token.revoked))

/** An OAuth user's connection made by `connectUsers`: who, which company, its token pair. */
export interface UserConnection {
  readonly user_id: string
  readonly company_id: string
  readonly tokens: TokenResponse
}

/**
 * OAuth users: a token pair of app `clientId` for every user and company the filter keeps (all by
 * default), in user order, without the browser step (`admin.connect`; an app in `sandbox` mode
 * reaches only its owner's company: register it with `mode: "production"` to play many firms).
 */
export const connectUsers = Effect.fn("sandbox.testing.connectUsers")(function* (
  admin: Admin,
  clientId: string,
  keep: (user: { readonly user_id: string; readonly company_id: string }) => boolean = () => true
) {
  const state = yield* admin.state
  const pairs = state.users
    .filter((user) => user.active)
    .flatMap((user) => user.company_ids.map((company) => ({ user_id: user.id, company_id: company })))
    .filter(keep)
  return yield* Effect.forEach(pairs, (pair) =>
    Effect.map(
      admin.connect({ clientId, userId: pair.user_id, companyId: pair.company_id }),
      (tokens): UserConnection => ({ ...pair, tokens })
    )
  )
})

// ---------------------------------------------------------------------------------------------
// Request log

/** Requests matching the filter; fails unless there are exactly `count` of them (when given). */
export const expectRequests = Effect.fn("sandbox.testing.expectRequests")(function* (
  admin: Admin,
  filter: RequestFilter,
  count?: number
) {
  const entries = yield* admin.requests(filter)
  if (count !== undefined && entries.length !== count) {
    return yield* new SandboxExpectationError({
      message: `expected ${count} request(s) matching ${JSON.stringify(filter)}, found ${entries.length}: ${entries
        .map((entry) => `${entry.method} ${entry.path} -> ${entry.status}`)
        .join(", ")}`
    })
  }
  return entries
})

export const countRequests = (admin: Admin, filter: RequestFilter) =>
  Effect.map(admin.requests(filter), (entries) => entries.length)

/** Requests per path (or per route pattern with `by: "route"`), e.g. `{ "/v1/businesses": 12 }`. */
export const requestsByPath = (admin: Admin, filter: RequestFilter = {}, by: "path" | "route" = "path") =>
  Effect.map(admin.requests(filter), (entries) => {
    const counts: Record<string, number> = {}
    for (const entry of entries) {
      const key = (by === "route" ? entry.route : entry.path) ?? entry.path
      counts[key] = (counts[key] ?? 0) + 1
    }
    return counts
  })

/** Filters entries already read, with the log's own filter semantics. */
export const filterRequests = (entries: ReadonlyArray<RequestLogEntry>, filter: RequestFilter) =>
  entries.filter((entry) => matchesFilter(entry, filter))

// ---------------------------------------------------------------------------------------------
// Deliveries

const poll = <A>(
  read: Effect.Effect<ReadonlyArray<A>>,
  done: (items: ReadonlyArray<A>) => boolean,
  timeout: Duration.Input,
  describe: (items: ReadonlyArray<A>) => string
) =>
  Effect.gen(function* () {
    const deadline = (yield* Clock.currentTimeMillis) + Duration.toMillis(Duration.fromInputUnsafe(timeout))
    while (true) {
      const items = yield* read
      if (done(items)) return items
      if ((yield* Clock.currentTimeMillis) > deadline)
        return yield* new SandboxExpectationError({ message: describe(items) })
      yield* Effect.sleep(Duration.millis(15))
    }
  })

export interface AwaitDeliveriesOptions extends DeliveryFilter {
  /** How many matching attempts to wait for (default 1). */
  readonly count?: number
  /** Count only attempts that got a 2xx (default false: every attempt counts). */
  readonly deliveredOnly?: boolean
  readonly timeout?: Duration.Input
}

/** Waits (real time) until the delivery log holds `count` matching attempts; returns them all. */
export const awaitDeliveries = (admin: Admin, options: AwaitDeliveriesOptions = {}) => {
  const wanted = options.count ?? 1
  const read = Effect.map(admin.deliveries(options), (items) =>
    options.deliveredOnly === true ? items.filter((item) => item.outcome === "delivered") : items
  )
  return poll<DeliveryRecord>(
    read,
    (items) => items.length >= wanted,
    options.timeout ?? "5 seconds",
    (items) => `expected ${wanted} delivery attempt(s) matching ${JSON.stringify(options)}, saw ${items.length}`
  )
}

/** Waits until `count` messages matching the filter were submitted. */
export const awaitMessages = (
  admin: Admin,
  options: DeliveryFilter & { readonly count?: number; readonly timeout?: Duration.Input } = {}
) =>
  poll<MessageRecord>(
    admin.messages(options),
    (items) => items.length >= (options.count ?? 1),
    options.timeout ?? "5 seconds",
    (items) => `expected ${options.count ?? 1} message(s) matching ${JSON.stringify(options)}, saw ${items.length}`
  )

// ---------------------------------------------------------------------------------------------
// Webhook receiver

export interface ReceivedWebhook {
  readonly headers: Readonly<Record<string, string>>
  /** The raw body, exactly as received (verify signatures on this, never on re-serialized JSON). */
  readonly body: string
  readonly path: string
}

export interface WebhookReceiver {
  /** Base URL of the receiver; any path is accepted. */
  readonly url: string
  readonly received: Effect.Effect<ReadonlyArray<ReceivedWebhook>>
  /** Decides the status of the n-th (0-based) delivery received; default always 204. */
  setResponder(respond: (n: number, webhook: ReceivedWebhook) => number): Effect.Effect<void>
  /** Waits until at least `count` deliveries arrived. */
  awaitReceived(
    count: number,
    timeout?: Duration.Input
  ): Effect.Effect<ReadonlyArray<ReceivedWebhook>, SandboxExpectationError>
}

const alwaysNoContent = () => 204

/** An HTTP server on a free port that records every POST, for use as a partner endpoint. */
export const startWebhookReceiver: Effect.Effect<WebhookReceiver, unknown, Scope.Scope> = Effect.gen(function* () {
  const received: Array<ReceivedWebhook> = []
  let respond: (n: number, webhook: ReceivedWebhook) => number = alwaysNoContent
  const http = yield* NodeHttpServer.make(createServer, { port: 0, host: "127.0.0.1" })
  yield* http.serve(
    Effect.gen(function* () {
      const request = yield* HttpServerRequest.HttpServerRequest
      const body = yield* Effect.orElseSucceed(request.text, () => "")
      const webhook: ReceivedWebhook = {
        headers: request.headers as Record<string, string>,
        body,
        path: new URL(request.url, "http://receiver").pathname
      }
      const n = received.length
      received.push(webhook)
      return HttpServerResponse.empty({ status: respond(n, webhook) })
    })
  )
  const address = http.address
  const port = "port" in address ? address.port : 0
  const receiver: WebhookReceiver = {
    url: `http://127.0.0.1:${port}`,
    received: Effect.sync(() => [...received]),
    setResponder: (f) =>
      Effect.sync(() => {
        respond = f
      }),
    awaitReceived: (count, timeout = "5 seconds") =>
      poll<ReceivedWebhook>(
        Effect.sync(() => [...received]),
        (items) => items.length >= count,
        timeout,
        (items) => `expected ${count} webhook(s) at the receiver, got ${items.length}`
      )
  }
  return receiver
})

/**
 * Verifies a delivery with the endpoint's secret as a receiver would (spec §5.7), mapping the
 * sandbox's `<prefix>-*` headers onto the library's names. Returns the parsed payload.
 */
export const verifyWebhook = (secret: string, webhook: ReceivedWebhook, prefix: WebhookHeaderPrefix = "hook") =>
  Effect.try({
    try: () =>
      new Webhook(secret).verify(webhook.body, {
        "webhook-id": webhook.headers[`${prefix}-id`] ?? "",
        "webhook-timestamp": webhook.headers[`${prefix}-timestamp`] ?? "",
        "webhook-signature": webhook.headers[`${prefix}-signature`] ?? ""
      }) as Record<string, unknown>,
    catch: (cause) => new SandboxExpectationError({ message: `signature verification failed: ${String(cause)}` })
  })

// ---------------------------------------------------------------------------------------------
// OAuth

export interface PkcePair {
  readonly verifier: string
  readonly challenge: string
}

export const pkcePair = (): PkcePair => {
  const verifier = randomBytes(32).toString("base64url")
  return { verifier, challenge: createHash("sha256").update(verifier).digest("base64url") }
}

export interface OAuthConnectOptions {
  readonly clientId: string
  readonly clientSecret: string
  readonly redirectUri: string
  readonly companyId?: string
  /** User id or email to sign in as (default: the sandbox's approver). */
  readonly loginHint?: string
  readonly scope?: string
}

/**
 * The authorization-code flow with PKCE over HTTP, as a partner app performs it: authorize
 * (auto-approved by the sandbox), check `state`, exchange the code. Needs an `HttpClient`.
 */
export const oauthConnect = Effect.fn("sandbox.testing.oauthConnect")(function* (
  baseUrl: string,
  options: OAuthConnectOptions
) {
  const pkce = pkcePair()
  const state = randomBytes(8).toString("hex")
  const query = new URLSearchParams({
    response_type: "code",
    client_id: options.clientId,
    redirect_uri: options.redirectUri,
    state,
    code_challenge: pkce.challenge,
    code_challenge_method: "S256"
  })
  if (options.companyId !== undefined) query.set("company_id", options.companyId)
  if (options.loginHint !== undefined) query.set("login_hint", options.loginHint)
  if (options.scope !== undefined) query.set("scope", options.scope)
  const authorize = yield* call(baseUrl, `/oauth/authorize?${query}`, { manualRedirect: true })
  const location = authorize.headers.location
  if (authorize.status !== 302 || location === undefined) {
    return yield* new SandboxExpectationError({ message: `authorize answered ${authorize.status}: ${authorize.text}` })
  }
  const callback = new URL(location)
  if (callback.searchParams.get("state") !== state) {
    return yield* new SandboxExpectationError({ message: "authorize returned another state" })
  }
  const code = callback.searchParams.get("code")
  if (code === null) {
    return yield* new SandboxExpectationError({
      message: `authorize refused: ${callback.searchParams.get("error")} ${callback.searchParams.get("error_description")}`
    })
  }
  const token = yield* call(baseUrl, "/oauth/token", {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "authorization_code",
      code,
      redirect_uri: options.redirectUri,
      code_verifier: pkce.verifier,
      client_id: options.clientId,
      client_secret: options.clientSecret
    }).toString()
  })
  if (token.status !== 200) {
    return yield* new SandboxExpectationError({ message: `token exchange answered ${token.status}: ${token.text}` })
  }
  return token.json as TokenResponse
})
