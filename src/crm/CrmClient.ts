/**
 * CrmClient: the only way crm-sync talks to the CRM API — one typed method per endpoint of spec §4,
 * for one configured connection.
 *
 * Every attempt of every call goes: bearer token (Credentials) → permit from the shared RateBudget
 * (spec §8, with the call's priority) → one HTTP request to the connection's base URL, under a
 * timeout, redirects not followed → the answer classified into a `CrmError` reason (spec §7). A
 * logical call retries a bounded number of times: 5xx, transport failures and cut-off bodies with
 * exponential backoff and jitter; a 401 once, after an OAuth refresh; a 429 after marking the named
 * bucket exhausted for every process (the next permit then waits out `Retry-After`). A POST or
 * PATCH carries one `Idempotency-Key` for all its attempts — the caller's (the outbox row's), or
 * one made for the call — so a retry after a lost response cannot create a second record
 * (spec §4 rule 6; 5xx answers are never cached, so those retries run again).
 *
 * List endpoints return `ListPage`s whose records stay raw until decoded one by one (Pagination);
 * single reads return the raw record beside its decoding, so the warehouse can keep a record that
 * does not decode. `paginate` crawls a list at `per_page=100`.
 *
 * Why hand-written on `HttpClient` rather than derived from an `effect/http-api` definition: an
 * `HttpApiClient` decodes whole responses against the endpoint's schema, so one odd record would
 * fail its page, whereas the warehouse must keep it in `raw`; the budget, 429 bookkeeping, the
 * per-call idempotency key and the OAuth refresh need the call's context (priority, connection,
 * attempt), which a transport middleware does not see; and spec §7 leaves most error statuses
 * "not shown", so errors are classified by status here rather than declared per endpoint. The
 * schemas are still shared: the models of `Models.ts` describe what every endpoint returns.
 */
import {
  Clock,
  Context,
  DateTime,
  Duration,
  Effect,
  Layer,
  Option,
  Predicate,
  Random,
  Redacted,
  Result,
  Schema,
  Stream
} from "effect"
import { FetchHttpClient, HttpClient, HttpClientRequest } from "effect/http"
import { randomUUID } from "node:crypto"
import { AppConfig, type Connection } from "../config/AppConfig.ts"
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
import * as Models from "./Models.ts"
import {
  crawl,
  type DecodedItem,
  decodeRecord,
  describeIssue,
  type ListPage,
  MAX_PER_PAGE,
  PageEnvelope,
  type PageQuery
} from "./Pagination.ts"

export type { ListPage, PageQuery } from "./Pagination.ts"
export type { Priority } from "../budget/RateBudget.ts"

/** A single record as received: the raw JSON (stored in `raw`) and its decoding. */
export type Received<A> = DecodedItem<A>

/** Per-call options. */
export interface CallOptions {
  /** Overrides the method's default priority class and any `CrmPriority` in scope. */
  readonly priority?: Priority
}

export interface WriteOptions extends CallOptions {
  /** The call's `Idempotency-Key` (spec §4); by default one is made for the call and kept across its retries. */
  readonly idempotencyKey?: string
  /**
   * Epoch milliseconds after which no attempt of the call is sent (checked once the permit is in
   * hand): the moment the key stops protecting against a second create. Past it the call fails
   * with `KeyExpired`.
   */
  readonly sendBy?: number
  /**
   * Whether a 5xx answer is retried within the call (default true). A create that must never run
   * twice says false: 5xx answers are not cached (spec §4 rule 6), so a retry after one runs the
   * request again even when the first had committed.
   */
  readonly retryServerErrors?: boolean
}

/**
 * The priority class for the calls of a whole fiber (a poller sets `incremental`, a backfill
 * `bulk`); a call's own `priority` option wins over it, and either over the method's default.
 */
export const CrmPriority = Context.Reference<Priority | undefined>("crm-sync/crm/CrmPriority", {
  defaultValue: () => undefined
})

/**
 * Told of every permit the calls of a fiber take, retries included: a caller with an allowance of
 * requests (the reconciliation's budget share) counts what it actually spent, not its calls.
 */
export const CrmPermitSpent = Context.Reference<(() => void) | undefined>("crm-sync/crm/CrmPermitSpent", {
  defaultValue: () => undefined
})

export interface BusinessQuery extends PageQuery {
  readonly book_id?: string | undefined
  /** Prefix or full-text name match (spec §4 rule 3). */
  readonly name?: string | undefined
  /** Only businesses updated at or after this instant; sent as ISO 8601 (spec §4 rule 4). */
  readonly updated_since?: DateTime.DateTime | undefined
}

export interface ProjectTemplateQuery extends PageQuery {
  /** With a book, company-wide templates usable for it are included (spec §4 rule 2). */
  readonly book_id?: string | undefined
  readonly projectable_kind?: "household" | "contact" | "business" | undefined
}

/** The three parents notes hang under (spec §4 rule 5: there is no top-level note endpoint). */
export type NoteParent = "household" | "contact" | "business"

/** What `GET /v1/me` says about a token (spec §2.11, §5.2): the daemon logs it at start. */
export interface Access {
  readonly connection: string
  readonly userId: string
  readonly authType: string
  readonly scope: string | null
  readonly canWrite: boolean
}

export interface CrmClientShape {
  readonly connection: Connection
  /** The connection's three buckets of spec §8 (for budget status and ETAs). */
  readonly buckets: ReadonlyArray<BucketSpec>

  /** `GET /v1/me`. */
  readonly me: (options?: CallOptions) => Effect.Effect<Models.Me, CrmError>
  /** `GET /v1/me`, summarized: auth type and write access. */
  readonly access: (options?: CallOptions) => Effect.Effect<Access, CrmError>
  /** `GET /v1/books` (one page). */
  readonly listBooks: (query?: PageQuery, options?: CallOptions) => Effect.Effect<ListPage<Models.Book>, CrmError>
  /** `POST /v1/webhook_subscription` (OAuth only; idempotent per app, user and company: spec §3). */
  readonly subscribeWebhooks: (options?: WriteOptions) => Effect.Effect<Models.WebhookSubscription, CrmError>
  /** `DELETE /v1/webhook_subscription` (204, also when there is none). */
  readonly unsubscribeWebhooks: (options?: CallOptions) => Effect.Effect<void, CrmError>
  /** `POST /v1/contacts` with a body per spec §2.2. */
  readonly createContact: (
    body: Models.ContactCreate,
    options?: WriteOptions
  ) => Effect.Effect<Received<Models.Contact>, CrmError>
  /** `POST /v1/prospects`. */
  readonly createProspect: (
    body: Models.ProspectCreate,
    options?: WriteOptions
  ) => Effect.Effect<Received<Models.Prospect>, CrmError>
  /** `GET /v1/businesses` (one page). */
  readonly listBusinesses: (
    query?: BusinessQuery,
    options?: CallOptions
  ) => Effect.Effect<ListPage<Models.Business>, CrmError>
  /** `GET /v1/project_templates` (one page). */
  readonly listProjectTemplates: (
    query?: ProjectTemplateQuery,
    options?: CallOptions
  ) => Effect.Effect<ListPage<Models.ProjectTemplate>, CrmError>
  /** `GET /v1/annuity_contracts` (one page). */
  readonly listAnnuityContracts: (
    query?: PageQuery,
    options?: CallOptions
  ) => Effect.Effect<ListPage<Models.AnnuityContract>, CrmError>
  /** `GET /v1/financial_accounts` (one page). */
  readonly listFinancialAccounts: (
    query?: PageQuery,
    options?: CallOptions
  ) => Effect.Effect<ListPage<Models.FinancialAccount>, CrmError>
  /** `GET /v1/meetings/{id}`. */
  readonly getMeeting: (id: string, options?: CallOptions) => Effect.Effect<Received<Models.Meeting>, CrmError>
  /** `GET /v1/meetings/{meeting_id}/transcript`. */
  readonly getTranscript: (
    meetingId: string,
    options?: CallOptions
  ) => Effect.Effect<Received<Models.MeetingTranscript>, CrmError>
  /** `GET /v1/tasks/{id}`. */
  readonly getTask: (id: string, options?: CallOptions) => Effect.Effect<Received<Models.Task>, CrmError>
  /** `GET /v1/{households|contacts|businesses}/{parent_id}/notes/{id}`. */
  readonly getNote: (
    parent: NoteParent,
    parentId: string,
    id: string,
    options?: CallOptions
  ) => Effect.Effect<Received<Models.Note>, CrmError>
  /** `GET /v1/households/{household_id}/notes/{id}`. */
  readonly getHouseholdNote: (
    householdId: string,
    id: string,
    options?: CallOptions
  ) => Effect.Effect<Received<Models.Note>, CrmError>
  /** `GET /v1/contacts/{contact_id}/notes/{id}`. */
  readonly getContactNote: (
    contactId: string,
    id: string,
    options?: CallOptions
  ) => Effect.Effect<Received<Models.Note>, CrmError>
  /** `GET /v1/businesses/{business_id}/notes/{id}`. */
  readonly getBusinessNote: (
    businessId: string,
    id: string,
    options?: CallOptions
  ) => Effect.Effect<Received<Models.Note>, CrmError>

  /**
   * Every page of a list, `per_page=100`, from `startPage` (default 1), following `total_pages`
   * as each page reports it and stopping at an empty page, e.g.
   * `client.paginate((page) => client.listBusinesses({ ...page, book_id }))`.
   */
  readonly paginate: <A>(
    list: (page: { readonly page: number; readonly per_page: number }) => Effect.Effect<ListPage<A>, CrmError>,
    options?: { readonly startPage?: number }
  ) => Stream.Stream<ListPage<A>, CrmError>
}

/** The connection named is not in the config. */
export class UnknownConnection extends Schema.TaggedError<UnknownConnection>()("UnknownConnection", {
  connection: Schema.String
}) {
  override get message(): string {
    return this.connection === ""
      ? "no CRM connection is configured (CRM_BASE_URL and CRM_TOKEN, or connections in CRM_SYNC_CONFIG)"
      : `no CRM connection named ${this.connection} is configured`
  }
}

export class CrmClient extends Context.Service<CrmClient, CrmClientShape>()("crm-sync/crm/CrmClient") {
  /** A client for the named connection (default: the first configured). */
  static readonly make = (connectionName?: string) =>
    Effect.gen(function* () {
      const config = yield* AppConfig
      const connection =
        connectionName === undefined
          ? config.connections[0]
          : config.connections.find((candidate) => candidate.name === connectionName)
      if (connection === undefined) return yield* new UnknownConnection({ connection: connectionName ?? "" })
      return yield* makeClient(connection)
    })

  /** The client of the first (usually only) configured connection. */
  static readonly layer = Layer.effect(CrmClient, CrmClient.make())

  /** The client of a named connection. */
  static readonly layerFor = (connectionName: string) => Layer.effect(CrmClient, CrmClient.make(connectionName))
}

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

interface Call {
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

/** A 2xx answer: its status and parsed JSON body (undefined for an empty one). */
interface Reply {
  readonly status: number
  readonly body: unknown
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
const segment = (id: string): Option.Option<string> =>
  id === "" || id === "." || id === ".." ? Option.none() : Option.some(encodeURIComponent(id))

/** Maps a non-2xx answer to its reason (spec §7; statuses the spec does not show go by class). */
const classify = (call: Call, status: number, body: unknown): CrmErrorReason => {
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

const priorityOf = (options: CallOptions | undefined, fallback: Priority) =>
  Effect.gen(function* () {
    const inScope = yield* CrmPriority
    return options?.priority ?? inScope ?? fallback
  })

const pageParams = (query: PageQuery | undefined) => {
  const page = Math.max(1, Math.trunc(query?.page ?? 1))
  // spec §4 rule 1: 1..100; the server clamps too, this keeps the pagination we compute honest.
  const perPage = Math.min(MAX_PER_PAGE, Math.max(1, Math.trunc(query?.per_page ?? MAX_PER_PAGE)))
  return { page, per_page: perPage }
}

/** Reads a complete answer into an attempt outcome. */
const answer = (
  call: Call,
  status: number,
  retryAfter: string | undefined,
  text: string,
  failed: (reason: CrmErrorReason) => Attempt
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
        ? ({ kind: "ok", reply: { status, body: undefined } } as const)
        : failed(new Undecodable({ status, malformed: true, detail: "empty body" }))
    }
    return Option.match(parseJson(text), {
      onNone: () => failed(new Undecodable({ status, malformed: true })),
      onSome: (body): Attempt => ({ kind: "ok", reply: { status, body } })
    })
  })

/** What went wrong before an answer, in words that carry no URL (its query may hold a name filter). */
const transportDetail = (reason: unknown) =>
  Predicate.isTagged(reason, "InvalidUrlError")
    ? "invalid URL"
    : Predicate.isTagged(reason, "EncodeError")
      ? "request body could not be encoded"
      : "connection failed"

const makeClient = Effect.fnUntraced(function* (connection: Connection) {
  const budget = yield* RateBudget
  const credentials = yield* Credentials
  const http = yield* HttpClient.HttpClient
  // An OAuth grant's user bucket is shared with the user's other connections (spec §8, §5.4). The
  // user is known once `connect` has recorded it, possibly after this client was made (a daemon
  // started before `connect` ran in another shell): while it is unknown, it is looked up again
  // whenever the token changes (`connect` stores a new one), and the buckets follow.
  const oauthGrant = connection.credential === "oauth" && connection.oauth !== undefined
  const lookUpUser = credentials.status(connection).pipe(
    Effect.map((status) => status.userId),
    Effect.orElseSucceed(() => undefined)
  )
  let userId = oauthGrant ? yield* lookUpUser : undefined
  let buckets = bucketsFor(connection, { userId })
  let lookedUpWith: string | undefined
  const bucketsWith = (token: Redacted.Redacted<string>) =>
    Effect.gen(function* () {
      if (!oauthGrant || userId !== undefined || Redacted.value(token) === lookedUpWith) return buckets
      lookedUpWith = Redacted.value(token)
      userId = yield* lookUpUser
      if (userId !== undefined) buckets = bucketsFor(connection, { userId })
      return buckets
    })
  const base = new URL(connection.base_url)
  const basePath = base.pathname.replace(/\/+$/, "")

  const error = (call: Call, attempts: number, reason: CrmErrorReason) =>
    new CrmError({
      operation: call.operation,
      connection: connection.name,
      attempts,
      reason,
      ...(call.recordId === undefined ? {} : { recordId: call.recordId })
    })

  /** Refused before sending: nothing left the process, so the error says crm-sync refused it. */
  const refuse = (operation: string, detail: string, recordId?: string) =>
    new CrmError({
      operation,
      connection: connection.name,
      attempts: 0,
      reason: new Invalid({ status: 0, code: "refused_by_crm_sync", detail }),
      ...(recordId === undefined ? {} : { recordId })
    })

  const urlFor = (call: Call): URL => {
    const url = new URL(`${base.origin}${basePath}${call.path}`)
    for (const [key, value] of Object.entries(call.query ?? {})) {
      if (value !== undefined) url.searchParams.set(key, value)
    }
    return url
  }

  /** One attempt: token, permit, request, answer. Never fails: the outcome is a value. */
  const attempt = (call: Call, url: URL, idempotencyKey: string | undefined) =>
    Effect.gen(function* () {
      const token = yield* credentials.token(connection).pipe(Effect.result)
      if (Result.isFailure(token)) {
        return { kind: "failed", reason: token.failure.reason } satisfies Attempt as Attempt
      }
      const permit = yield* budget
        .acquire(yield* bucketsWith(token.success), { priority: call.priority })
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
      let request = HttpClientRequest.make(call.method)(url).pipe(
        HttpClientRequest.bearerToken(Redacted.value(token.success)),
        HttpClientRequest.acceptJson,
        HttpClientRequest.setHeader("user-agent", USER_AGENT)
      )
      if (idempotencyKey !== undefined)
        request = HttpClientRequest.setHeader(request, "idempotency-key", idempotencyKey)
      // spec §4: without Content-Type: application/json the body is ignored.
      if (call.body !== undefined) request = HttpClientRequest.bodyJsonUnsafe(request, call.body)

      const failed = (reason: CrmErrorReason): Attempt => ({ kind: "failed", reason, token: token.success })
      return yield* http.execute(request).pipe(
        Effect.flatMap((response) =>
          response.text.pipe(
            Effect.flatMap((text) => answer(call, response.status, response.headers["retry-after"], text, failed)),
            // The body stopped mid-way: as good as a dropped connection.
            Effect.catchTag("HttpClientError", () =>
              Effect.succeed(failed(new Transport({ kind: "network", detail: "response cut off" })))
            )
          )
        ),
        Effect.catch((cause) =>
          Effect.succeed(failed(new Transport({ kind: "network", detail: transportDetail(cause.reason) })))
        ),
        Effect.timeoutOrElse({
          duration: connection.request_timeout,
          orElse: () => Effect.succeed(failed(new Transport({ kind: "timeout" })))
        }),
        // Our own guard against redirects for fetch-based clients (Node's clients never follow them),
        // and no trace headers to a third party.
        Effect.provideService(FetchHttpClient.RequestInit, { redirect: "manual" }),
        Effect.provideService(HttpClient.TracerPropagationEnabled, false)
      )
    })

  /** A logical call: attempts until success, a final answer, or the retry allowances run out. */
  const send = Effect.fnUntraced(function* (call: Call) {
    const url = urlFor(call)
    // Only the configured base URL is ever asked (an id cannot climb out of its path segment).
    if (url.origin !== base.origin || !url.pathname.startsWith(`${basePath}/v1/`)) {
      return yield* refuse(call.operation, "the request would leave the configured base URL", call.recordId)
    }
    const idempotencyKey =
      call.method === "POST" || call.method === "PATCH" ? (call.idempotencyKey ?? randomUUID()) : undefined
    let attempts = 0
    let transient = 0
    let limited = 0
    let refreshes = 0
    while (true) {
      attempts++
      const outcome = yield* attempt(call, url, idempotencyKey)
      if (outcome.kind === "ok") return outcome.reply
      if (outcome.kind === "rate-limited") {
        const waited = yield* budget
          .markExhausted(buckets, outcome.limit as ExhaustedLimit, retryAfterDuration(outcome.retryAfterMs))
          .pipe(Effect.mapError(() => error(call, attempts, new DatabaseUnavailable({ detail: "rate budget" }))))
        const reason = new RateLimited({ limit: outcome.limit, retryAfter: waited })
        if (limited >= RATE_LIMIT_RETRIES) return yield* error(call, attempts, reason)
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
        const renewed = yield* credentials.refresh(connection, outcome.token).pipe(Effect.result)
        if (Result.isFailure(renewed)) return yield* error(call, attempts, renewed.failure.reason)
        continue
      }
      if (!reason.retryable || transient >= TRANSIENT_RETRIES) return yield* error(call, attempts, reason)
      if (reason._tag === "Server" && call.retryServerErrors === false) return yield* error(call, attempts, reason)
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

  /** A single record: decoded on its own, raw kept; a non-object answer is Undecodable. */
  const record = <A>(call: Call, schema: Schema.Decoder<A>) =>
    Effect.flatMap(send(call), (reply) =>
      Predicate.isObject(reply.body) && !Array.isArray(reply.body)
        ? Effect.succeed<Received<A>>({ raw: reply.body, record: decodeRecord(schema, reply.body) })
        : Effect.fail(
            error(call, 1, new Undecodable({ status: reply.status, malformed: false, detail: "expected an object" }))
          )
    )

  /** A value the caller needs whole (`me`, the subscription): decoding failure fails the call. */
  const strict = <A>(call: Call, schema: Schema.Decoder<A>) =>
    Effect.flatMap(send(call), (reply) =>
      Schema.decodeUnknownEffect(schema)(reply.body).pipe(
        Effect.mapError((issue) =>
          error(
            call,
            1,
            new Undecodable({
              status: reply.status,
              malformed: false,
              detail: describeIssue(issue.issue, { values: false })
            })
          )
        )
      )
    )

  const list = <A>(
    operation: string,
    resource: string,
    schema: Schema.Decoder<A>,
    query: PageQuery | undefined,
    filters: Readonly<Record<string, string | undefined>>,
    priority: Priority
  ) => {
    const { page, per_page } = pageParams(query)
    const call: Call = {
      operation,
      method: "GET",
      path: `/v1/${resource}`,
      query: { ...filters, page: String(page), per_page: String(per_page) },
      priority
    }
    return Effect.flatMap(send(call), (reply) =>
      Schema.decodeUnknownEffect(PageEnvelope)(reply.body).pipe(
        Effect.map((envelope): ListPage<A> => ({
          resource,
          page,
          pagination: envelope.pagination,
          data: envelope.data,
          schema
        })),
        Effect.mapError((issue) =>
          error(
            call,
            1,
            new Undecodable({
              status: reply.status,
              malformed: false,
              detail: describeIssue(issue.issue, { values: false })
            })
          )
        )
      )
    )
  }

  const me = Effect.fn("CrmClient.me")(function* (options?: CallOptions) {
    const priority = yield* priorityOf(options, "interactive")
    return yield* strict({ operation: "CrmClient.me", method: "GET", path: "/v1/me", priority }, Models.Me)
  })

  const access = Effect.fn("CrmClient.access")(function* (options?: CallOptions) {
    const user = yield* me(options)
    return {
      connection: connection.name,
      userId: user.id,
      authType: user.api_access.auth_type,
      scope: user.api_access.scope,
      canWrite: user.api_access.can_write
    } satisfies Access
  })

  const listBooks = Effect.fn("CrmClient.listBooks")(function* (query?: PageQuery, options?: CallOptions) {
    const priority = yield* priorityOf(options, "bulk")
    return yield* list("CrmClient.listBooks", "books", Models.Book, query, {}, priority)
  })

  const subscribeWebhooks = Effect.fn("CrmClient.subscribeWebhooks")(function* (options?: WriteOptions) {
    const priority = yield* priorityOf(options, "interactive")
    return yield* strict(
      {
        operation: "CrmClient.subscribeWebhooks",
        method: "POST",
        path: "/v1/webhook_subscription",
        priority,
        ...(options?.idempotencyKey === undefined ? {} : { idempotencyKey: options.idempotencyKey })
      },
      Models.WebhookSubscription
    )
  })

  const unsubscribeWebhooks = Effect.fn("CrmClient.unsubscribeWebhooks")(function* (options?: CallOptions) {
    const priority = yield* priorityOf(options, "interactive")
    yield* send({
      operation: "CrmClient.unsubscribeWebhooks",
      method: "DELETE",
      path: "/v1/webhook_subscription",
      priority,
      empty: true
    })
  })

  /** Validates a write body against its schema before anything is sent (E.164 phones and the like). */
  const writeBody = <S extends Schema.Codec<unknown, unknown>>(operation: string, schema: S, body: S["Type"]) =>
    Schema.encodeUnknownEffect(schema)(body).pipe(
      Effect.mapError((issue) => refuse(operation, describeIssue(issue.issue, { values: false })))
    )

  /** `POST` of a create body (spec §4): validated first, sent with the call's idempotency key. */
  const create = <S extends Schema.Codec<unknown, unknown>, A>(
    operation: string,
    path: string,
    bodySchema: S,
    recordSchema: Schema.Decoder<A>
  ) =>
    Effect.fn(operation)(function* (body: S["Type"], options?: WriteOptions) {
      const priority = yield* priorityOf(options, "interactive")
      const encoded = yield* writeBody(operation, bodySchema, body)
      return yield* record(
        {
          operation,
          method: "POST",
          path,
          body: encoded,
          priority,
          ...(options?.idempotencyKey === undefined ? {} : { idempotencyKey: options.idempotencyKey }),
          ...(options?.sendBy === undefined ? {} : { sendBy: options.sendBy }),
          ...(options?.retryServerErrors === undefined ? {} : { retryServerErrors: options.retryServerErrors })
        },
        recordSchema
      )
    })

  const createContact = create("CrmClient.createContact", "/v1/contacts", Models.ContactCreate, Models.Contact)
  const createProspect = create("CrmClient.createProspect", "/v1/prospects", Models.ProspectCreate, Models.Prospect)

  const listBusinesses = Effect.fn("CrmClient.listBusinesses")(function* (
    query?: BusinessQuery,
    options?: CallOptions
  ) {
    // A poll (updated_since) is the incremental class's work; a listing without it is a crawl.
    const priority = yield* priorityOf(options, query?.updated_since === undefined ? "bulk" : "incremental")
    return yield* list(
      "CrmClient.listBusinesses",
      "businesses",
      Models.Business,
      query,
      {
        book_id: query?.book_id,
        name: query?.name,
        updated_since: query?.updated_since === undefined ? undefined : DateTime.formatIso(query.updated_since)
      },
      priority
    )
  })

  const listProjectTemplates = Effect.fn("CrmClient.listProjectTemplates")(function* (
    query?: ProjectTemplateQuery,
    options?: CallOptions
  ) {
    const priority = yield* priorityOf(options, "bulk")
    return yield* list(
      "CrmClient.listProjectTemplates",
      "project_templates",
      Models.ProjectTemplate,
      query,
      { book_id: query?.book_id, projectable_kind: query?.projectable_kind },
      priority
    )
  })

  const listAnnuityContracts = Effect.fn("CrmClient.listAnnuityContracts")(function* (
    query?: PageQuery,
    options?: CallOptions
  ) {
    const priority = yield* priorityOf(options, "bulk")
    return yield* list(
      "CrmClient.listAnnuityContracts",
      "annuity_contracts",
      Models.AnnuityContract,
      query,
      {},
      priority
    )
  })

  const listFinancialAccounts = Effect.fn("CrmClient.listFinancialAccounts")(function* (
    query?: PageQuery,
    options?: CallOptions
  ) {
    const priority = yield* priorityOf(options, "bulk")
    return yield* list(
      "CrmClient.listFinancialAccounts",
      "financial_accounts",
      Models.FinancialAccount,
      query,
      {},
      priority
    )
  })

  /** A read of one record by path; ids that are not usable path segments are refused unsent. */
  const read = <A>(
    operation: string,
    segments: ReadonlyArray<string>,
    recordId: string,
    schema: Schema.Decoder<A>,
    options: CallOptions | undefined
  ) =>
    Effect.gen(function* () {
      const priority = yield* priorityOf(options, "interactive")
      const encoded = Option.all(segments.map((part, index) => (index % 2 === 1 ? segment(part) : Option.some(part))))
      if (Option.isNone(encoded)) return yield* refuse(operation, "an id is empty, '.' or '..'", recordId)
      return yield* record(
        { operation, method: "GET", path: `/v1/${encoded.value.join("/")}`, recordId, priority },
        schema
      )
    })

  const getMeeting = Effect.fn("CrmClient.getMeeting")(function* (id: string, options?: CallOptions) {
    return yield* read("CrmClient.getMeeting", ["meetings", id], id, Models.Meeting, options)
  })

  const getTranscript = Effect.fn("CrmClient.getTranscript")(function* (meetingId: string, options?: CallOptions) {
    return yield* read(
      "CrmClient.getTranscript",
      ["meetings", meetingId, "transcript"],
      meetingId,
      Models.MeetingTranscript,
      options
    )
  })

  const getTask = Effect.fn("CrmClient.getTask")(function* (id: string, options?: CallOptions) {
    return yield* read("CrmClient.getTask", ["tasks", id], id, Models.Task, options)
  })

  const parentPath: Record<NoteParent, string> = {
    household: "households",
    contact: "contacts",
    business: "businesses"
  }

  const getNote = Effect.fn("CrmClient.getNote")(function* (
    parent: NoteParent,
    parentId: string,
    id: string,
    options?: CallOptions
  ) {
    return yield* read("CrmClient.getNote", [parentPath[parent], parentId, "notes", id], id, Models.Note, options)
  })

  return CrmClient.of({
    connection,
    get buckets() {
      return buckets
    },
    me,
    access,
    listBooks,
    subscribeWebhooks,
    unsubscribeWebhooks,
    createContact,
    createProspect,
    listBusinesses,
    listProjectTemplates,
    listAnnuityContracts,
    listFinancialAccounts,
    getMeeting,
    getTranscript,
    getTask,
    getNote,
    getHouseholdNote: (householdId, id, options) => getNote("household", householdId, id, options),
    getContactNote: (contactId, id, options) => getNote("contact", contactId, id, options),
    getBusinessNote: (businessId, id, options) => getNote("business", businessId, id, options),
    paginate: crawl
  })
})

/** The wait a 429 asked for, as a Duration the budget can clamp (negative becomes zero, then 1 s). */
const retryAfterDuration = (ms: number | undefined) =>
  ms === undefined || !Number.isFinite(ms) ? undefined : Duration.millis(Math.max(0, ms))
