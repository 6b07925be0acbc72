/**
 * The request pipeline, as one `HttpServerRequest` handler. For `/v1` and `/oauth` it runs, in
 * order: fault decisions (latency, reset before, injected statuses and 429 storms), then for
 * `/v1` authentication (spec §5), the three rate buckets (§8), page drift, idempotency (§4 rule
 * 6) and the route handler (§4), then the after-faults (reset after commit, truncated or
 * non-JSON bodies), and finally one request-log entry. `/_sandbox` goes to the admin routes,
 * untouched by faults, limits and the log.
 *
 * Routing uses `FindMyWay` directly rather than `HttpRouter`/`HttpApi`: the emulated API's
 * behaviour (bodies ignored without a JSON Content-Type, `{error, detail}` bodies for every
 * failure including unknown routes, requests counted before routing, resets that destroy the
 * socket) needs the whole pipeline in hand, and the handlers return plain data so the
 * idempotency cache and the body faults can work on it.
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

export const makeHttpApp = Effect.gen(function* () {
  const options = yield* SandboxConfig
  const clock = yield* SandboxClock
  const store = yield* SandboxStore
  const auth = yield* SandboxAuth
  const limiter = yield* SandboxRateLimiter
  const idempotency = yield* SandboxIdempotency
  const faults = yield* SandboxFaults
  const requestLog = yield* SandboxRequestLog
  const actions = yield* SandboxActions

  const api = FindMyWay.make<ApiRoute>({ ignoreTrailingSlash: true })
  const apiRoutes = yield* makeApiRoutes
  for (const route of apiRoutes) api.on(route.method, route.path, route)
  const admin = FindMyWay.make<AdminRoute>({ ignoreTrailingSlash: true })
  for (const route of yield* makeAdminRoutes) admin.on(route.method, route.path, route)
  let requestCounter = 0

  const clientIp = (request: HttpServerRequest.HttpServerRequest) => {
    const override = options.clientIpHeader === undefined ? undefined : request.headers[options.clientIpHeader]
    if (override !== undefined && override.trim() !== "") return override.split(",")[0]!.trim()
    const remote = request.remoteAddress
    return Option.isSome(remote) ? remote.value.replace(/^::ffff:/, "") : "unknown"
  }

  const oauth = (method: string, path: string, query: URLSearchParams, headers: Headers, body: string) =>
    Effect.gen(function* () {
      if (method === "GET" && path === "/oauth/authorize") {
        const location = yield* auth.authorize(query)
        return { status: 302, body: undefined, headers: { location } } satisfies ApiResponse
      }
      if (method === "POST" && path === "/oauth/token") {
        const token = yield* auth.token(yield* tokenFields(headers, body), basicCredentials(headers))
        return { status: 200, body: token, headers: { "cache-control": "no-store" } } satisfies ApiResponse
      }
      return yield* notFound(`no endpoint ${method} ${path}`)
    }).pipe(Effect.catch((error: ApiError) => Effect.succeed(oauthBody(error))))

  const drift = Effect.fnUntraced(function* (
    route: ApiRoute,
    faultsFired: ReadonlyArray<HttpFault>,
    credential: Credential,
    query: URLSearchParams,
    faultLog: Array<string>
  ) {
    if (route.drift === undefined) return
    const world = yield* store.world
    const books = accessibleBooks(world, credential.userId, credential.company).map((book) => book.ordinal)
    const page = Number(query.get("page") ?? "1")
    const perPage = Math.min(100, Math.max(1, Number(query.get("per_page") ?? "25") || 25))
    const offset = Number.isInteger(page) && page > 1 ? (page - 1) * perPage : 0
    for (const fault of faultsFired) {
      if (fault.kind !== "page_drift") continue
      // drawn from (seed, rule, firing): the same rule drifts the same way in every seeded run
      const rng = new Rng(hash(options.seed, hashString(fault.id), fault.fired))
      for (let i = 0; i < (fault.count ?? 1); i++) {
        const action = fault.action === undefined || fault.action === "mixed" ? rng.pick(DRIFT_ACTIONS) : fault.action
        const change = yield* actions.drift(route.drift, action, books, offset, rng)
        if (change !== undefined) faultLog.push(`page_drift:${change.action}:${change.id}`)
      }
    }
  })

  /** The `/v1` part of the pipeline: authenticate, count, route, drift, idempotency, handle. */
  const v1 = (
    method: string,
    path: string,
    query: URLSearchParams,
    headers: Headers,
    body: string,
    ip: string,
    faultsFired: ReadonlyArray<HttpFault>,
    trace: Trace
  ) =>
    Effect.gen(function* () {
      const credential = yield* (
        auth
          .authenticate(headers.authorization)
          // an unauthenticated request still counts against its address (and may be refused by it)
          .pipe(Effect.tapError(() => limiter.admit(undefined, ip)))
      )
      trace.credential = credential
      yield* limiter.admit(credential, ip)
      const match = api.find(method, path)
      if (match === undefined) return yield* methodNotFound(api, method, path)
      const route = match.handler
      yield* drift(route, faultsFired, credential, query, trace.faults)
      const statusAfter = faultsFired.find((fault) => fault.kind === "status" && fault.when === "after")
      const inside = faultsFired.find((fault) => fault.kind === "latency" && fault.when === "inside")
      const slow = inside?.kind === "latency" ? Effect.sleep(Duration.millis(inside.ms)) : Effect.void
      if (inside?.kind === "latency") trace.faults.push(`latency_inside:${inside.ms}`)
      const handler = Effect.andThen(
        slow,
        route.handle({ method, path, params: match.params, query, headers, credential, body })
      ).pipe(
        Effect.catch((error: ApiError) => Effect.succeed(fromError(error))),
        // a sandbox bug answers like a server error (never cached) instead of an empty 500
        Effect.catchDefect((defect) =>
          Effect.as(Effect.logError("sandbox handler failed", defect), {
            status: 500,
            body: { error: "server_error", detail: `sandbox bug: ${String(defect)}` }
          } satisfies ApiResponse)
        ),
        // the write has committed, the answer is an error all the same: 5xx is not cached (§4 rule 6)
        Effect.map((response) => {
          if (statusAfter?.kind !== "status") return response
          trace.faults.push(`status_after:${statusAfter.status ?? 500}`)
          return injected(statusAfter.status ?? 500)
        })
      )
      const key = headers["idempotency-key"]
      if ((method !== "POST" && method !== "PATCH") || key === undefined || key === "") return yield* handler
      const outcome = yield* idempotency.run(
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

  const adminApp = (request: HttpServerRequest.HttpServerRequest, method: string, url: URL, body: string) =>
    Effect.gen(function* () {
      if (options.adminToken !== undefined && request.headers.authorization !== `Bearer ${options.adminToken}`) {
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

  const pipeline = (
    request: HttpServerRequest.HttpServerRequest,
    url: URL,
    method: string,
    path: string,
    body: string
  ) =>
    Effect.gen(function* () {
      const startedMs = yield* clock.wallNow
      const at = iso(yield* clock.now)
      const requestId = `req_${(++requestCounter).toString(36).padStart(6, "0")}`
      const ip = clientIp(request)
      const headers = request.headers as Headers
      const faultsFired = yield* faults.forRequest(method, path)
      const trace: Trace = { credential: undefined, rateLimited: null, replayed: false, faults: [] }
      const first = <K extends HttpFault["kind"]>(kind: K, when?: "before" | "after") =>
        faultsFired.find(
          (fault): fault is Extract<HttpFault, { readonly kind: K }> =>
            fault.kind === kind &&
            (when === undefined || ("when" in fault ? (fault.when ?? "before") : "before") === when)
        )

      for (const fault of faultsFired) {
        if (fault.kind !== "latency" || fault.when === "inside") continue
        trace.faults.push(`latency:${fault.ms}`)
        yield* Effect.sleep(Duration.millis(fault.ms))
      }

      const outcome: ApiResponse | typeof RESET = yield* Effect.gen(function* () {
        if (first("reset", "before") !== undefined) {
          trace.faults.push("reset:before")
          yield* resetConnection(request)
          return RESET
        }
        const statusBefore = first("status", "before")
        if (statusBefore !== undefined) {
          trace.faults.push(`status:${statusBefore.status ?? 500}`)
          return injected(statusBefore.status ?? 500)
        }
        const storm = first("rate_limit")
        if (storm !== undefined) {
          const limit = storm.limit ?? "token"
          const retryAfter = storm.retry_after ?? 30
          trace.faults.push(`rate_limit:${limit}:${retryAfter}`)
          trace.rateLimited = limit
          return fromError(rateLimited(limit, retryAfter, `${limit} rate limit exceeded; retry after ${retryAfter} s`))
        }
        const response = path.startsWith("/oauth/")
          ? yield* oauth(method, path, url.searchParams, headers, body)
          : yield* v1(method, path, url.searchParams, headers, body, ip, faultsFired, trace)
        if (first("reset", "after") !== undefined) {
          trace.faults.push("reset:after")
          yield* resetConnection(request)
          return RESET
        }
        return response
      })

      let status: number | null = null
      let response: HttpServerResponse.HttpServerResponse
      const nonJson = first("non_json")
      const truncate = first("truncate")
      const extraHeaders: Record<string, string> = { "x-request-id": requestId }
      if (outcome === RESET) {
        // never written: the socket is gone
        response = HttpServerResponse.empty({ status: 500 })
      } else if (nonJson !== undefined) {
        status = nonJson.status ?? 502
        trace.faults.push("non_json")
        response = HttpServerResponse.html(
          `<html><head><title>${status} Bad Gateway</title></head><body><h1>${status} Bad Gateway</h1></body></html>`
        ).pipe(HttpServerResponse.setStatus(status))
      } else {
        status = outcome.status
        if (trace.replayed) extraHeaders["idempotent-replayed"] = "true"
        if (truncate !== undefined && outcome.body !== undefined) {
          trace.faults.push("truncate")
          const text = JSON.stringify(outcome.body)
          response = HttpServerResponse.text(text.slice(0, Math.floor(text.length / 2)), {
            status,
            headers: { ...outcome.headers, ...extraHeaders },
            contentType: "application/json"
          })
        } else {
          response = toHttp(outcome, extraHeaders)
        }
      }

      const world = yield* store.world
      const credential = trace.credential
      yield* requestLog.append({
        at,
        method,
        path,
        route: path.startsWith("/oauth/") ? path : (api.find(method, path)?.handler.path ?? null),
        query: Object.fromEntries(url.searchParams),
        headers: redactHeaders(headers),
        idempotency_key: headers["idempotency-key"] ?? null,
        body: body === "" ? null : body.slice(0, 10_000),
        ip,
        status,
        duration_ms: (yield* clock.wallNow) - startedMs,
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
        idempotent_replay: trace.replayed
      })
      return response
    })

  const app = Effect.gen(function* () {
    const request = yield* HttpServerRequest.HttpServerRequest
    const url = new URL(request.url, "http://sandbox.invalid")
    const method = request.method.toUpperCase()
    const path = url.pathname
    const body = HAS_BODY.has(method) ? yield* Effect.orElseSucceed(request.text, () => "") : ""
    if (path === "/_sandbox" || path.startsWith("/_sandbox/")) return yield* adminApp(request, method, url, body)
    // a reset closes the socket, which makes the server interrupt this fiber: finish and log first
    return yield* Effect.uninterruptible(pipeline(request, url, method, path, body))
  })

  return app
})
