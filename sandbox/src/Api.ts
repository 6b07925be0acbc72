/**
 * The `/v1` endpoints of spec §4, one handler per table row. Handlers receive an authenticated,
 * rate-limited request (the server does that) and return plain `ApiResponse` data. Lists are
 * served from the collections' indexes, restricted to the books the credential's user can access
 * in the credential's company; records of other books answer 404 like unknown ids.
 */
import { Effect, Schema } from "effect"
import { type DriftTarget, type PersonInput, PersonInput as PersonSchema, ProspectInput } from "./ActionInputs.ts"
import { SandboxActions } from "./Actions.ts"
import type { Credential } from "./Auth.ts"
import type { Collection, ListQuery } from "./Collection.ts"
import { type ApiError, badRequest, forbidden, notFound, validationFailed } from "./errors.ts"
import type { World } from "./World.ts"
import { type ApiResponse, isoDateTimeParam, jsonObjectBody, listEnvelope, noContent, ok, pagination } from "./Http.ts"
import type { NotableType } from "./Records.ts"
import { iso } from "./SandboxClock.ts"
import { bookApi, meetingApi, noteApi, taskApi, templateApi, transcriptApi, userRef } from "./Serializers.ts"
import { accessibleBooks, canAccessBook, SandboxStore } from "./Store.ts"
import { SandboxWebhooks } from "./Webhooks.ts"

export interface ApiRequest {
  readonly method: string
  readonly path: string
  readonly params: Readonly<Record<string, string | undefined>>
  readonly query: URLSearchParams
  readonly headers: Readonly<Record<string, string | undefined>>
  readonly credential: Credential
  readonly body: string
}

export interface ApiRoute {
  readonly method: "GET" | "POST" | "DELETE" | "PATCH"
  readonly path: `/${string}`
  /** For list routes: the collection page-drift faults mutate. */
  readonly drift?: DriftTarget
  readonly handle: (request: ApiRequest) => Effect.Effect<ApiResponse, ApiError>
}

const schemaMessage = (error: Schema.SchemaError) => error.message.replace(/\n\s*/g, " ")

export const decodeBody = <S extends Schema.Constraint>(schema: S, value: unknown) =>
  Schema.decodeUnknownEffect(schema)(value, { errors: "all" }).pipe(
    Effect.mapError((error) => validationFailed(schemaMessage(error)))
  ) as Effect.Effect<S["Type"], ApiError, never>

const requireWrite = (credential: Credential) =>
  credential.canWrite
    ? Effect.void
    : Effect.fail(
        forbidden(
          "write_access_required",
          credential.kind === "personal"
            ? "this personal access token is read-only; enable write access on the token"
            : "this access token was not granted the write scope"
        )
      )

const requireOAuth = (credential: Credential) =>
  credential.kind === "oauth"
    ? Effect.succeed(credential)
    : Effect.fail(
        forbidden(
          "oauth_token_required",
          "webhook subscriptions need an OAuth access token; personal access tokens cannot create or remove subscriptions"
        )
      )

/** The books a list may draw from: all accessible ones, or the one `book_id` names. */
const booksFor = (world: World, request: ApiRequest) => {
  const visible = accessibleBooks(world, request.credential.userId, request.credential.company)
  const bookId = request.query.get("book_id")
  if (bookId === null || bookId === "") return Effect.succeed(visible)
  const book = visible.find((b) => b.id === bookId)
  return book === undefined ? Effect.fail(notFound(`book ${bookId} not found`)) : Effect.succeed([book])
}

/** A record of an accessible book, or 404. */
const visibleRecord = <Row extends { readonly id: string; readonly book_id: string }>(
  world: World,
  collection: Collection<Row>,
  credential: Credential,
  id: string | undefined
) => {
  const row = id === undefined ? undefined : collection.getById(id)
  return row === undefined || !canAccessBook(world, credential.userId, credential.company, row.book_id)
    ? Effect.fail(notFound(`${collection.kind} ${id} not found`))
    : Effect.succeed(row)
}

type Store = SandboxStore["Service"]

/** A paged list of a collection over the books the request may see; rows are served as stored. */
const list = <Row extends { readonly id: string }>(
  store: Store,
  pick: (world: World) => Collection<Row>,
  filters: (request: ApiRequest) => Effect.Effect<Partial<Pick<ListQuery, "updatedSince" | "namePrefix">>, ApiError>
) =>
  Effect.fnUntraced(function* (request: ApiRequest) {
    const world = yield* store.world
    const paging = yield* pagination(request.query)
    const books = yield* booksFor(world, request)
    const extra = yield* filters(request)
    const collection = pick(world)
    const page = collection.list({
      books: books.map((book) => book.ordinal),
      offset: (paging.page - 1) * paging.perPage,
      limit: paging.perPage,
      ...extra
    })
    return listEnvelope(
      page.indexes.map((index) => collection.get(index)!),
      page.total,
      paging
    )
  })

const noFilters = () => Effect.succeed({})

/** `GET /v1/businesses` filters: `updated_since` and a case-insensitive `name` prefix. */
const businessFilters = Effect.fnUntraced(function* (request: ApiRequest) {
  const updatedSince = yield* isoDateTimeParam(request.query, "updated_since")
  const name = request.query.get("name")
  return {
    ...(updatedSince === undefined ? {} : { updatedSince }),
    ...(name === null || name === "" ? {} : { namePrefix: name })
  }
})

const note = (store: Store, parent: NotableType, param: string) =>
  Effect.fnUntraced(function* (request: ApiRequest) {
    const world = yield* store.world
    const row = yield* visibleRecord(world, world.notes, request.credential, request.params.id)
    // notes are read only under their own parent (§4 rule 5)
    if (row.notable_type !== parent || row.notable_id !== request.params[param]) {
      return yield* notFound(
        `note ${request.params.id} not found under ${parent.toLowerCase()} ${request.params[param]}`
      )
    }
    return ok(noteApi(row))
  })

const create = <I extends PersonInput>(
  store: Store,
  schema: Schema.Codec<I, unknown>,
  run: (input: I) => Effect.Effect<unknown, ApiError>
) =>
  Effect.fnUntraced(function* (request: ApiRequest) {
    yield* requireWrite(request.credential)
    const body = yield* jsonObjectBody(request.headers["content-type"], request.body)
    const input = yield* decodeBody(schema, body)
    const world = yield* store.world
    if (!canAccessBook(world, request.credential.userId, request.credential.company, input.book_id)) {
      return yield* validationFailed(`book_id: ${input.book_id} is not a book this token can access`)
    }
    return ok(yield* run(input), 201)
  })

const me = (store: Store) =>
  Effect.fnUntraced(function* (request: ApiRequest) {
    const world = yield* store.world
    const user = world.usersById.get(request.credential.userId)!
    const credential = request.credential
    return ok({
      ...userRef(user),
      api_access: {
        auth_type: credential.kind === "personal" ? "personal_access_token" : "oauth",
        scope: credential.kind === "oauth" ? credential.scope : credential.canWrite ? "read write" : "read",
        can_write: credential.canWrite
      }
    })
  })

const books = (store: Store) =>
  Effect.fnUntraced(function* (request: ApiRequest) {
    const world = yield* store.world
    const paging = yield* pagination(request.query)
    const visible = accessibleBooks(world, request.credential.userId, request.credential.company)
    const offset = (paging.page - 1) * paging.perPage
    return listEnvelope(
      visible.slice(offset, offset + paging.perPage).map((book) => bookApi(world, book)),
      visible.length,
      paging
    )
  })

const subscribe = (webhooks: SandboxWebhooks["Service"]) =>
  Effect.fnUntraced(function* (request: ApiRequest) {
    const credential = yield* requireOAuth(request.credential)
    const { subscription, created } = yield* webhooks.subscribe({
      clientId: credential.clientId,
      userId: credential.userId,
      company: credential.company
    })
    return ok(
      { id: subscription.id, user_id: subscription.userId, created_at: iso(subscription.createdAt) },
      created ? 201 : 200
    )
  })

const unsubscribe = (webhooks: SandboxWebhooks["Service"]) =>
  Effect.fnUntraced(function* (request: ApiRequest) {
    const credential = yield* requireOAuth(request.credential)
    yield* webhooks.unsubscribe({
      clientId: credential.clientId,
      userId: credential.userId,
      company: credential.company
    })
    return noContent
  })

const projectTemplates = (store: Store) =>
  Effect.fnUntraced(function* (request: ApiRequest) {
    const world = yield* store.world
    const paging = yield* pagination(request.query)
    const kind = request.query.get("projectable_kind")
    if (kind !== null && kind !== "" && !["household", "contact", "business"].includes(kind)) {
      return yield* badRequest(`projectable_kind must be household, contact or business, got "${kind}"`)
    }
    const bookIds = new Set((yield* booksFor(world, request)).map((book) => book.id))
    // company-wide templates (book_id null) are usable for every book of the company (§4 rule 2)
    const templates = world.templates.filter(
      (template) =>
        template.company === request.credential.company &&
        (template.book_id === null || bookIds.has(template.book_id)) &&
        (kind === null || kind === "" || template.projectable_kind === kind)
    )
    const offset = (paging.page - 1) * paging.perPage
    return listEnvelope(templates.slice(offset, offset + paging.perPage).map(templateApi), templates.length, paging)
  })

const meeting = (store: Store) =>
  Effect.fnUntraced(function* (request: ApiRequest) {
    const world = yield* store.world
    return ok(meetingApi(world, yield* visibleRecord(world, world.meetings, request.credential, request.params.id)))
  })

const transcript = (store: Store) =>
  Effect.fnUntraced(function* (request: ApiRequest) {
    const world = yield* store.world
    return ok(transcriptApi(yield* visibleRecord(world, world.meetings, request.credential, request.params.meeting_id)))
  })

const task = (store: Store) =>
  Effect.fnUntraced(function* (request: ApiRequest) {
    const world = yield* store.world
    return ok(taskApi(world, yield* visibleRecord(world, world.tasks, request.credential, request.params.id)))
  })

/** The route table of spec §4. */
export const makeApiRoutes = Effect.gen(function* () {
  const store = yield* SandboxStore
  const actions = yield* SandboxActions
  const webhooks = yield* SandboxWebhooks
  const routes: ReadonlyArray<ApiRoute> = [
    { method: "GET", path: "/v1/me", handle: me(store) },
    { method: "GET", path: "/v1/books", handle: books(store) },
    { method: "POST", path: "/v1/webhook_subscription", handle: subscribe(webhooks) },
    { method: "DELETE", path: "/v1/webhook_subscription", handle: unsubscribe(webhooks) },
    {
      method: "POST",
      path: "/v1/contacts",
      handle: create(store, PersonSchema, (input) => actions.createContact(input))
    },
    {
      method: "POST",
      path: "/v1/prospects",
      handle: create(store, ProspectInput, (input) => actions.createProspect(input))
    },
    {
      method: "GET",
      path: "/v1/businesses",
      drift: "businesses",
      handle: list(store, (world) => world.businesses, businessFilters)
    },
    { method: "GET", path: "/v1/project_templates", handle: projectTemplates(store) },
    {
      method: "GET",
      path: "/v1/annuity_contracts",
      drift: "annuity_contracts",
      handle: list(store, (world) => world.annuityContracts, noFilters)
    },
    {
      method: "GET",
      path: "/v1/financial_accounts",
      drift: "financial_accounts",
      handle: list(store, (world) => world.financialAccounts, noFilters)
    },
    { method: "GET", path: "/v1/meetings/:id", handle: meeting(store) },
    { method: "GET", path: "/v1/meetings/:meeting_id/transcript", handle: transcript(store) },
    { method: "GET", path: "/v1/tasks/:id", handle: task(store) },
    { method: "GET", path: "/v1/households/:household_id/notes/:id", handle: note(store, "Household", "household_id") },
    { method: "GET", path: "/v1/contacts/:contact_id/notes/:id", handle: note(store, "Contact", "contact_id") },
    { method: "GET", path: "/v1/businesses/:business_id/notes/:id", handle: note(store, "Business", "business_id") }
  ]
  return routes
})
