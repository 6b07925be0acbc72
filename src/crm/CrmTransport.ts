/**
 * CrmTransport: how one logical call of a connection reaches the CRM API and comes back as a reply
 * or a `CrmError` (spec §4, §7, §8) — the part of CrmClient below its endpoint table.
 *
 * Every attempt goes: bearer token (Credentials) → permit from the shared RateBudget (spec §8, with
 * the call's priority) → one HTTP request to the connection's base URL, under a timeout, redirects
 * not followed → the answer classified into a `CrmError` reason (spec §7). `send` retries a bounded
 * number of times; nothing is ever sent outside the configured base URL.
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Predicate from "effect/Predicate"
import * as Random from "effect/Random"
import * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as FetchHttpClient from "effect/http/FetchHttpClient"
import * as HttpClient from "effect/http/HttpClient"
import * as HttpClientRequest from "effect/http/HttpClientRequest"
import { randomUUID } from "node:crypto"
import type { Connection } from "../config/AppConfig.ts"
import { bucketsFor } from "../budget/Buckets.ts"
import { type BucketSpec, type ExhaustedLimit, type Priority, RateBudget } from "../budget/RateBudget.ts"
import { parseRetryAfter } from "../budget/RetryAfter.ts"
import {
  CrmError,
  type CrmErrorReason,
  DatabaseUnavailable,
  Forbidden,
  Invalid,
  KeyExpired,
  KeyInUse,
  type LimitName,
  NotFound,
  RateLimited,
  Server,
  Transport,
  trimDetail,
  Unauthorized,
  Undecodable
} from "./CrmError.ts"
import { Credentials } from "./Credentials.ts"

/**
 * Told of every permit the calls of a fiber take, retries included: a caller with an allowance of
 * requests (the reconciliation's budget share) counts what it actually spent, not its calls.
 */
export const CrmPermitSpent = Context.Reference<(() => void) | undefined>("crm-sync/crm/CrmPermitSpent", {
  defaultValue: () => undefined
})

// ---------------------------------------------------------------------------------------------
// Retry policy
// ---------------------------------------------------------------------------------------------

/** Retries after 5xx, transport failures and cut-off bodies: 5 attempts in all. */
const TRANSIENT_RETRIES = 4
/** OAuth refreshes after a 401 within one call (see `send`). */
const MAX_REFRESHES = 2
/** Retries after a 429, each after the budget's block has passed. */
const RATE_LIMIT_RETRIES = 3
const BACKOFF_BASE_MS = 250
const BACKOFF_CAP_MS = 8_000

/** Exponential backoff with jitter: the n-th retry waits between half and all of min(cap, base·2ⁿ⁻¹). */
const backoff = (retry: number) =>
  Effect.map(Random.next, (random) => {
    const ceiling = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** (retry - 1))
    return Duration.millis(Math.round(ceiling / 2 + (random * ceiling) / 2))
  })

const USER_AGENT = "crm-sync/0.1"

// ---------------------------------------------------------------------------------------------
// One call
// ---------------------------------------------------------------------------------------------

type Method = "GET" | "POST" | "PATCH" | "DELETE"

export interface Call {
  readonly operation: string
  readonly method: Method
  /** Path below the base URL, segments already encoded, e.g. `/v1/meetings/m%201`. */
  readonly path: string
  readonly query?: Readonly<Record<string, string | undefined>>
  readonly body?: unknown
  readonly recordId?: string
  readonly priority: Priority
  readonly idempotencyKey?: string
  /** See `WriteOptions.sendBy`. */
  readonly sendBy?: number
  /** See `WriteOptions.retryServerErrors`. */
  readonly retryServerErrors?: boolean
  /** 204-style endpoints: no body expected. */
  readonly empty?: boolean
}

/** A 2xx answer: its status, parsed JSON body (undefined for an empty one) and `Date` header. */
export interface Reply {
  readonly status: number
  readonly body: unknown
  /** The CRM's clock when it answered (HTTP date, whole seconds), if it sent one. */
  readonly date: string | undefined
}

/** The outcome of one attempt, as a value: the retry loop decides what to do with it. */
type Attempt =
  | { readonly kind: "ok"; readonly reply: Reply }
  | { readonly kind: "failed"; readonly reason: CrmErrorReason; readonly token?: Redacted.Redacted<string> }
  | {
      readonly kind: "rate-limited"
      readonly limit: LimitName
      readonly retryAfterMs: number | undefined
    }

const ErrorBody = Schema.Struct({
  error: Schema.optionalKey(Schema.NullOr(Schema.String)),
  detail: Schema.optionalKey(Schema.NullOr(Schema.String))
})
const decodeErrorBody = Schema.decodeUnknownOption(ErrorBody)
const parseJson = Schema.decodeUnknownOption(Schema.fromJsonString(Schema.Unknown))

/**
 * Which bucket a 429 body names (spec §7: "the body identifies which limit was exceeded"; its
 * fields are not shown). Any string member is read for the words the spec uses for the buckets.
 */
export const limitFromBody = (body: unknown): LimitName => {
  if (!Predicate.isObject(body)) return "unknown"
  const record = body as Record<string, unknown>
  const preferred = ["limit", "bucket", "scope", "limit_name", "error", "detail", "message"]
  const texts = [
    ...preferred.map((key) => record[key]),
    ...Object.keys(record)
      .filter((key) => !preferred.includes(key))
      .map((key) => record[key])
  ].filter(Predicate.isString)
  for (const text of texts) {
    const lower = text.toLowerCase()
    if (/\b(token|user)\b|per[_ -]?(token|user)|(token|user)[_ -]?limit/.test(lower)) return "token"
    if (/\b(company|app)\b|per[_ -]?(company|app)|(company|app)[_ -]?limit/.test(lower)) return "company"
    if (/\bip\b|per[_ -]?ip|ip[_ -]?limit/.test(lower)) return "ip"
  }
  return "unknown"
}

/** A path segment from an id: encoded, and never `.`/`..` (which URL parsing would resolve away). */
export const segment = (id: string): Option.Option<string> =>
  id === "" || id === "." || id === ".." ? Option.none() : Option.some(encodeURIComponent(id))

/** Maps a non-2xx answer to its reason (spec §7; statuses the spec does not show go by class). */
export const classify = (
  call: Pick<Call, "method" | "idempotencyKey">,
  status: number,
  body: unknown
): CrmErrorReason => {
  const parsed = Option.getOrUndefined(decodeErrorBody(body))
  const code = trimDetail(parsed?.error)
  const detail = trimDetail(parsed?.detail)
  const extras = { ...(code === undefined ? {} : { code }), ...(detail === undefined ? {} : { detail }) }
  if (status >= 300 && status < 400) return new Transport({ kind: "redirect", detail: `status ${status}` })
  if (status === 401) return new Unauthorized(extras)
  if (status === 403) return new Forbidden({ write: call.method !== "GET", ...extras })
  if (status === 404) return new NotFound(extras)
  // The spec shows no 409; the CRM's idempotency answers it while a request with the key still runs.
  if (status === 409 && call.idempotencyKey !== undefined) return new KeyInUse(extras)
  if (status >= 500) return new Server({ status, ...(code === undefined ? {} : { code }) })
  if (status >= 400) return new Invalid({ status, ...extras })
  return new Undecodable({ status, malformed: false, detail: "unexpected status" })
}

/** Reads a complete answer into an attempt outcome. */
const answer = (
  call: Call,
  status: number,
  retryAfter: string | undefined,
  text: string,
  failed: (reason: CrmErrorReason) => Attempt,
  date?: string
): Effect.Effect<Attempt> =>
  Effect.gen(function* () {
    if (status < 200 || status >= 300) {
      const body = Option.getOrUndefined(parseJson(text))
      if (status === 429) {
        const now = yield* Clock.currentTimeMillis
        return {
          kind: "rate-limited",
          limit: limitFromBody(body),
          retryAfterMs: parseRetryAfter(retryAfter, now)
        } as const
      }
      return failed(classify(call, status, body))
    }
    if (text.trim() === "") {
      return call.empty === true
        ? ({ kind: "ok", reply: { status, body: undefined, date } } as const)
        : failed(new Undecodable({ status, malformed: true, detail: "empty body" }))
    }
    return Option.match(parseJson(text), {
      onNone: () => failed(new Undecodable({ status, malformed: true })),
      onSome: (body): Attempt => ({ kind: "ok", reply: { status, body, date } })
    })
  })

/** What went wrong before an answer, in words that carry no URL (its query may hold a name filter). */
const transportDetail = (reason: unknown) =>
  Predicate.isTagged(reason, "InvalidUrlError")
    ? "invalid URL"
    : Predicate.isTagged(reason, "EncodeError")
      ? "request body could not be encoded"
      : "connection failed"

/** Socket errors that mean no connection was made: the request never left. */
const NOT_SENT = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "ENETUNREACH",
  "EHOSTUNREACH",
  "UND_ERR_CONNECT_TIMEOUT"
])

/** Whether a failed exchange may have run at the CRM: unless a cause in its chain says no connection was made. */
const mayHaveRun = (failure: unknown): boolean => {
  let cause: unknown = failure
  for (let depth = 0; depth < 8 && Predicate.isObject(cause); depth++) {
    const code = (cause as { readonly code?: unknown }).code
    if (typeof code === "string" && NOT_SENT.has(code)) return false
    const record = cause as { readonly cause?: unknown; readonly reason?: unknown }
    cause = record.cause ?? record.reason
  }
  return true
}

/** The wait a 429 asked for, as a Duration the budget can clamp (negative becomes zero, then 1 s). */
const retryAfterDuration = (ms: number | undefined) =>
  ms === undefined || !Number.isFinite(ms) ? undefined : Duration.millis(Math.max(0, ms))

/** The error of a call that was sent (`attempts` of them) and failed for `reason`. */
export const callError = (connection: Connection, call: Call, attempts: number, reason: CrmErrorReason) =>
  new CrmError({
    operation: call.operation,
    connection: connection.name,
    attempts,
    reason,
    ...(call.recordId === undefined ? {} : { recordId: call.recordId })
  })

/** Refused before sending: nothing left the process, so the error says crm-sync refused it. */
export const refused = (connection: Connection, operation: string, detail: string, recordId?: string) =>
  new CrmError({
    operation,
    connection: connection.name,
    attempts: 0,
    reason: new Invalid({ status: 0, code: "refused_by_crm_sync", detail }),
    ...(recordId === undefined ? {} : { recordId })
  })

// ---------------------------------------------------------------------------------------------
// The transport of one connection
// ---------------------------------------------------------------------------------------------

/** One connection's way to the CRM: what CrmClient's endpoints send their calls through. */
export interface CrmTransport {
  readonly connection: Connection
  /** The connection's three buckets of spec §8, as currently known (see `grantBuckets`). */
  readonly buckets: () => ReadonlyArray<BucketSpec>
  /** A logical call: attempts until success, a final answer, or the retry allowances run out. */
  readonly send: (call: Call) => Effect.Effect<Reply, CrmError>
}

/** What an attempt needs: the connection's services and where its requests may go. */
interface Wire {
  readonly connection: Connection
  readonly budget: RateBudget["Service"]
  readonly credentials: Credentials["Service"]
  readonly http: HttpClient.HttpClient
  readonly grant: GrantBuckets
  readonly base: URL
  /** The base URL's path without its trailing slashes. */
  readonly basePath: string
}

interface GrantBuckets {
  readonly current: () => ReadonlyArray<BucketSpec>
  /** The buckets for a request carrying `token` (looking the user up again if the token changed). */
  readonly forToken: (token: Redacted.Redacted<string>) => Effect.Effect<ReadonlyArray<BucketSpec>>
}

/**
 * An OAuth grant's user bucket is shared with the user's other connections (spec §8, §5.4). The
 * user is known once `connect` has recorded it, possibly after this client was made (a daemon
 * started before `connect` ran in another shell): while it is unknown, it is looked up again
 * whenever the token changes (`connect` stores a new one), and the buckets follow.
 */
const grantBuckets = Effect.fnUntraced(function* (connection: Connection, credentials: Credentials["Service"]) {
  const oauthGrant = connection.credential === "oauth" && connection.oauth !== undefined
  const lookUpUser = credentials.status(connection).pipe(
    Effect.map((status) => status.userId),
    Effect.orElseSucceed(() => undefined)
  )
  let userId = oauthGrant ? yield* lookUpUser : undefined
  let buckets = bucketsFor(connection, { userId })
  let lookedUpWith: string | undefined
  return {
    current: () => buckets,
    forToken: (token) =>
      Effect.gen(function* () {
        if (!oauthGrant || userId !== undefined || Redacted.value(token) === lookedUpWith) return buckets
        lookedUpWith = Redacted.value(token)
        userId = yield* lookUpUser
        if (userId !== undefined) buckets = bucketsFor(connection, { userId })
        return buckets
      })
  } satisfies GrantBuckets
})

export const makeTransport = Effect.fnUntraced(function* (connection: Connection) {
  const credentials = yield* Credentials
  const base = new URL(connection.base_url)
  const wire: Wire = {
    connection,
    budget: yield* RateBudget,
    credentials,
    http: yield* HttpClient.HttpClient,
    grant: yield* grantBuckets(connection, credentials),
    base,
    basePath: base.pathname.replace(/\/+$/, "")
  }
  return { connection, buckets: wire.grant.current, send: (call) => send(wire, call) } satisfies CrmTransport
})

const urlFor = (wire: Wire, call: Call): URL => {
  const url = new URL(`${wire.base.origin}${wire.basePath}${call.path}`)
  for (const [key, value] of Object.entries(call.query ?? {})) {
    if (value !== undefined) url.searchParams.set(key, value)
  }
  return url
}

/** The HTTP request of one attempt. */
const request = (call: Call, url: URL, token: Redacted.Redacted<string>, idempotencyKey: string | undefined) => {
  let request = HttpClientRequest.make(call.method)(url).pipe(
    HttpClientRequest.bearerToken(Redacted.value(token)),
    HttpClientRequest.acceptJson,
    HttpClientRequest.setHeader("user-agent", USER_AGENT)
  )
  if (idempotencyKey !== undefined) request = HttpClientRequest.setHeader(request, "idempotency-key", idempotencyKey)
  // spec §4: without Content-Type: application/json the body is ignored.
  if (call.body !== undefined) request = HttpClientRequest.bodyJsonUnsafe(request, call.body)
  return request
}

/** Sends the request and reads its answer into an outcome; a failure to get one is a Transport reason. */
const exchange = (
  wire: Wire,
  call: Call,
  request: HttpClientRequest.HttpClientRequest,
  failed: (reason: CrmErrorReason) => Attempt
) =>
  wire.http.execute(request).pipe(
    Effect.flatMap((response) =>
      response.text.pipe(
        Effect.flatMap((text) =>
          answer(call, response.status, response.headers["retry-after"], text, failed, response.headers["date"])
        ),
        // The body stopped mid-way: as good as a dropped connection (a 2xx was cached, spec §4 rule 6).
        Effect.catchTag("HttpClientError", () =>
          Effect.succeed(
            failed(new Transport({ kind: "network", detail: "response cut off", mayHaveRun: response.status >= 500 }))
          )
        )
      )
    ),
    Effect.catch((cause) =>
      Effect.succeed(
        failed(new Transport({ kind: "network", detail: transportDetail(cause.reason), mayHaveRun: mayHaveRun(cause) }))
      )
    ),
    Effect.timeoutOrElse({
      duration: wire.connection.request_timeout,
      orElse: () => Effect.succeed(failed(new Transport({ kind: "timeout", mayHaveRun: true })))
    }),
    // Our own guard against redirects for fetch-based clients (Node's clients never follow them),
    // and no trace headers to a third party.
    Effect.provideService(FetchHttpClient.RequestInit, { redirect: "manual" }),
    Effect.provideService(HttpClient.TracerPropagationEnabled, false)
  )

/** One attempt: token, permit, request, answer. Never fails: the outcome is a value. */
const attempt = (wire: Wire, call: Call, url: URL, idempotencyKey: string | undefined) =>
  Effect.gen(function* () {
    const token = yield* wire.credentials.token(wire.connection).pipe(Effect.result)
    if (Result.isFailure(token)) {
      return { kind: "failed", reason: token.failure.reason } satisfies Attempt as Attempt
    }
    const permit = yield* wire.budget
      .acquire(yield* wire.grant.forToken(token.success), { priority: call.priority })
      .pipe(Effect.result)
    if (Result.isFailure(permit)) {
      return {
        kind: "failed",
        reason: new DatabaseUnavailable({ detail: "rate budget" })
      } satisfies Attempt as Attempt
    }
    // A permit can take long to come (a 429 block, a full window): the key may have expired meanwhile.
    if (call.sendBy !== undefined && (yield* Clock.currentTimeMillis) > call.sendBy) {
      return { kind: "failed", reason: new KeyExpired({}) } satisfies Attempt as Attempt
    }
    const spent = yield* CrmPermitSpent
    if (spent !== undefined) spent()
    const failed = (reason: CrmErrorReason): Attempt => ({ kind: "failed", reason, token: token.success })
    // The first request of a window: the window starts now, as it leaves (RateBudget.anchor). In
    // the background: the request does not wait for it, and a failure only keeps the grant's time.
    if (permit.success !== undefined) {
      yield* Effect.forkDetach(wire.budget.anchor(permit.success, yield* Clock.currentTimeMillis).pipe(Effect.ignore))
    }
    return yield* exchange(wire, call, request(call, url, token.success, idempotencyKey), failed)
  })

/**
 * A logical call: attempts until success, a final answer, or the retry allowances run out. 5xx,
 * transport failures and cut-off bodies are retried with exponential backoff and jitter; a 401
 * after an OAuth refresh; a 429 after marking the named bucket exhausted for every process (the
 * next permit then waits out `Retry-After`). A POST or PATCH carries one `Idempotency-Key` for all
 * its attempts — the caller's (the outbox row's), or one made for the call — so a retry after a
 * lost response cannot create a second record (spec §4 rule 6; 5xx answers are never cached, so
 * those retries run again).
 */
const send = Effect.fnUntraced(function* (wire: Wire, call: Call) {
  const { connection, base, basePath } = wire
  const url = urlFor(wire, call)
  // Only the configured base URL is ever asked (an id cannot climb out of its path segment).
  if (url.origin !== base.origin || !url.pathname.startsWith(`${basePath}/v1/`)) {
    return yield* refused(connection, call.operation, "the request would leave the configured base URL", call.recordId)
  }
  const idempotencyKey =
    call.method === "POST" || call.method === "PATCH" ? (call.idempotencyKey ?? randomUUID()) : undefined
  const error = (attempts: number, reason: CrmErrorReason) => callError(connection, call, attempts, reason)
  let attempts = 0
  let transient = 0
  let limited = 0
  let refreshes = 0
  while (true) {
    attempts++
    const outcome = yield* attempt(wire, call, url, idempotencyKey)
    if (outcome.kind === "ok") return outcome.reply
    if (outcome.kind === "rate-limited") {
      const waited = yield* wire.budget
        .markExhausted(wire.grant.current(), outcome.limit as ExhaustedLimit, retryAfterDuration(outcome.retryAfterMs))
        .pipe(Effect.mapError(() => error(attempts, new DatabaseUnavailable({ detail: "rate budget" }))))
      const reason = new RateLimited({ limit: outcome.limit, retryAfter: waited })
      if (limited >= RATE_LIMIT_RETRIES) return yield* error(attempts, reason)
      limited++
      continue
    }
    const reason = outcome.reason
    if (
      reason instanceof Unauthorized &&
      refreshes < MAX_REFRESHES &&
      connection.oauth !== undefined &&
      outcome.token !== undefined
    ) {
      // spec §5.3: an OAuth access token expires. The refresh is shared by all processes, so the
      // token it hands back may be one another process stored; if that one is refused too, the
      // second refresh (rejecting it) asks the authorization server itself.
      refreshes++
      const renewed = yield* wire.credentials.refresh(connection, outcome.token).pipe(Effect.result)
      if (Result.isFailure(renewed)) return yield* error(attempts, renewed.failure.reason)
      continue
    }
    if (!reason.retryable || transient >= TRANSIENT_RETRIES) return yield* error(attempts, reason)
    // A create that must not run twice is not sent again once it may have run: its lost answer may
    // have been an uncached 5xx (found by the chaos suite, seed 20261202: a 503 after the commit,
    // then a reset, then a retry that created a second contact).
    if (
      call.retryServerErrors === false &&
      (reason._tag === "Server" || (reason._tag === "Transport" && reason.mayHaveRun === true))
    )
      return yield* error(attempts, reason)
    transient++
    const delay = yield* backoff(transient)
    yield* Effect.logDebug("crm: retrying").pipe(
      Effect.annotateLogs({
        operation: call.operation,
        reason: reason.description,
        attempt: attempts,
        delay_ms: Duration.toMillis(delay)
      })
    )
    yield* Effect.sleep(delay)
  }
})
