/**
 * CrmClient: the only way crm-sync talks to the CRM API — one typed method per endpoint of spec §4,
 * for one configured connection.
 *
 * This module is the endpoint table: each method says its path, its default priority class and
 * the model its answer decodes to. Sending, retries, the rate budget and error classification are
 * CrmTransport's. List endpoints return `ListPage`s whose records stay raw until decoded one by one
 * (Pagination); single reads return the raw record beside its decoding.
 */
import * as Context from "effect/Context"
import * as DateTime from "effect/DateTime"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Predicate from "effect/Predicate"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { AppConfig, type Connection } from "../config/AppConfig.ts"
import type { BucketSpec, Priority } from "../budget/RateBudget.ts"
import { type CrmError, Undecodable } from "./CrmError.ts"
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
import { type Call, callError, type CrmTransport, makeTransport, refused, type Reply, segment } from "./CrmTransport.ts"

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

/** A token's access and the CRM's `Date` header (HTTP date, whole seconds) of the same answer. */
export interface Probe {
  readonly access: Access
  readonly date: string | undefined
}

export interface CrmClientShape {
  readonly connection: Connection
  /** The connection's three buckets of spec §8 (for budget status and ETAs). */
  readonly buckets: ReadonlyArray<BucketSpec>

  /** `GET /v1/me`. */
  readonly me: (options?: CallOptions) => Effect.Effect<Models.Me, CrmError>
  /** `GET /v1/me`, summarized: auth type and write access. */
  readonly access: (options?: CallOptions) => Effect.Effect<Access, CrmError>
  /** `GET /v1/me` summarized, with the CRM's clock when it answered (its `Date` header): `doctor`'s probe. */
  readonly probe: (options?: CallOptions) => Effect.Effect<Probe, CrmError>
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

/**
 * Why hand-written on `HttpClient` rather than derived from an `effect/http-api` definition: an
 * `HttpApiClient` decodes whole responses against the endpoint's schema, so one odd record would
 * fail its page, whereas the warehouse must keep it in `raw`; the budget, 429 bookkeeping, the
 * per-call idempotency key and the OAuth refresh need the call's context (priority, connection,
 * attempt), which a transport middleware does not see; and spec §7 leaves most error statuses
 * "not shown", so errors are classified by status (CrmTransport) rather than declared per
 * endpoint. The schemas are still shared: the models of `Models.ts` describe what every endpoint
 * returns.
 */
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
// How endpoints call and decode
// ---------------------------------------------------------------------------------------------

const priorityOf = (options: CallOptions | undefined, fallback: Priority) =>
  Effect.gen(function* () {
    const inScope = yield* CrmPriority
    return options?.priority ?? inScope ?? fallback
  })

export const pageParams = (query: PageQuery | undefined) => {
  const page = Math.max(1, Math.trunc(query?.page ?? 1))
  // spec §4 rule 1: 1..100; the server clamps too, this keeps the pagination we compute honest.
  const perPage = Math.min(MAX_PER_PAGE, Math.max(1, Math.trunc(query?.per_page ?? MAX_PER_PAGE)))
  return { page, per_page: perPage }
}

/** A 2xx answer that does not decode as the call needs it: the call fails as Undecodable. */
const notDecoded = (transport: CrmTransport, call: Call, reply: Reply) => (error: Schema.SchemaError) =>
  callError(
    transport.connection,
    call,
    1,
    new Undecodable({ status: reply.status, malformed: false, detail: describeIssue(error.issue, { values: false }) })
  )

/**
 * A single record: decoded on its own, raw kept beside its decoding, so the warehouse can keep a
 * record that does not decode; a non-object answer is Undecodable.
 */
const record = <A>(transport: CrmTransport, call: Call, schema: Schema.Decoder<A>) =>
  Effect.flatMap(transport.send(call), (reply) =>
    Predicate.isObject(reply.body) && !Array.isArray(reply.body)
      ? Effect.succeed<Received<A>>({ raw: reply.body, record: decodeRecord(schema, reply.body) })
      : Effect.fail(
          callError(
            transport.connection,
            call,
            1,
            new Undecodable({ status: reply.status, malformed: false, detail: "expected an object" })
          )
        )
  )

/** A value the caller needs whole (`me`, the subscription): decoding failure fails the call. */
const strict = <A>(transport: CrmTransport, call: Call, schema: Schema.Decoder<A>) =>
  Effect.flatMap(transport.send(call), (reply) =>
    Schema.decodeUnknownEffect(schema)(reply.body).pipe(Effect.mapError(notDecoded(transport, call, reply)))
  )

/** A list endpoint of spec §4: its resource, its record model, and what a query makes of it. */
interface Listing<Q extends PageQuery, A> {
  readonly operation: string
  /** The path below `/v1/`, e.g. `businesses`. */
  readonly resource: string
  readonly schema: Schema.Decoder<A>
  /** The query's filters besides the page (none by default). */
  readonly filters?: (query: Q | undefined) => Readonly<Record<string, string | undefined>>
  /** The default priority class (by default `bulk`: a listing is a crawl). */
  readonly priority?: (query: Q | undefined) => Priority
}

/** One page of a list, its records left raw (Pagination decodes them one by one). */
const list = <Q extends PageQuery, A>(
  transport: CrmTransport,
  listing: Listing<Q, A>,
  query: Q | undefined,
  priority: Priority
) => {
  const { page, per_page } = pageParams(query)
  const call: Call = {
    operation: listing.operation,
    method: "GET",
    path: `/v1/${listing.resource}`,
    query: { ...listing.filters?.(query), page: String(page), per_page: String(per_page) },
    priority
  }
  return Effect.flatMap(transport.send(call), (reply) =>
    Schema.decodeUnknownEffect(PageEnvelope)(reply.body).pipe(
      Effect.map((envelope): ListPage<A> => ({
        resource: listing.resource,
        page,
        pagination: envelope.pagination,
        data: envelope.data,
        schema: listing.schema
      })),
      Effect.mapError(notDecoded(transport, call, reply))
    )
  )
}

/** The method of a list endpoint: `(query?, options?)` → one page. */
const lister = <Q extends PageQuery, A>(transport: CrmTransport, listing: Listing<Q, A>) =>
  Effect.fn(listing.operation)(function* (query?: Q, options?: CallOptions) {
    const priority = yield* priorityOf(options, listing.priority?.(query) ?? "bulk")
    return yield* list(transport, listing, query, priority)
  })

/** A read of one record by path; ids that are not usable path segments are refused unsent. */
const read = <A>(
  transport: CrmTransport,
  operation: string,
  segments: ReadonlyArray<string>,
  recordId: string,
  schema: Schema.Decoder<A>,
  options: CallOptions | undefined
) =>
  Effect.gen(function* () {
    const priority = yield* priorityOf(options, "interactive")
    const encoded = Option.all(segments.map((part, index) => (index % 2 === 1 ? segment(part) : Option.some(part))))
    if (Option.isNone(encoded)) {
      return yield* refused(transport.connection, operation, "an id is empty, '.' or '..'", recordId)
    }
    return yield* record(
      transport,
      { operation, method: "GET", path: `/v1/${encoded.value.join("/")}`, recordId, priority },
      schema
    )
  })

/** The method of a read by one id; `path` makes the path's segments, ids at the odd places. */
const reader = <A>(
  transport: CrmTransport,
  operation: string,
  schema: Schema.Decoder<A>,
  path: (id: string) => ReadonlyArray<string>
) =>
  Effect.fn(operation)(function* (id: string, options?: CallOptions) {
    return yield* read(transport, operation, path(id), id, schema, options)
  })

/** Validates a write body against its schema before anything is sent (E.164 phones and the like). */
const writeBody = <S extends Schema.Codec<unknown, unknown>>(
  connection: Connection,
  operation: string,
  schema: S,
  body: S["Type"]
) =>
  Schema.encodeUnknownEffect(schema)(body).pipe(
    Effect.mapError((issue) => refused(connection, operation, describeIssue(issue.issue, { values: false })))
  )

/** The options of a write that travel with its call. */
const writeCall = (options: WriteOptions | undefined) => ({
  ...(options?.idempotencyKey === undefined ? {} : { idempotencyKey: options.idempotencyKey }),
  ...(options?.sendBy === undefined ? {} : { sendBy: options.sendBy }),
  ...(options?.retryServerErrors === undefined ? {} : { retryServerErrors: options.retryServerErrors })
})

/** `POST` of a create body (spec §4): validated first, sent with the call's idempotency key. */
const creator = <S extends Schema.Codec<unknown, unknown>, A>(
  transport: CrmTransport,
  operation: string,
  path: string,
  bodySchema: S,
  recordSchema: Schema.Decoder<A>
) =>
  Effect.fn(operation)(function* (body: S["Type"], options?: WriteOptions) {
    const priority = yield* priorityOf(options, "interactive")
    const encoded = yield* writeBody(transport.connection, operation, bodySchema, body)
    return yield* record(
      transport,
      { operation, method: "POST", path, body: encoded, priority, ...writeCall(options) },
      recordSchema
    )
  })

// ---------------------------------------------------------------------------------------------
// The endpoints
// ---------------------------------------------------------------------------------------------

const me = (transport: CrmTransport) =>
  Effect.fn("CrmClient.me")(function* (options?: CallOptions) {
    const priority = yield* priorityOf(options, "interactive")
    return yield* strict(transport, { operation: "CrmClient.me", method: "GET", path: "/v1/me", priority }, Models.Me)
  })

const accessOf = (connection: Connection, user: Models.Me): Access => ({
  connection: connection.name,
  userId: user.id,
  authType: user.api_access.auth_type,
  scope: user.api_access.scope,
  canWrite: user.api_access.can_write
})

const access = (connection: Connection, me: CrmClientShape["me"]) =>
  Effect.fn("CrmClient.access")(function* (options?: CallOptions) {
    return accessOf(connection, yield* me(options))
  })

const probe = (transport: CrmTransport) =>
  Effect.fn("CrmClient.probe")(function* (options?: CallOptions) {
    const priority = yield* priorityOf(options, "interactive")
    const call: Call = { operation: "CrmClient.probe", method: "GET", path: "/v1/me", priority }
    const reply = yield* transport.send(call)
    const user = yield* Schema.decodeUnknownEffect(Models.Me)(reply.body).pipe(
      Effect.mapError(notDecoded(transport, call, reply))
    )
    return { access: accessOf(transport.connection, user), date: reply.date } satisfies Probe
  })

const subscribeWebhooks = (transport: CrmTransport) =>
  Effect.fn("CrmClient.subscribeWebhooks")(function* (options?: WriteOptions) {
    const priority = yield* priorityOf(options, "interactive")
    return yield* strict(
      transport,
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

const unsubscribeWebhooks = (transport: CrmTransport) =>
  Effect.fn("CrmClient.unsubscribeWebhooks")(function* (options?: CallOptions) {
    const priority = yield* priorityOf(options, "interactive")
    yield* transport.send({
      operation: "CrmClient.unsubscribeWebhooks",
      method: "DELETE",
      path: "/v1/webhook_subscription",
      priority,
      empty: true
    })
  })

const businessFilters = (query: BusinessQuery | undefined) => ({
  book_id: query?.book_id,
  name: query?.name,
  updated_since: query?.updated_since === undefined ? undefined : DateTime.formatIso(query.updated_since)
})

/** A poll (updated_since) is the incremental class's work; a listing without it is a crawl. */
const pollOrCrawl = (query: BusinessQuery | undefined): Priority =>
  query?.updated_since === undefined ? "bulk" : "incremental"

const templateFilters = (query: ProjectTemplateQuery | undefined) => ({
  book_id: query?.book_id,
  projectable_kind: query?.projectable_kind
})

const parentPath: Record<NoteParent, string> = {
  household: "households",
  contact: "contacts",
  business: "businesses"
}

const getNote = (transport: CrmTransport) =>
  Effect.fn("CrmClient.getNote")(function* (parent: NoteParent, parentId: string, id: string, options?: CallOptions) {
    const path = [parentPath[parent], parentId, "notes", id]
    return yield* read(transport, "CrmClient.getNote", path, id, Models.Note, options)
  })

const makeClient = Effect.fnUntraced(function* (connection: Connection) {
  const transport = yield* makeTransport(connection)
  const getMe = me(transport)
  const getNoteOf = getNote(transport)
  return CrmClient.of({
    connection,
    get buckets() {
      return transport.buckets()
    },
    me: getMe,
    access: access(connection, getMe),
    probe: probe(transport),
    listBooks: lister(transport, { operation: "CrmClient.listBooks", resource: "books", schema: Models.Book }),
    subscribeWebhooks: subscribeWebhooks(transport),
    unsubscribeWebhooks: unsubscribeWebhooks(transport),
    createContact: creator(transport, "CrmClient.createContact", "/v1/contacts", Models.ContactCreate, Models.Contact),
    createProspect: creator(
      transport,
      "CrmClient.createProspect",
      "/v1/prospects",
      Models.ProspectCreate,
      Models.Prospect
    ),
    listBusinesses: lister(transport, {
      operation: "CrmClient.listBusinesses",
      resource: "businesses",
      schema: Models.Business,
      filters: businessFilters,
      priority: pollOrCrawl
    }),
    listProjectTemplates: lister(transport, {
      operation: "CrmClient.listProjectTemplates",
      resource: "project_templates",
      schema: Models.ProjectTemplate,
      filters: templateFilters
    }),
    listAnnuityContracts: lister(transport, {
      operation: "CrmClient.listAnnuityContracts",
      resource: "annuity_contracts",
      schema: Models.AnnuityContract
    }),
    listFinancialAccounts: lister(transport, {
      operation: "CrmClient.listFinancialAccounts",
      resource: "financial_accounts",
      schema: Models.FinancialAccount
    }),
    getMeeting: reader(transport, "CrmClient.getMeeting", Models.Meeting, (id) => ["meetings", id]),
    getTranscript: reader(transport, "CrmClient.getTranscript", Models.MeetingTranscript, (meetingId) => [
      "meetings",
      meetingId,
      "transcript"
    ]),
    getTask: reader(transport, "CrmClient.getTask", Models.Task, (id) => ["tasks", id]),
    getNote: getNoteOf,
    getHouseholdNote: (householdId, id, options) => getNoteOf("household", householdId, id, options),
    getContactNote: (contactId, id, options) => getNoteOf("contact", contactId, id, options),
    getBusinessNote: (businessId, id, options) => getNoteOf("business", businessId, id, options),
    paginate: crawl
  })
})
