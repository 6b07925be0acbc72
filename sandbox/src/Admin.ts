/**
 * The typed, in-process admin handle: everything the `/_sandbox` HTTP API offers, as Effects a
 * test can call directly. It composes the other services (credentials, webhooks, data actions,
 * logs, faults, the clock) and renders results in the same snake_case JSON the HTTP admin API
 * returns, so both are documented once.
 */
import { Context, Duration, Effect, Layer, Option } from "effect"
import { SandboxActions } from "./Actions.ts"
import {
  type OAuthApp,
  type PersonalToken,
  SandboxAuth,
  type TokenResponse,
  type AppPatch,
  type CreateAppInput,
  type CreatePatInput
} from "./Auth.ts"
import { type ApiError, badRequest, notFound } from "./errors.ts"
import { type FaultRule, type FaultRuleInput, SandboxFaults } from "./Faults.ts"
import type { World } from "./World.ts"
import { SandboxIdempotency } from "./Idempotency.ts"
import { parseDuration } from "./Durations.ts"
import { type RateLimits, type RateLimitsInput, SandboxConfig } from "./Options.ts"
import { type BucketState, type CotenantSpread, SandboxRateLimiter } from "./RateLimiter.ts"
import { type RequestFilter, type RequestLogEntry, SandboxRequestLog } from "./RequestLog.ts"
import { iso, SandboxClock } from "./SandboxClock.ts"
import { companyOrdinal, SandboxStore } from "./Store.ts"
import {
  type DeliveryFilter,
  type DeliveryRecord,
  type Endpoint,
  type EventType,
  type MessageRecord,
  SandboxWebhooks,
  type Subscription
} from "./Webhooks.ts"

export interface TokenInfo {
  readonly id: string
  readonly token: string
  readonly user_id: string
  readonly company_id: string
  readonly can_write: boolean
  readonly label: string
  readonly revoked: boolean
}

export interface AppInfo {
  readonly client_id: string
  readonly client_secret: string
  readonly name: string
  readonly redirect_uris: ReadonlyArray<string>
  readonly owner_company_id: string
  readonly mode: "sandbox" | "production"
  readonly enabled: boolean
  readonly scope: string
}

export interface EndpointInfo {
  readonly id: string
  readonly client_id: string
  readonly url: string
  readonly secret: string
  readonly event_types: ReadonlyArray<string>
  readonly enabled: boolean
  readonly created_at: string
}

export interface SubscriptionInfo {
  readonly id: string
  readonly client_id: string
  readonly user_id: string
  readonly company_id: string
  readonly created_at: string
}

export interface ConnectionInput {
  readonly clientId: string
  readonly userId: string
  readonly companyId: string
}

export type RecordKind =
  | "households"
  | "contacts"
  | "prospects"
  | "clients"
  | "businesses"
  | "annuity_contracts"
  | "financial_accounts"
  | "meetings"
  | "tasks"
  | "notes"

export const RECORD_KINDS: ReadonlyArray<RecordKind> = [
  "households",
  "contacts",
  "prospects",
  "clients",
  "businesses",
  "annuity_contracts",
  "financial_accounts",
  "meetings",
  "tasks",
  "notes"
]

/** The world at a glance: who exists, which books, the bootstrap credentials, record counts. */
export interface SandboxState {
  readonly now: string
  readonly clock_offset_ms: number
  readonly seed: number
  readonly companies: ReadonlyArray<{ readonly id: string; readonly name: string; readonly partner_own: boolean }>
  readonly users: ReadonlyArray<{
    readonly id: string
    readonly email: string
    readonly first_name: string
    readonly last_name: string
    readonly active: boolean
    readonly company_ids: ReadonlyArray<string>
  }>
  readonly books: ReadonlyArray<{
    readonly id: string
    readonly name: string
    readonly company_id: string
    readonly user_ids: ReadonlyArray<string>
    readonly team_ids: ReadonlyArray<string>
  }>
  readonly teams: ReadonlyArray<{ readonly id: string; readonly name: string; readonly company_id: string }>
  readonly tags: ReadonlyArray<{ readonly id: string; readonly name: string; readonly company_id: string }>
  readonly custom_fields: World["customFields"]
  readonly counts: Readonly<Record<RecordKind | "project_templates", number>>
  readonly credentials: {
    readonly personal_access_token: TokenInfo
    readonly oauth_app: AppInfo
  }
}

const collectionOf = (world: World, kind: RecordKind) => {
  switch (kind) {
    case "households":
      return world.households
    case "contacts":
      return world.contacts
    case "prospects":
      return world.prospects
    case "clients":
      return world.clients
    case "businesses":
      return world.businesses
    case "annuity_contracts":
      return world.annuityContracts
    case "financial_accounts":
      return world.financialAccounts
    case "meetings":
      return world.meetings
    case "tasks":
      return world.tasks
    case "notes":
      return world.notes
  }
}

const companyId = (world: World, ordinal: number) => world.companies[ordinal]!.id

const endpointInfo = (endpoint: Endpoint): EndpointInfo => ({
  id: endpoint.id,
  client_id: endpoint.clientId,
  url: endpoint.url,
  secret: endpoint.secret,
  event_types: endpoint.eventTypes,
  enabled: endpoint.enabled,
  created_at: iso(endpoint.createdAt)
})

const tokenInfo = (world: World, pat: PersonalToken): TokenInfo => ({
  id: pat.id,
  token: pat.token,
  user_id: pat.userId,
  company_id: companyId(world, pat.company),
  can_write: pat.canWrite,
  label: pat.label,
  revoked: pat.revoked
})

const appInfo = (world: World, app: OAuthApp): AppInfo => ({
  client_id: app.clientId,
  client_secret: app.clientSecret,
  name: app.name,
  redirect_uris: app.redirectUris,
  owner_company_id: companyId(world, app.ownerCompany),
  mode: app.mode,
  enabled: app.enabled,
  scope: app.scope
})

const subscriptionInfo = (world: World, subscription: Subscription): SubscriptionInfo => ({
  id: subscription.id,
  client_id: subscription.clientId,
  user_id: subscription.userId,
  company_id: companyId(world, subscription.company),
  created_at: iso(subscription.createdAt)
})

type AdminService = SandboxAdmin["Service"]

/** The services the admin handle composes. */
interface AdminDeps {
  readonly options: SandboxConfig["Service"]
  readonly clock: SandboxClock["Service"]
  readonly store: SandboxStore["Service"]
  readonly auth: SandboxAuth["Service"]
  readonly webhooks: SandboxWebhooks["Service"]
  readonly limiter: SandboxRateLimiter["Service"]
  readonly idempotency: SandboxIdempotency["Service"]
  readonly faults: SandboxFaults["Service"]
  readonly requestLog: SandboxRequestLog["Service"]
  readonly actions: SandboxActions["Service"]
}

/** The world at a glance, rendered for `GET /_sandbox`. */
export const sandboxState = (
  world: World,
  bootstrap: { readonly pat: PersonalToken; readonly app: OAuthApp },
  clock: { readonly now: number; readonly offsetMs: number; readonly seed: number }
): SandboxState => ({
  now: iso(clock.now),
  clock_offset_ms: clock.offsetMs,
  seed: clock.seed,
  companies: world.companies.map((company) => ({
    id: company.id,
    name: company.name,
    partner_own: company.ordinal === 0
  })),
  users: world.users.map((user) => ({
    id: user.id,
    email: user.email,
    first_name: user.first_name,
    last_name: user.last_name,
    active: user.active,
    company_ids: user.companies.map((ordinal) => companyId(world, ordinal))
  })),
  books: world.books.map((book) => ({
    id: book.id,
    name: book.name,
    company_id: companyId(world, book.company),
    user_ids: [...book.members].toSorted(),
    team_ids: book.teams
  })),
  teams: world.teams.map((team) => ({ id: team.id, name: team.name, company_id: companyId(world, team.company) })),
  tags: world.tags.flatMap((tags, ordinal) =>
    tags.map((tag) => ({ id: tag.id, name: tag.name, company_id: companyId(world, ordinal) }))
  ),
  custom_fields: world.customFields,
  counts: {
    ...(Object.fromEntries(RECORD_KINDS.map((kind) => [kind, collectionOf(world, kind).totalCount] as const)) as Record<
      RecordKind,
      number
    >),
    project_templates: world.templates.length
  },
  credentials: { personal_access_token: tokenInfo(world, bootstrap.pat), oauth_app: appInfo(world, bootstrap.app) }
})

const state = (deps: AdminDeps) =>
  Effect.gen(function* () {
    const world = yield* deps.store.world
    const bootstrap = yield* deps.auth.bootstrap
    const now = yield* deps.clock.now
    const offsetMs = yield* deps.clock.offsetMs
    return sandboxState(world, bootstrap, { now, offsetMs, seed: deps.options.seed })
  })

const reset = (deps: AdminDeps) =>
  Effect.gen(function* () {
    yield* deps.webhooks.reset
    yield* deps.store.reset
    yield* deps.auth.reset
    yield* deps.limiter.reset
    yield* deps.idempotency.reset
    yield* deps.faults.clear
    yield* deps.requestLog.clear
    yield* deps.clock.reset
  }).pipe(Effect.withSpan("SandboxAdmin.reset"))

const advanceClock = Effect.fn("SandboxAdmin.advanceClock")(function* (
  clock: SandboxClock["Service"],
  by: Duration.Input | string
) {
  const duration = parseDuration(by)
  if (Option.isNone(duration)) return yield* badRequest(`not a duration: ${String(by)}`, "invalid_request")
  const offset = yield* clock.advance(Duration.toMillis(duration.value))
  return { now: iso(yield* clock.now), offset_ms: offset }
})

const records = Effect.fn("SandboxAdmin.records")(function* (
  store: SandboxStore["Service"],
  kind: RecordKind,
  recordOptions: { readonly bookId?: string | undefined; readonly limit?: number | undefined; readonly offset?: number }
) {
  const world = yield* store.world
  const collection = collectionOf(world, kind)
  let books = world.books.map((book) => book.ordinal)
  if (recordOptions.bookId !== undefined) {
    const book = world.booksById.get(recordOptions.bookId)
    if (book === undefined) return yield* notFound(`book ${recordOptions.bookId} not found`)
    books = [book.ordinal]
  }
  const page = collection.list({ books, offset: recordOptions.offset ?? 0, limit: recordOptions.limit ?? 100 })
  return page.indexes.map((index) => collection.get(index)!)
})

const userById = Effect.fnUntraced(function* (store: SandboxStore["Service"], userId: string) {
  const user = (yield* store.world).usersById.get(userId)
  if (user === undefined) return yield* notFound(`user ${userId} not found`)
  return user
})

/** The book, once the user is known to be in the book's company. */
const membership = Effect.fnUntraced(function* (store: SandboxStore["Service"], bookId: string, userId: string) {
  const world = yield* store.world
  const book = world.booksById.get(bookId)
  if (book === undefined) return yield* notFound(`book ${bookId} not found`)
  const user = yield* userById(store, userId)
  if (!user.companies.includes(book.company)) {
    return yield* badRequest(`user ${userId} is not in the book's company`, "invalid_request")
  }
  return book
})

const connectionKey = Effect.fnUntraced(function* (store: SandboxStore["Service"], input: ConnectionInput) {
  const world = yield* store.world
  const company = companyOrdinal(world, input.companyId)
  if (company === undefined) return yield* notFound(`company ${input.companyId} not found`)
  return { clientId: input.clientId, userId: input.userId, company }
})

/** Tokens, apps and connections, rendered in the admin API's snake_case. */
const credentialMethods = ({ store, auth, webhooks }: AdminDeps) => {
  const withWorld = <A>(f: (world: World) => A) => Effect.map(store.world, f)
  return {
    createToken: (input) => Effect.flatMap(auth.createPat(input), (pat) => withWorld((world) => tokenInfo(world, pat))),
    setTokenWrite: (id, canWrite) =>
      Effect.flatMap(auth.setPatWrite(id, canWrite), (pat) => withWorld((world) => tokenInfo(world, pat))),
    revokeToken: auth.revokePat,
    tokens: Effect.flatMap(auth.pats, (pats) => withWorld((world) => pats.map((pat) => tokenInfo(world, pat)))),
    registerApp: (input) => Effect.flatMap(auth.createApp(input), (app) => withWorld((world) => appInfo(world, app))),
    updateApp: (clientId, patch) =>
      Effect.flatMap(auth.updateApp(clientId, patch), (app) => withWorld((world) => appInfo(world, app))),
    rotateAppSecret: (clientId) =>
      Effect.flatMap(auth.rotateSecret(clientId), (app) => withWorld((world) => appInfo(world, app))),
    deleteApp: Effect.fn("SandboxAdmin.deleteApp")(function* (clientId: string) {
      yield* auth.deleteApp(clientId)
      yield* webhooks.removeApp(clientId)
    }),
    apps: Effect.flatMap(auth.apps, (apps) => withWorld((world) => apps.map((app) => appInfo(world, app)))),
    setOAuthApprover: auth.setApprover,
    connect: auth.connect,
    disconnect: Effect.fn("SandboxAdmin.disconnect")(function* (input: ConnectionInput) {
      const key = yield* connectionKey(store, input)
      yield* auth.disconnect(key)
      yield* webhooks.unsubscribe(key)
    })
  } satisfies Partial<AdminService>
}

/** Users' activation and book access. */
const accessMethods = ({ store }: AdminDeps) =>
  ({
    deactivateUser: Effect.fn("SandboxAdmin.deactivateUser")(function* (userId: string) {
      const user = yield* userById(store, userId)
      user.active = false
    }),
    activateUser: Effect.fn("SandboxAdmin.activateUser")(function* (userId: string) {
      const user = yield* userById(store, userId)
      user.active = true
    }),
    revokeBookAccess: Effect.fn("SandboxAdmin.revokeBookAccess")(function* (bookId: string, userId: string) {
      const book = yield* membership(store, bookId, userId)
      book.members.delete(userId)
    }),
    grantBookAccess: Effect.fn("SandboxAdmin.grantBookAccess")(function* (bookId: string, userId: string) {
      const book = yield* membership(store, bookId, userId)
      book.members.add(userId)
    })
  }) satisfies Partial<AdminService>

/** Endpoints, subscriptions and the message and delivery logs. */
const webhookMethods = ({ store, webhooks }: AdminDeps) =>
  ({
    registerEndpoint: (input) => Effect.map(webhooks.registerEndpoint(input), endpointInfo),
    updateEndpoint: (id, patch) => Effect.map(webhooks.updateEndpoint(id, patch), endpointInfo),
    removeEndpoint: webhooks.removeEndpoint,
    endpoints: Effect.map(webhooks.endpoints, (endpoints) => endpoints.map(endpointInfo)),
    subscriptions: Effect.flatMap(webhooks.subscriptions, (subscriptions) =>
      Effect.map(store.world, (world) => subscriptions.map((subscription) => subscriptionInfo(world, subscription)))
    ),
    flushDebounce: webhooks.flushDebounce,
    messages: webhooks.messages,
    deliveries: webhooks.deliveries,
    clearDeliveries: webhooks.clearLogs,
    lastDeliverySeq: webhooks.lastDeliverySeq
  }) satisfies Partial<AdminService>

/** The request log, fault rules and rate limits, passed through. */
const logAndLimitMethods = ({ requestLog, faults, limiter }: AdminDeps) =>
  ({
    requests: requestLog.entries,
    servedContents: requestLog.servedContents,
    lastRequestSeq: requestLog.lastSeq,
    clearRequests: requestLog.clear,
    addFault: faults.add,
    removeFault: faults.remove,
    faults: faults.list,
    clearFaults: faults.clear,
    rateLimits: limiter.buckets,
    resetRateLimits: limiter.reset,
    setCotenant: limiter.setCotenant,
    chargeRateLimit: limiter.charge,
    setRateLimits: limiter.setLimits
  }) satisfies Partial<AdminService>

export class SandboxAdmin extends Context.Service<
  SandboxAdmin,
  {
    readonly state: Effect.Effect<SandboxState>
    /** Back to the freshly started state: data, credentials, subscriptions, logs, faults, clock. */
    readonly reset: Effect.Effect<void>
    advanceClock(
      by: Duration.Input | string
    ): Effect.Effect<{ readonly now: string; readonly offset_ms: number }, ApiError>
    /** Stored records of a kind (internal shape, all books), for tests to pick ids from. */
    records(
      kind: RecordKind,
      options?: { readonly bookId?: string | undefined; readonly limit?: number | undefined; readonly offset?: number }
    ): Effect.Effect<ReadonlyArray<unknown>, ApiError>
    createToken(input: CreatePatInput): Effect.Effect<TokenInfo, ApiError>
    setTokenWrite(id: string, canWrite: boolean): Effect.Effect<TokenInfo, ApiError>
    revokeToken(id: string): Effect.Effect<void, ApiError>
    readonly tokens: Effect.Effect<ReadonlyArray<TokenInfo>>
    registerApp(input: CreateAppInput): Effect.Effect<AppInfo, ApiError>
    updateApp(clientId: string, patch: AppPatch): Effect.Effect<AppInfo, ApiError>
    rotateAppSecret(clientId: string): Effect.Effect<AppInfo, ApiError>
    /** Deletes the app: its tokens stop working, its subscriptions and endpoints are removed (§3). */
    deleteApp(clientId: string): Effect.Effect<void, ApiError>
    readonly apps: Effect.Effect<ReadonlyArray<AppInfo>>
    setOAuthApprover(userId: string): Effect.Effect<void, ApiError>
    /** Issues tokens for a connection without the browser round trip. */
    connect(input: ConnectionInput): Effect.Effect<TokenResponse, ApiError>
    /** Administrative disconnect: revokes the connection's tokens and removes its subscription (§3). */
    disconnect(input: ConnectionInput): Effect.Effect<void, ApiError>
    deactivateUser(userId: string): Effect.Effect<void, ApiError>
    activateUser(userId: string): Effect.Effect<void, ApiError>
    revokeBookAccess(bookId: string, userId: string): Effect.Effect<void, ApiError>
    grantBookAccess(bookId: string, userId: string): Effect.Effect<void, ApiError>
    registerEndpoint(input: {
      readonly clientId: string
      readonly url: string
      readonly secret?: string | undefined
      readonly eventTypes?: ReadonlyArray<EventType> | undefined
    }): Effect.Effect<EndpointInfo, ApiError>
    updateEndpoint(
      id: string,
      patch: {
        readonly url?: string | undefined
        readonly enabled?: boolean | undefined
        readonly eventTypes?: ReadonlyArray<EventType> | undefined
      }
    ): Effect.Effect<EndpointInfo, ApiError>
    removeEndpoint(id: string): Effect.Effect<void, ApiError>
    readonly endpoints: Effect.Effect<ReadonlyArray<EndpointInfo>>
    readonly subscriptions: Effect.Effect<ReadonlyArray<SubscriptionInfo>>
    /** Sends every pending debounced `client.updated` now. */
    readonly flushDebounce: Effect.Effect<void>
    messages(filter?: DeliveryFilter): Effect.Effect<ReadonlyArray<MessageRecord>>
    deliveries(filter?: DeliveryFilter): Effect.Effect<ReadonlyArray<DeliveryRecord>>
    readonly clearDeliveries: Effect.Effect<void>
    requests(filter?: RequestFilter): Effect.Effect<ReadonlyArray<RequestLogEntry>>
    /** The contents the request log's `served` entries number (option `recordServed`), as JSON text. */
    readonly servedContents: Effect.Effect<ReadonlyArray<string>>
    readonly lastRequestSeq: Effect.Effect<number>
    readonly lastDeliverySeq: Effect.Effect<number>
    readonly clearRequests: Effect.Effect<void>
    addFault(rule: FaultRuleInput): Effect.Effect<FaultRule>
    removeFault(id: string): Effect.Effect<void, ApiError>
    readonly faults: Effect.Effect<ReadonlyArray<FaultRule>>
    readonly clearFaults: Effect.Effect<void>
    readonly rateLimits: Effect.Effect<ReadonlyArray<BucketState>>
    readonly resetRateLimits: Effect.Effect<void>
    /** Other consumers of a bucket: `perWindow` requests of each window, spread evenly (0 removes). */
    setCotenant(bucket: string, perWindow: number, spread?: CotenantSpread): Effect.Effect<void>
    /** A one-off foreign charge to the bucket's current window. */
    chargeRateLimit(bucket: string, amount: number): Effect.Effect<void>
    /** New per-window limits while running; the limits now in force. */
    setRateLimits(patch: RateLimitsInput): Effect.Effect<RateLimits>
    /** Data changes as the CRM's users would make them (with their webhook events). */
    readonly actions: SandboxActions["Service"]
  }
>()("crm-sync/sandbox/SandboxAdmin") {
  static readonly layer = Layer.effect(
    SandboxAdmin,
    Effect.gen(function* () {
      const deps: AdminDeps = {
        options: yield* SandboxConfig,
        clock: yield* SandboxClock,
        store: yield* SandboxStore,
        auth: yield* SandboxAuth,
        webhooks: yield* SandboxWebhooks,
        limiter: yield* SandboxRateLimiter,
        idempotency: yield* SandboxIdempotency,
        faults: yield* SandboxFaults,
        requestLog: yield* SandboxRequestLog,
        actions: yield* SandboxActions
      }
      return SandboxAdmin.of({
        state: state(deps),
        reset: reset(deps),
        advanceClock: (by) => advanceClock(deps.clock, by),
        records: (kind, recordOptions = {}) => records(deps.store, kind, recordOptions),
        ...credentialMethods(deps),
        ...accessMethods(deps),
        ...webhookMethods(deps),
        ...logAndLimitMethods(deps),
        actions: deps.actions
      })
    })
  )
}
