/**
 * The request pipeline, as one `HttpServerRequest` handler. For `/v1` and `/oauth` it runs, in
 * order: fault decisions (latency, reset before, injected statuses and 429 storms), then for
 * `/v1` authentication (spec §5), the three rate buckets (§8), page drift, idempotency (§4 rule
 * 6) and the route handler (§4), then the after-faults (reset after commit, truncated or
 * non-JSON bodies), and finally one request-log entry. `/_sandbox` goes to the admin routes,
 * untouched by faults, limits and the log.
 */
import { NodeHttpServerRequest } from "@effect/platform-node"
import { Duration, Effect, Option, Predicate } from "effect"
import { FindMyWay, HttpServerRequest, HttpServerResponse } from "effect/http"
import { SandboxActions } from "./Actions.ts"
import { type AdminRoute, makeAdminRoutes } from "./AdminRoutes.ts"
import { type ApiRoute, makeApiRoutes } from "./Api.ts"
import { type Credential, SandboxAuth } from "./Auth.ts"
import { ApiError, methodNotAllowed, notFound, rateLimited, unauthorized } from "./errors.ts"
import { type HttpFault, SandboxFaults } from "./Faults.ts"
import { type ApiResponse, canonicalJson, fromError, isJsonContentType, parseJsonOption } from "./Http.ts"
import { SandboxIdempotency } from "./Idempotency.ts"
import { SandboxConfig } from "./Options.ts"
import { hash, hashString, Rng } from "./Prng.ts"
import { SandboxRateLimiter } from "./RateLimiter.ts"
import { SandboxRequestLog } from "./RequestLog.ts"
import { iso, SandboxClock } from "./SandboxClock.ts"
import { accessibleBooks, SandboxStore } from "./Store.ts"

const HAS_BODY = new Set(["POST", "PUT", "PATCH", "DELETE"])

/** An answer that is not `ApiResponse` data: the socket is gone. */
const RESET = Symbol("reset")

const toHttp = (response: ApiResponse, extraHeaders: Record<string, string> = {}) => {
  const headers = { ...response.headers, ...extraHeaders }
  return response.body === undefined
    ? HttpServerResponse.empty({ status: response.status, headers })
    : HttpServerResponse.text(JSON.stringify(response.body), {
        status: response.status,
        headers,
        contentType: "application/json"
      })
}

/** Destroys the client connection with a TCP reset (spec-less, but what a flaky network does). */
const resetConnection = (request: HttpServerRequest.HttpServerRequest) =>
  Effect.sync(() => {
    const socket = NodeHttpServerRequest.toIncomingMessage(request).socket
    if ("resetAndDestroy" in socket && typeof socket.resetAndDestroy === "function") socket.resetAndDestroy()
    else socket.destroy()
  })

const redactHeaders = (headers: Readonly<Record<string, string | undefined>>) => {
  const out: Record<string, string> = {}
  for (const [key, value] of Object.entries(headers)) {
    if (value === undefined) continue
    out[key] =
      key === "authorization"
        ? value.replace(/^(Bearer\s+)(\S{0,12})\S*?(\S{4})$/i, (_, scheme, head, tail) => `${scheme}${head}…${tail}`)
        : value
  }
  return out
}

const oauthBody = (error: ApiError): ApiResponse => ({
  status: error.status,
  body: { error: error.error, error_description: error.detail },
  headers: { "cache-control": "no-store" }
})

type Headers = Readonly<Record<string, string | undefined>>

/** What the pipeline learns about a request on the way, for its log entry. */
interface Trace {
  credential: Credential | undefined
  rateLimited: string | null
  replayed: boolean
  readonly faults: Array<string>
}

const DRIFT_ACTIONS = ["insert", "update", "delete"] as const

const injected = (status: number): ApiResponse => ({
  status,
  body: { error: status >= 500 ? "server_error" : "injected_error", detail: `injected fault: HTTP ${status}` }
})

/** The body as idempotency compares it: key-sorted JSON when it is JSON, the raw text otherwise. */
const fingerprint = (headers: Headers, body: string): string => {
  if (!isJsonContentType(headers["content-type"])) return `raw:${body}`
  const parsed = parseJsonOption(body)
  return Option.isSome(parsed) ? `json:${canonicalJson(parsed.value)}` : `raw:${body}`
}

/** `POST /oauth/token` accepts form-encoded and JSON bodies (RFC 6749 uses the former). */
const tokenFields = (headers: Headers, body: string) => {
  if (!isJsonContentType(headers["content-type"])) {
    return Effect.succeed(Object.fromEntries(new URLSearchParams(body)) as Record<string, string>)
  }
  return Effect.try({
    try: () => JSON.parse(body) as unknown,
    catch: () => new ApiError({ status: 400, error: "invalid_request", detail: "the request body is not valid JSON" })
  }).pipe(
    Effect.map((parsed) =>
      Predicate.isObject(parsed)
        ? Object.fromEntries(
            Object.entries(parsed).filter((entry): entry is [string, string] => Predicate.isString(entry[1]))
          )
        : {}
    )
  )
}

/** RFC 6749 §2.3.1: client credentials in HTTP Basic, form-url-encoded. */
const basicCredentials = (headers: Headers) => {
  const match = /^Basic\s+(\S+)$/i.exec(headers.authorization ?? "")
  if (match === null) return undefined
  const decoded = Buffer.from(match[1]!, "base64").toString("utf8")
  const separator = decoded.indexOf(":")
  if (separator < 0) return undefined
  return {
    clientId: decodeURIComponent(decoded.slice(0, separator)),
    secret: decodeURIComponent(decoded.slice(separator + 1))
  }
}

const methodNotFound = <A>(router: FindMyWay.Router<A>, method: string, path: string) =>
  ["GET", "POST", "PUT", "PATCH", "DELETE"].some((other) => other !== method && router.find(other, path) !== undefined)
    ? methodNotAllowed(`${method} is not supported on ${path}`)
    : notFound(`no endpoint ${method} ${path}`)

/** What a request goes through: the sandbox's services and the two routers. */
interface Pipeline {
  readonly options: SandboxConfig["Service"]
  readonly clock: SandboxClock["Service"]
  readonly store: SandboxStore["Service"]
  readonly auth: SandboxAuth["Service"]
  readonly limiter: SandboxRateLimiter["Service"]
  readonly idempotency: SandboxIdempotency["Service"]
  readonly faults: SandboxFaults["Service"]
  readonly requestLog: SandboxRequestLog["Service"]
  readonly actions: SandboxActions["Service"]
  readonly api: FindMyWay.Router<ApiRoute>
  readonly admin: FindMyWay.Router<AdminRoute>
}

/** One request as the pipeline reads it; the body is read once, up front. */
interface Incoming {
  readonly request: HttpServerRequest.HttpServerRequest
  readonly url: URL
  readonly method: string
  readonly path: string
  readonly headers: Headers
  readonly body: string
}

// ---------------------------------------------------------------------------------------------
// Fault injection

/** The first fired fault of `kind`; with `when`, only one applied then (rules default to before). */
const firstFault = <K extends HttpFault["kind"]>(fired: ReadonlyArray<HttpFault>, kind: K, when?: "before" | "after") =>
  fired.find(
    (fault): fault is Extract<HttpFault, { readonly kind: K }> =>
      fault.kind === kind && (when === undefined || ("when" in fault ? (fault.when ?? "before") : "before") === when)
  )

/** Latency faults outside the handler (`before` it, or `after` it has answered), one after the other. */
const sleepLatency = Effect.fnUntraced(function* (
  fired: ReadonlyArray<HttpFault>,
  trace: Trace,
  when: "before" | "after"
) {
  for (const fault of fired) {
    if (fault.kind !== "latency" || (fault.when ?? "before") !== when) continue
    trace.faults.push(when === "after" ? `latency_after:${fault.ms}` : `latency:${fault.ms}`)
    yield* Effect.sleep(Duration.millis(fault.ms))
  }
})

/** The answer before-faults give instead of the handler's: a reset, an injected status, a 429 storm. */
const faultBefore = Effect.fnUntraced(function* (
  request: HttpServerRequest.HttpServerRequest,
  fired: ReadonlyArray<HttpFault>,
  trace: Trace
) {
  if (firstFault(fired, "reset", "before") !== undefined) {
    trace.faults.push("reset:before")
    yield* resetConnection(request)
    return RESET
  }
  const statusBefore = firstFault(fired, "status", "before")
  if (statusBefore !== undefined) {
    trace.faults.push(`status:${statusBefore.status ?? 500}`)
    return injected(statusBefore.status ?? 500)
  }
  const storm = firstFault(fired, "rate_limit")
  if (storm === undefined) return undefined
  const limit = storm.limit ?? "token"
  const retryAfter = storm.retry_after ?? 30
  trace.faults.push(`rate_limit:${limit}:${retryAfter}`)
  trace.rateLimited = limit
  return fromError(rateLimited(limit, retryAfter, `${limit} rate limit exceeded; retry after ${retryAfter} s`))
})

/**
 * Faults inside the handler: latency before it runs, and an injected status after it (the write
 * has committed, the answer is an error all the same: 5xx is not cached, §4 rule 6).
 */
const faultInside = (
  fired: ReadonlyArray<HttpFault>,
  trace: Trace,
  handler: Effect.Effect<ApiResponse>
): Effect.Effect<ApiResponse> => {
  const statusAfter = fired.find((fault) => fault.kind === "status" && fault.when === "after")
  const inside = fired.find((fault) => fault.kind === "latency" && fault.when === "inside")
  const slow = inside?.kind === "latency" ? Effect.sleep(Duration.millis(inside.ms)) : Effect.void
  if (inside?.kind === "latency") trace.faults.push(`latency_inside:${inside.ms}`)
  return Effect.andThen(slow, handler).pipe(
    Effect.map((response) => {
      if (statusAfter?.kind !== "status") return response
      trace.faults.push(`status_after:${statusAfter.status ?? 500}`)
      return injected(statusAfter.status ?? 500)
    })
  )
}

/** Page drift: each fired `page_drift` rule mutates the listed collection before the page is read. */
const driftPages = Effect.fnUntraced(function* (
  pipeline: Pipeline,
  route: ApiRoute,
  fired: ReadonlyArray<HttpFault>,
  credential: Credential,
  query: URLSearchParams,
  trace: Trace
) {
  if (route.drift === undefined) return
  const world = yield* pipeline.store.world
  const books = accessibleBooks(world, credential.userId, credential.company).map((book) => book.ordinal)
  const page = Number(query.get("page") ?? "1")
  const perPage = Math.min(100, Math.max(1, Number(query.get("per_page") ?? "25") || 25))
  const offset = Number.isInteger(page) && page > 1 ? (page - 1) * perPage : 0
  for (const fault of fired) {
    if (fault.kind !== "page_drift") continue
    // drawn from (seed, rule, firing): the same rule drifts the same way in every seeded run
    const rng = new Rng(hash(pipeline.options.seed, hashString(fault.id), fault.fired))
    for (let i = 0; i < (fault.count ?? 1); i++) {
      const action = fault.action === undefined || fault.action === "mixed" ? rng.pick(DRIFT_ACTIONS) : fault.action
      const change = yield* pipeline.actions.drift(route.drift, action, books, offset, rng)
      if (change !== undefined) trace.faults.push(`page_drift:${change.action}:${change.id}`)
    }
  }
})

/** The response to write: the handler's, or what a reset, a non-JSON or a truncate fault makes of it. */
const render = (
  outcome: ApiResponse | typeof RESET,
  fired: ReadonlyArray<HttpFault>,
  trace: Trace,
  requestId: string
): { readonly status: number | null; readonly response: HttpServerResponse.HttpServerResponse } => {
  // never written: the socket is gone
  if (outcome === RESET) return { status: null, response: HttpServerResponse.empty({ status: 500 }) }
  const nonJson = firstFault(fired, "non_json")
  if (nonJson !== undefined) {
    const status = nonJson.status ?? 502
    trace.faults.push("non_json")
    const html = `<html><head><title>${status} Bad Gateway</title></head><body><h1>${status} Bad Gateway</h1></body></html>`
    return { status, response: HttpServerResponse.html(html).pipe(HttpServerResponse.setStatus(status)) }
  }
  const extraHeaders: Record<string, string> = { "x-request-id": requestId }
  if (trace.replayed) extraHeaders["idempotent-replayed"] = "true"
  if (firstFault(fired, "truncate") === undefined || outcome.body === undefined) {
    return { status: outcome.status, response: toHttp(outcome, extraHeaders) }
  }
  trace.faults.push("truncate")
  const text = JSON.stringify(outcome.body)
  const response = HttpServerResponse.text(text.slice(0, Math.floor(text.length / 2)), {
    status: outcome.status,
    headers: { ...outcome.headers, ...extraHeaders },
    contentType: "application/json"
  })
  return { status: outcome.status, response }
}

// ---------------------------------------------------------------------------------------------
// Request handling

const clientIp = (options: SandboxConfig["Service"], request: HttpServerRequest.HttpServerRequest) => {
  const override = options.clientIpHeader === undefined ? undefined : request.headers[options.clientIpHeader]
  if (override !== undefined && override.trim() !== "") return override.split(",")[0]!.trim()
  const remote = request.remoteAddress
  return Option.isSome(remote) ? remote.value.replace(/^::ffff:/, "") : "unknown"
}

const oauth = (auth: SandboxAuth["Service"], incoming: Incoming) =>
  Effect.gen(function* () {
    const { method, path, headers, body } = incoming
    if (method === "GET" && path === "/oauth/authorize") {
      const location = yield* auth.authorize(incoming.url.searchParams)
      return { status: 302, body: undefined, headers: { location } } satisfies ApiResponse
    }
    if (method === "POST" && path === "/oauth/token") {
      const token = yield* auth.token(yield* tokenFields(headers, body), basicCredentials(headers))
      return { status: 200, body: token, headers: { "cache-control": "no-store" } } satisfies ApiResponse
    }
    return yield* notFound(`no endpoint ${method} ${path}`)
  }).pipe(Effect.catch((error: ApiError) => Effect.succeed(oauthBody(error))))

/** The route's answer, errors included: a sandbox bug answers like a server error (never cached) instead of an empty 500. */
const handle = (route: ApiRoute, request: Parameters<ApiRoute["handle"]>[0]): Effect.Effect<ApiResponse> =>
  route.handle(request).pipe(
    Effect.catch((error: ApiError) => Effect.succeed(fromError(error))),
    Effect.catchDefect((defect) =>
      Effect.as(Effect.logError("sandbox handler failed", defect), {
        status: 500,
        body: { error: "server_error", detail: `sandbox bug: ${String(defect)}` }
      } satisfies ApiResponse)
    )
  )

/** The `/v1` part of the pipeline: authenticate, count, route, drift, idempotency, handle. */
const v1 = (pipeline: Pipeline, incoming: Incoming, ip: string, fired: ReadonlyArray<HttpFault>, trace: Trace) =>
  Effect.gen(function* () {
    const { method, path, headers, body } = incoming
    const query = incoming.url.searchParams
    const credential = yield* (
      pipeline.auth
        .authenticate(headers.authorization)
        // an unauthenticated request still counts against its address (and may be refused by it)
        .pipe(Effect.tapError(() => pipeline.limiter.admit(undefined, ip)))
    )
    trace.credential = credential
    yield* pipeline.limiter.admit(credential, ip)
    const match = pipeline.api.find(method, path)
    if (match === undefined) return yield* methodNotFound(pipeline.api, method, path)
    const route = match.handler
    yield* driftPages(pipeline, route, fired, credential, query, trace)
    const request = { method, path, params: match.params, query, headers, credential, body }
    const handler = faultInside(fired, trace, handle(route, request))
    const key = headers["idempotency-key"]
    if ((method !== "POST" && method !== "PATCH") || key === undefined || key === "") return yield* handler
    const outcome = yield* pipeline.idempotency.run(
      { scope: `${credential.company}:${credential.userId}`, path, key, fingerprint: fingerprint(headers, body) },
      handler
    )
    trace.replayed = outcome.replayed
    return outcome.response
  }).pipe(
    Effect.catch((error: ApiError) => {
      if (error.status === 429) trace.rateLimited = String(error.extra?.limit ?? "")
      return Effect.succeed(fromError(error))
    })
  )

/** `/oauth` or `/v1`, unless a before-fault answers first; a reset after commit drops the answer. */
const answer = (pipeline: Pipeline, incoming: Incoming, ip: string, fired: ReadonlyArray<HttpFault>, trace: Trace) =>
  Effect.gen(function* () {
    const early = yield* faultBefore(incoming.request, fired, trace)
    if (early !== undefined) return early
    const response = incoming.path.startsWith("/oauth/")
      ? yield* oauth(pipeline.auth, incoming)
      : yield* v1(pipeline, incoming, ip, fired, trace)
    if (firstFault(fired, "reset", "after") !== undefined) {
      trace.faults.push("reset:after")
      yield* resetConnection(incoming.request)
      return RESET
    }
    return response
  })

/** The listings whose served records option `recordServed` logs (the history's resources), by route. */
const SERVED_ROUTES: Readonly<Record<string, string>> = {
  "/v1/businesses": "businesses",
  "/v1/annuity_contracts": "annuity_contracts",
  "/v1/financial_accounts": "financial_accounts"
}

/** The records a 2xx listing handed over whole (no reset, truncation or non-JSON body), when logged. */
const servedRecords = (
  pipeline: Pipeline,
  route: string | null,
  outcome: ApiResponse | typeof RESET,
  status: number | null,
  trace: Trace
) => {
  const resource = route === null ? undefined : SERVED_ROUTES[route]
  if (!pipeline.options.recordServed || resource === undefined || outcome === RESET) return null
  if (
    status === null ||
    status < 200 ||
    status >= 300 ||
    trace.faults.some((f) => f === "truncate" || f === "non_json")
  )
    return null
  const data = Predicate.isObject(outcome.body) ? (outcome.body as { readonly data?: unknown }).data : undefined
  if (!Array.isArray(data)) return null
  const records = data.flatMap((record: unknown) =>
    Predicate.isObject(record) && typeof record.id === "string"
      ? [[record.id, pipeline.requestLog.contentOf(record)] as const]
      : []
  )
  return { resource, records }
}

/** The request-log entry of a finished request. */
const logRequest = Effect.fnUntraced(function* (
  pipeline: Pipeline,
  incoming: Incoming,
  served: {
    readonly at: string
    readonly startedMs: number
    readonly ip: string
    readonly status: number | null
    readonly outcome: ApiResponse | typeof RESET
    readonly requestId: string
  },
  trace: Trace
) {
  const { method, path, headers, body } = incoming
  const world = yield* pipeline.store.world
  const credential = trace.credential
  const route = path.startsWith("/oauth/") ? path : (pipeline.api.find(method, path)?.handler.path ?? null)
  yield* pipeline.requestLog.append({
    at: served.at,
    method,
    path,
    route,
    query: Object.fromEntries(incoming.url.searchParams),
    headers: redactHeaders(headers),
    idempotency_key: headers["idempotency-key"] ?? null,
    body: body === "" ? null : body.slice(0, 10_000),
    ip: served.ip,
    status: served.status,
    duration_ms: (yield* pipeline.clock.wallNow) - served.startedMs,
    credential:
      credential === undefined
        ? null
        : {
            kind: credential.kind,
            user_id: credential.userId,
            company_id: world.companies[credential.company]!.id,
            client_id: credential.kind === "oauth" ? credential.clientId : null
          },
    faults: trace.faults,
    rate_limited: trace.rateLimited,
    idempotent_replay: trace.replayed,
    request_id: served.outcome === RESET || trace.faults.includes("non_json") ? null : served.requestId,
    served: servedRecords(pipeline, route, served.outcome, served.status, trace)
  })
})

/** `/v1` and `/oauth`: latency, the answer (or a fault's), the response to write, the log entry. */
const serve = (pipeline: Pipeline, incoming: Incoming, requestId: string) =>
  Effect.gen(function* () {
    const startedMs = yield* pipeline.clock.wallNow
    const at = iso(yield* pipeline.clock.now)
    const ip = clientIp(pipeline.options, incoming.request)
    const fired = yield* pipeline.faults.forRequest(incoming.method, incoming.path)
    const trace: Trace = { credential: undefined, rateLimited: null, replayed: false, faults: [] }
    yield* sleepLatency(fired, trace, "before")
    const outcome = yield* answer(pipeline, incoming, ip, fired, trace)
    yield* sleepLatency(fired, trace, "after")
    const { status, response } = render(outcome, fired, trace, requestId)
    yield* logRequest(pipeline, incoming, { at, startedMs, ip, status, outcome, requestId }, trace)
    // The `Date` header is the CRM machine's clock (`clockSkew` included), not Node's, so a
    // receiver can measure the skew from an answer as it would against the real CRM.
    return HttpServerResponse.setHeader(response, "date", new Date(yield* pipeline.clock.wallNow).toUTCString())
  })

// ---------------------------------------------------------------------------------------------
// Routing

const adminApp = (pipeline: Pipeline, incoming: Incoming) =>
  Effect.gen(function* () {
    const { options, admin } = pipeline
    const { method, url, body } = incoming
    if (options.adminToken !== undefined && incoming.headers.authorization !== `Bearer ${options.adminToken}`) {
      return toHttp(fromError(unauthorized("the admin API needs Authorization: Bearer <adminToken>")))
    }
    const match = admin.find(method, url.pathname)
    const response =
      match === undefined
        ? fromError(methodNotFound(admin, method, url.pathname))
        : yield* match.handler
            .handle({ params: match.params, query: url.searchParams, body })
            .pipe(Effect.catch((error: ApiError) => Effect.succeed(fromError(error))))
    return toHttp(response)
  })

/**
 * Routing uses `FindMyWay` directly rather than `HttpRouter`/`HttpApi`: the emulated API's
 * behaviour (bodies ignored without a JSON Content-Type, `{error, detail}` bodies for every
 * failure including unknown routes, requests counted before routing, resets that destroy the
 * socket) needs the whole pipeline in hand, and the handlers return plain data so the
 * idempotency cache and the body faults can work on it.
 */
const makePipeline = Effect.gen(function* () {
  const api = FindMyWay.make<ApiRoute>({ ignoreTrailingSlash: true })
  for (const route of yield* makeApiRoutes) api.on(route.method, route.path, route)
  const admin = FindMyWay.make<AdminRoute>({ ignoreTrailingSlash: true })
  for (const route of yield* makeAdminRoutes) admin.on(route.method, route.path, route)
  return {
    options: yield* SandboxConfig,
    clock: yield* SandboxClock,
    store: yield* SandboxStore,
    auth: yield* SandboxAuth,
    limiter: yield* SandboxRateLimiter,
    idempotency: yield* SandboxIdempotency,
    faults: yield* SandboxFaults,
    requestLog: yield* SandboxRequestLog,
    actions: yield* SandboxActions,
    api,
    admin
  } satisfies Pipeline
})

export const makeHttpApp = Effect.gen(function* () {
  const pipeline = yield* makePipeline
  let requestCounter = 0
  return Effect.gen(function* () {
    const request = yield* HttpServerRequest.HttpServerRequest
    const url = new URL(request.url, "http://sandbox.invalid")
    const method = request.method.toUpperCase()
    const path = url.pathname
    const body = HAS_BODY.has(method) ? yield* Effect.orElseSucceed(request.text, () => "") : ""
    const incoming: Incoming = { request, url, method, path, headers: request.headers as Headers, body }
    if (path === "/_sandbox" || path.startsWith("/_sandbox/")) return yield* adminApp(pipeline, incoming)
    const requestId = `req_${(++requestCounter).toString(36).padStart(6, "0")}`
    // a reset closes the socket, which makes the server interrupt this fiber: finish and log first
    return yield* Effect.uninterruptible(serve(pipeline, incoming, requestId))
  })
})
