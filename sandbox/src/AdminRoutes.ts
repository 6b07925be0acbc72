/**
 * The admin API over HTTP, under `/_sandbox`: a thin JSON skin over `SandboxAdmin`. Bodies are
 * read as JSON whatever their Content-Type (this API is a test tool, not the emulated one) and
 * decoded with the same schemas the in-process handle uses. README.md lists every route.
 */
import { Effect, Schema } from "effect"
import {
  CreateAnnuityContractInput,
  CreateBusinessInput,
  CreateClientInput,
  CreateFinancialAccountInput,
  CreateMeetingInput,
  CreateNoteInput,
  CreateTaskInput,
  PersonInput,
  ProspectInput,
  TranscriptInput,
  UpdateAnnuityContractInput,
  UpdateBusinessInput,
  UpdateClientInput,
  UpdateFinancialAccountInput,
  UpdateMeetingInput,
  UpdateNoteInput,
  UpdateTaskInput
} from "./ActionInputs.ts"
import { RECORD_KINDS, type RecordKind, SandboxAdmin } from "./Admin.ts"
import { decodeBody } from "./Api.ts"
import { type ApiError, badRequest, invalidJson, notFound } from "./errors.ts"
import { FaultRuleInput } from "./Faults.ts"
import { type ApiResponse, noContent, ok } from "./Http.ts"
import { EVENT_TYPES } from "./Webhooks.ts"

export interface AdminRequest {
  readonly params: Readonly<Record<string, string | undefined>>
  readonly query: URLSearchParams
  readonly body: string
}

export interface AdminRoute {
  readonly method: "GET" | "POST" | "PATCH" | "PUT" | "DELETE"
  readonly path: `/_sandbox${string}`
  readonly handle: (request: AdminRequest) => Effect.Effect<ApiResponse, ApiError>
}

const opt = Schema.optionalKey
const EventTypes = Schema.Array(Schema.Literals(EVENT_TYPES))

const TokenBody = Schema.Struct({
  user_id: Schema.String,
  company_id: opt(Schema.String),
  can_write: opt(Schema.Boolean),
  label: opt(Schema.String)
})
const TokenPatch = Schema.Struct({ can_write: Schema.Boolean })
const AppBody = Schema.Struct({
  name: opt(Schema.String),
  redirect_uris: opt(Schema.Array(Schema.String)),
  owner_company_id: opt(Schema.String),
  mode: opt(Schema.Literals(["sandbox", "production"])),
  scope: opt(Schema.String)
})
const AppPatch = Schema.Struct({
  enabled: opt(Schema.Boolean),
  mode: opt(Schema.Literals(["sandbox", "production"])),
  redirect_uris: opt(Schema.Array(Schema.String))
})
const ConnectionBody = Schema.Struct({ client_id: Schema.String, user_id: Schema.String, company_id: Schema.String })
const EndpointBody = Schema.Struct({
  client_id: Schema.String,
  url: Schema.String,
  secret: opt(Schema.String),
  event_types: opt(EventTypes)
})
const EndpointPatch = Schema.Struct({
  url: opt(Schema.String),
  enabled: opt(Schema.Boolean),
  event_types: opt(EventTypes)
})
const ClockBody = Schema.Struct({ by: Schema.Union([Schema.String, Schema.Number]) })
const ApproverBody = Schema.Struct({ user_id: Schema.String })

const parse = (body: string) =>
  body.trim() === ""
    ? Effect.succeed({} as unknown)
    : Effect.try({ try: () => JSON.parse(body) as unknown, catch: () => invalidJson("admin request body is not JSON") })

const Count = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))
const Positive = Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))
const CotenantInput = Schema.Struct({
  bucket: Schema.NonEmptyString,
  per_window: Count,
  spread: Schema.optionalKey(Schema.Literals(["even", "start"]))
})
const ChargeInput = Schema.Struct({ bucket: Schema.NonEmptyString, amount: Positive })
const LimitsInput = Schema.Struct({
  personal: Schema.optionalKey(
    Schema.Struct({
      token: Schema.optionalKey(Positive),
      company: Schema.optionalKey(Positive),
      ip: Schema.optionalKey(Positive)
    })
  ),
  oauth: Schema.optionalKey(
    Schema.Struct({
      user: Schema.optionalKey(Positive),
      app: Schema.optionalKey(Positive),
      ip: Schema.optionalKey(Positive)
    })
  )
})

const read = <S extends Schema.Constraint>(schema: S, request: AdminRequest) =>
  Effect.flatMap(parse(request.body), (value) => decodeBody(schema, value))

const param = (request: AdminRequest, name: string) => request.params[name] ?? ""

const optionalInt = (query: URLSearchParams, name: string) => {
  const raw = query.get(name)
  if (raw === null || raw === "") return Effect.succeed(undefined)
  return /^\d+$/.test(raw) ? Effect.succeed(Number(raw)) : Effect.fail(badRequest(`${name} must be an integer`))
}

const optionalString = (query: URLSearchParams, name: string) => query.get(name) ?? undefined

const created = (value: unknown) => ok(value, 201)

const none = () => noContent

const route = (
  method: AdminRoute["method"],
  path: AdminRoute["path"],
  handle: (request: AdminRequest) => Effect.Effect<ApiResponse, ApiError>
): AdminRoute => ({ method, path, handle })

/** A handler that decodes the JSON body with `schema`, runs `run` on it and answers with `respond`. */
const withBody =
  <S extends Schema.Constraint, A>(
    schema: S,
    run: (body: S["Type"], request: AdminRequest) => Effect.Effect<A, ApiError>,
    respond: (value: A) => ApiResponse
  ) =>
  (request: AdminRequest) =>
    Effect.flatMap(read(schema, request), (body) => Effect.map(run(body, request), respond))

/** A handler that runs `run` on the path parameter `name` and answers with `respond`. */
const withParam =
  <A>(name: string, run: (value: string) => Effect.Effect<A, ApiError>, respond: (value: A) => ApiResponse) =>
  (request: AdminRequest) =>
    Effect.map(run(param(request, name)), respond)

type Admin = SandboxAdmin["Service"]

const stateRoutes = (admin: Admin): ReadonlyArray<AdminRoute> => [
  route("GET", "/_sandbox", () => Effect.map(admin.state, ok)),
  route("POST", "/_sandbox/reset", () => Effect.as(admin.reset, noContent)),
  route(
    "POST",
    "/_sandbox/clock/advance",
    withBody(ClockBody, (body) => admin.advanceClock(body.by), ok)
  ),
  route("GET", "/_sandbox/records/:kind", (request) =>
    Effect.gen(function* () {
      const kind = param(request, "kind")
      if (!(RECORD_KINDS as ReadonlyArray<string>).includes(kind)) {
        return yield* notFound(`unknown record kind ${kind}; known: ${RECORD_KINDS.join(", ")}`)
      }
      return ok(
        yield* admin.records(kind as RecordKind, {
          bookId: optionalString(request.query, "book_id"),
          limit: yield* optionalInt(request.query, "limit"),
          offset: (yield* optionalInt(request.query, "offset")) ?? 0
        })
      )
    })
  )
]

const tokenRoutes = (admin: Admin): ReadonlyArray<AdminRoute> => [
  route("GET", "/_sandbox/tokens", () => Effect.map(admin.tokens, ok)),
  route(
    "POST",
    "/_sandbox/tokens",
    withBody(
      TokenBody,
      (body) =>
        admin.createToken({
          userId: body.user_id,
          companyId: body.company_id,
          canWrite: body.can_write,
          label: body.label
        }),
      created
    )
  ),
  route(
    "PATCH",
    "/_sandbox/tokens/:id",
    withBody(TokenPatch, (body, request) => admin.setTokenWrite(param(request, "id"), body.can_write), ok)
  ),
  route("DELETE", "/_sandbox/tokens/:id", withParam("id", admin.revokeToken, none))
]

/** OAuth apps, the signed-in user of the authorization step, and connections made without it. */
const appRoutes = (admin: Admin): ReadonlyArray<AdminRoute> => [
  route("GET", "/_sandbox/apps", () => Effect.map(admin.apps, ok)),
  route(
    "POST",
    "/_sandbox/apps",
    withBody(
      AppBody,
      (body) =>
        admin.registerApp({
          name: body.name,
          redirectUris: body.redirect_uris,
          ownerCompanyId: body.owner_company_id,
          mode: body.mode,
          scope: body.scope
        }),
      created
    )
  ),
  route(
    "PATCH",
    "/_sandbox/apps/:client_id",
    withBody(
      AppPatch,
      (body, request) =>
        admin.updateApp(param(request, "client_id"), {
          enabled: body.enabled,
          mode: body.mode,
          redirectUris: body.redirect_uris
        }),
      ok
    )
  ),
  route("POST", "/_sandbox/apps/:client_id/rotate_secret", withParam("client_id", admin.rotateAppSecret, ok)),
  route("DELETE", "/_sandbox/apps/:client_id", withParam("client_id", admin.deleteApp, none)),
  route(
    "POST",
    "/_sandbox/oauth/approver",
    withBody(ApproverBody, (body) => admin.setOAuthApprover(body.user_id), none)
  ),
  route(
    "POST",
    "/_sandbox/connections",
    withBody(
      ConnectionBody,
      (body) => admin.connect({ clientId: body.client_id, userId: body.user_id, companyId: body.company_id }),
      created
    )
  ),
  route(
    "POST",
    "/_sandbox/connections/disconnect",
    withBody(
      ConnectionBody,
      (body) => admin.disconnect({ clientId: body.client_id, userId: body.user_id, companyId: body.company_id }),
      none
    )
  )
]

const accessRoutes = (admin: Admin): ReadonlyArray<AdminRoute> => [
  route("POST", "/_sandbox/users/:id/deactivate", withParam("id", admin.deactivateUser, none)),
  route("POST", "/_sandbox/users/:id/activate", withParam("id", admin.activateUser, none)),
  route("DELETE", "/_sandbox/books/:book_id/users/:user_id", (request) =>
    Effect.as(admin.revokeBookAccess(param(request, "book_id"), param(request, "user_id")), noContent)
  ),
  route("PUT", "/_sandbox/books/:book_id/users/:user_id", (request) =>
    Effect.as(admin.grantBookAccess(param(request, "book_id"), param(request, "user_id")), noContent)
  )
]

const webhookRoutes = (admin: Admin): ReadonlyArray<AdminRoute> => [
  route("GET", "/_sandbox/endpoints", () => Effect.map(admin.endpoints, ok)),
  route(
    "POST",
    "/_sandbox/endpoints",
    withBody(
      EndpointBody,
      (body) =>
        admin.registerEndpoint({
          clientId: body.client_id,
          url: body.url,
          secret: body.secret,
          eventTypes: body.event_types
        }),
      created
    )
  ),
  route(
    "PATCH",
    "/_sandbox/endpoints/:id",
    withBody(
      EndpointPatch,
      (body, request) =>
        admin.updateEndpoint(param(request, "id"), {
          url: body.url,
          enabled: body.enabled,
          eventTypes: body.event_types
        }),
      ok
    )
  ),
  route("DELETE", "/_sandbox/endpoints/:id", withParam("id", admin.removeEndpoint, none)),
  route("GET", "/_sandbox/subscriptions", () => Effect.map(admin.subscriptions, ok)),
  route("POST", "/_sandbox/webhooks/flush", () => Effect.as(admin.flushDebounce, noContent)),
  route("GET", "/_sandbox/messages", (request) =>
    Effect.map(
      admin.messages({
        eventType: optionalString(request.query, "event_type"),
        messageId: optionalString(request.query, "message_id")
      }),
      ok
    )
  ),
  route("GET", "/_sandbox/deliveries", (request) =>
    Effect.gen(function* () {
      return ok(
        yield* admin.deliveries({
          eventType: optionalString(request.query, "event_type"),
          endpointId: optionalString(request.query, "endpoint_id"),
          messageId: optionalString(request.query, "message_id"),
          since: yield* optionalInt(request.query, "since")
        })
      )
    })
  ),
  route("DELETE", "/_sandbox/deliveries", () => Effect.as(admin.clearDeliveries, noContent))
]

const logAndFaultRoutes = (admin: Admin): ReadonlyArray<AdminRoute> => [
  route("GET", "/_sandbox/requests", (request) =>
    Effect.gen(function* () {
      return ok(
        yield* admin.requests({
          method: optionalString(request.query, "method"),
          path: optionalString(request.query, "path"),
          route: optionalString(request.query, "route"),
          status: yield* optionalInt(request.query, "status"),
          since: yield* optionalInt(request.query, "since")
        })
      )
    })
  ),
  route("DELETE", "/_sandbox/requests", () => Effect.as(admin.clearRequests, noContent)),
  route("GET", "/_sandbox/faults", () => Effect.map(admin.faults, ok)),
  route(
    "POST",
    "/_sandbox/faults",
    withBody(FaultRuleInput, (rule) => admin.addFault(rule), created)
  ),
  route("DELETE", "/_sandbox/faults/:id", withParam("id", admin.removeFault, none)),
  route("DELETE", "/_sandbox/faults", () => Effect.as(admin.clearFaults, noContent)),
  route("GET", "/_sandbox/rate_limits", () => Effect.map(admin.rateLimits, ok)),
  route("DELETE", "/_sandbox/rate_limits", () => Effect.as(admin.resetRateLimits, noContent)),
  route(
    "PUT",
    "/_sandbox/rate_limits/cotenants",
    withBody(CotenantInput, (body) => admin.setCotenant(body.bucket, body.per_window, body.spread), none)
  ),
  route(
    "POST",
    "/_sandbox/rate_limits/charges",
    withBody(ChargeInput, (body) => admin.chargeRateLimit(body.bucket, body.amount), none)
  ),
  route(
    "PATCH",
    "/_sandbox/rate_limits/limits",
    withBody(LimitsInput, (body) => admin.setRateLimits(body), ok)
  )
]

/** Data changes, as the CRM's users make them: tasks, meetings and notes. */
const activityRoutes = (actions: Admin["actions"]): ReadonlyArray<AdminRoute> => [
  route(
    "POST",
    "/_sandbox/tasks",
    withBody(CreateTaskInput, (body) => actions.createTask(body), created)
  ),
  route(
    "PATCH",
    "/_sandbox/tasks/:id",
    withBody(UpdateTaskInput, (body, request) => actions.updateTask(param(request, "id"), body), ok)
  ),
  route("POST", "/_sandbox/tasks/:id/complete", withParam("id", actions.completeTask, ok)),
  route("POST", "/_sandbox/tasks/:id/reopen", withParam("id", actions.reopenTask, ok)),
  route("DELETE", "/_sandbox/tasks/:id", withParam("id", actions.deleteTask, none)),
  route(
    "POST",
    "/_sandbox/meetings",
    withBody(CreateMeetingInput, (body) => actions.createMeeting(body), created)
  ),
  route(
    "PATCH",
    "/_sandbox/meetings/:id",
    withBody(UpdateMeetingInput, (body, request) => actions.updateMeeting(param(request, "id"), body), ok)
  ),
  route(
    "PUT",
    "/_sandbox/meetings/:id/transcript",
    withBody(TranscriptInput, (body, request) => actions.setTranscript(param(request, "id"), body), ok)
  ),
  route("DELETE", "/_sandbox/meetings/:id", withParam("id", actions.deleteMeeting, none)),
  route(
    "POST",
    "/_sandbox/notes",
    withBody(CreateNoteInput, (body) => actions.createNote(body), created)
  ),
  route(
    "PATCH",
    "/_sandbox/notes/:id",
    withBody(UpdateNoteInput, (body, request) => actions.updateNote(param(request, "id"), body), ok)
  ),
  route("DELETE", "/_sandbox/notes/:id", withParam("id", actions.deleteNote, none))
]

/** Data changes: clients, prospects and contacts, then the kinds without events. */
const recordRoutes = (actions: Admin["actions"]): ReadonlyArray<AdminRoute> => [
  route(
    "POST",
    "/_sandbox/clients",
    withBody(CreateClientInput, (body) => actions.createClient(body), created)
  ),
  route(
    "PATCH",
    "/_sandbox/clients/:id",
    withBody(UpdateClientInput, (body, request) => actions.updateClient(param(request, "id"), body), ok)
  ),
  route(
    "POST",
    "/_sandbox/prospects",
    withBody(ProspectInput, (body) => actions.createProspect(body), created)
  ),
  route(
    "POST",
    "/_sandbox/contacts",
    withBody(PersonInput, (body) => actions.createContact(body), created)
  ),
  route(
    "POST",
    "/_sandbox/businesses",
    withBody(CreateBusinessInput, (body) => actions.createBusiness(body), created)
  ),
  route(
    "PATCH",
    "/_sandbox/businesses/:id",
    withBody(UpdateBusinessInput, (body, request) => actions.updateBusiness(param(request, "id"), body), ok)
  ),
  route("DELETE", "/_sandbox/businesses/:id", withParam("id", actions.deleteBusiness, none)),
  route("DELETE", "/_sandbox/project_templates/:id", withParam("id", actions.deleteProjectTemplate, none)),
  route(
    "POST",
    "/_sandbox/financial_accounts",
    withBody(CreateFinancialAccountInput, (body) => actions.createFinancialAccount(body), created)
  ),
  route(
    "PATCH",
    "/_sandbox/financial_accounts/:id",
    withBody(
      UpdateFinancialAccountInput,
      (body, request) => actions.updateFinancialAccount(param(request, "id"), body),
      ok
    )
  ),
  route("DELETE", "/_sandbox/financial_accounts/:id", withParam("id", actions.deleteFinancialAccount, none)),
  route(
    "POST",
    "/_sandbox/annuity_contracts",
    withBody(CreateAnnuityContractInput, (body) => actions.createAnnuityContract(body), created)
  ),
  route(
    "PATCH",
    "/_sandbox/annuity_contracts/:id",
    withBody(
      UpdateAnnuityContractInput,
      (body, request) => actions.updateAnnuityContract(param(request, "id"), body),
      ok
    )
  ),
  route("DELETE", "/_sandbox/annuity_contracts/:id", withParam("id", actions.deleteAnnuityContract, none))
]

export const makeAdminRoutes = Effect.gen(function* () {
  const admin = yield* SandboxAdmin
  const routes: ReadonlyArray<AdminRoute> = [
    ...stateRoutes(admin),
    ...tokenRoutes(admin),
    ...appRoutes(admin),
    ...accessRoutes(admin),
    ...webhookRoutes(admin),
    ...logAndFaultRoutes(admin),
    ...activityRoutes(admin.actions),
    ...recordRoutes(admin.actions)
  ]
  return routes
})
