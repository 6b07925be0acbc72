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

export const makeAdminRoutes = Effect.gen(function* () {
  const admin = yield* SandboxAdmin
  const actions = admin.actions

  const route = (
    method: AdminRoute["method"],
    path: AdminRoute["path"],
    handle: (request: AdminRequest) => Effect.Effect<ApiResponse, ApiError>
  ): AdminRoute => ({ method, path, handle })

  const routes: ReadonlyArray<AdminRoute> = [
    route("GET", "/_sandbox", () => Effect.map(admin.state, ok)),
    route("POST", "/_sandbox/reset", () => Effect.as(admin.reset, noContent)),
    route("POST", "/_sandbox/clock/advance", (request) =>
      Effect.flatMap(read(ClockBody, request), (body) => Effect.map(admin.advanceClock(body.by), ok))
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
    ),

    route("GET", "/_sandbox/tokens", () => Effect.map(admin.tokens, ok)),
    route("POST", "/_sandbox/tokens", (request) =>
      Effect.flatMap(read(TokenBody, request), (body) =>
        Effect.map(
          admin.createToken({
            userId: body.user_id,
            companyId: body.company_id,
            canWrite: body.can_write,
            label: body.label
          }),
          created
        )
      )
    ),
    route("PATCH", "/_sandbox/tokens/:id", (request) =>
      Effect.flatMap(read(TokenPatch, request), (body) =>
        Effect.map(admin.setTokenWrite(param(request, "id"), body.can_write), ok)
      )
    ),
    route("DELETE", "/_sandbox/tokens/:id", (request) => Effect.as(admin.revokeToken(param(request, "id")), noContent)),

    route("GET", "/_sandbox/apps", () => Effect.map(admin.apps, ok)),
    route("POST", "/_sandbox/apps", (request) =>
      Effect.flatMap(read(AppBody, request), (body) =>
        Effect.map(
          admin.registerApp({
            name: body.name,
            redirectUris: body.redirect_uris,
            ownerCompanyId: body.owner_company_id,
            mode: body.mode,
            scope: body.scope
          }),
          created
        )
      )
    ),
    route("PATCH", "/_sandbox/apps/:client_id", (request) =>
      Effect.flatMap(read(AppPatch, request), (body) =>
        Effect.map(
          admin.updateApp(param(request, "client_id"), {
            enabled: body.enabled,
            mode: body.mode,
            redirectUris: body.redirect_uris
          }),
          ok
        )
      )
    ),
    route("POST", "/_sandbox/apps/:client_id/rotate_secret", (request) =>
      Effect.map(admin.rotateAppSecret(param(request, "client_id")), ok)
    ),
    route("DELETE", "/_sandbox/apps/:client_id", (request) =>
      Effect.as(admin.deleteApp(param(request, "client_id")), noContent)
    ),
    route("POST", "/_sandbox/oauth/approver", (request) =>
      Effect.flatMap(read(ApproverBody, request), (body) => Effect.as(admin.setOAuthApprover(body.user_id), noContent))
    ),
    route("POST", "/_sandbox/connections", (request) =>
      Effect.flatMap(read(ConnectionBody, request), (body) =>
        Effect.map(
          admin.connect({ clientId: body.client_id, userId: body.user_id, companyId: body.company_id }),
          created
        )
      )
    ),
    route("POST", "/_sandbox/connections/disconnect", (request) =>
      Effect.flatMap(read(ConnectionBody, request), (body) =>
        Effect.as(
          admin.disconnect({ clientId: body.client_id, userId: body.user_id, companyId: body.company_id }),
          noContent
        )
      )
    ),

    route("POST", "/_sandbox/users/:id/deactivate", (request) =>
      Effect.as(admin.deactivateUser(param(request, "id")), noContent)
    ),
    route("POST", "/_sandbox/users/:id/activate", (request) =>
      Effect.as(admin.activateUser(param(request, "id")), noContent)
    ),
    route("DELETE", "/_sandbox/books/:book_id/users/:user_id", (request) =>
      Effect.as(admin.revokeBookAccess(param(request, "book_id"), param(request, "user_id")), noContent)
    ),
    route("PUT", "/_sandbox/books/:book_id/users/:user_id", (request) =>
      Effect.as(admin.grantBookAccess(param(request, "book_id"), param(request, "user_id")), noContent)
    ),

    route("GET", "/_sandbox/endpoints", () => Effect.map(admin.endpoints, ok)),
    route("POST", "/_sandbox/endpoints", (request) =>
      Effect.flatMap(read(EndpointBody, request), (body) =>
        Effect.map(
          admin.registerEndpoint({
            clientId: body.client_id,
            url: body.url,
            secret: body.secret,
            eventTypes: body.event_types
          }),
          created
        )
      )
    ),
    route("PATCH", "/_sandbox/endpoints/:id", (request) =>
      Effect.flatMap(read(EndpointPatch, request), (body) =>
        Effect.map(
          admin.updateEndpoint(param(request, "id"), {
            url: body.url,
            enabled: body.enabled,
            eventTypes: body.event_types
          }),
          ok
        )
      )
    ),
    route("DELETE", "/_sandbox/endpoints/:id", (request) =>
      Effect.as(admin.removeEndpoint(param(request, "id")), noContent)
    ),
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
    route("DELETE", "/_sandbox/deliveries", () => Effect.as(admin.clearDeliveries, noContent)),

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
    route("POST", "/_sandbox/faults", (request) =>
      Effect.flatMap(read(FaultRuleInput, request), (rule) => Effect.map(admin.addFault(rule), created))
    ),
    route("DELETE", "/_sandbox/faults/:id", (request) => Effect.as(admin.removeFault(param(request, "id")), noContent)),
    route("DELETE", "/_sandbox/faults", () => Effect.as(admin.clearFaults, noContent)),
    route("GET", "/_sandbox/rate_limits", () => Effect.map(admin.rateLimits, ok)),
    route("DELETE", "/_sandbox/rate_limits", () => Effect.as(admin.resetRateLimits, noContent)),
    route("PUT", "/_sandbox/rate_limits/cotenants", (request) =>
      Effect.flatMap(read(CotenantInput, request), (body) =>
        Effect.as(admin.setCotenant(body.bucket, body.per_window, body.spread), noContent)
      )
    ),
    route("POST", "/_sandbox/rate_limits/charges", (request) =>
      Effect.flatMap(read(ChargeInput, request), (body) =>
        Effect.as(admin.chargeRateLimit(body.bucket, body.amount), noContent)
      )
    ),
    route("PATCH", "/_sandbox/rate_limits/limits", (request) =>
      Effect.flatMap(read(LimitsInput, request), (body) => Effect.map(admin.setRateLimits(body), ok))
    ),

    route("POST", "/_sandbox/tasks", (request) =>
      Effect.flatMap(read(CreateTaskInput, request), (body) => Effect.map(actions.createTask(body), created))
    ),
    route("PATCH", "/_sandbox/tasks/:id", (request) =>
      Effect.flatMap(read(UpdateTaskInput, request), (body) =>
        Effect.map(actions.updateTask(param(request, "id"), body), ok)
      )
    ),
    route("POST", "/_sandbox/tasks/:id/complete", (request) =>
      Effect.map(actions.completeTask(param(request, "id")), ok)
    ),
    route("POST", "/_sandbox/tasks/:id/reopen", (request) => Effect.map(actions.reopenTask(param(request, "id")), ok)),
    route("DELETE", "/_sandbox/tasks/:id", (request) => Effect.as(actions.deleteTask(param(request, "id")), noContent)),

    route("POST", "/_sandbox/meetings", (request) =>
      Effect.flatMap(read(CreateMeetingInput, request), (body) => Effect.map(actions.createMeeting(body), created))
    ),
    route("PATCH", "/_sandbox/meetings/:id", (request) =>
      Effect.flatMap(read(UpdateMeetingInput, request), (body) =>
        Effect.map(actions.updateMeeting(param(request, "id"), body), ok)
      )
    ),
    route("PUT", "/_sandbox/meetings/:id/transcript", (request) =>
      Effect.flatMap(read(TranscriptInput, request), (body) =>
        Effect.map(actions.setTranscript(param(request, "id"), body), ok)
      )
    ),
    route("DELETE", "/_sandbox/meetings/:id", (request) =>
      Effect.as(actions.deleteMeeting(param(request, "id")), noContent)
    ),

    route("POST", "/_sandbox/notes", (request) =>
      Effect.flatMap(read(CreateNoteInput, request), (body) => Effect.map(actions.createNote(body), created))
    ),
    route("PATCH", "/_sandbox/notes/:id", (request) =>
      Effect.flatMap(read(UpdateNoteInput, request), (body) =>
        Effect.map(actions.updateNote(param(request, "id"), body), ok)
      )
    ),
    route("DELETE", "/_sandbox/notes/:id", (request) => Effect.as(actions.deleteNote(param(request, "id")), noContent)),

    route("POST", "/_sandbox/clients", (request) =>
      Effect.flatMap(read(CreateClientInput, request), (body) => Effect.map(actions.createClient(body), created))
    ),
    route("PATCH", "/_sandbox/clients/:id", (request) =>
      Effect.flatMap(read(UpdateClientInput, request), (body) =>
        Effect.map(actions.updateClient(param(request, "id"), body), ok)
      )
    ),
    route("POST", "/_sandbox/prospects", (request) =>
      Effect.flatMap(read(ProspectInput, request), (body) => Effect.map(actions.createProspect(body), created))
    ),
    route("POST", "/_sandbox/contacts", (request) =>
      Effect.flatMap(read(PersonInput, request), (body) => Effect.map(actions.createContact(body), created))
    ),

    route("POST", "/_sandbox/businesses", (request) =>
      Effect.flatMap(read(CreateBusinessInput, request), (body) => Effect.map(actions.createBusiness(body), created))
    ),
    route("PATCH", "/_sandbox/businesses/:id", (request) =>
      Effect.flatMap(read(UpdateBusinessInput, request), (body) =>
        Effect.map(actions.updateBusiness(param(request, "id"), body), ok)
      )
    ),
    route("DELETE", "/_sandbox/businesses/:id", (request) =>
      Effect.as(actions.deleteBusiness(param(request, "id")), noContent)
    ),
    route("DELETE", "/_sandbox/project_templates/:id", (request) =>
      Effect.as(actions.deleteProjectTemplate(param(request, "id")), noContent)
    ),
    route("POST", "/_sandbox/financial_accounts", (request) =>
      Effect.flatMap(read(CreateFinancialAccountInput, request), (body) =>
        Effect.map(actions.createFinancialAccount(body), created)
      )
    ),
    route("PATCH", "/_sandbox/financial_accounts/:id", (request) =>
      Effect.flatMap(read(UpdateFinancialAccountInput, request), (body) =>
        Effect.map(actions.updateFinancialAccount(param(request, "id"), body), ok)
      )
    ),
    route("DELETE", "/_sandbox/financial_accounts/:id", (request) =>
      Effect.as(actions.deleteFinancialAccount(param(request, "id")), noContent)
    ),
    route("POST", "/_sandbox/annuity_contracts", (request) =>
      Effect.flatMap(read(CreateAnnuityContractInput, request), (body) =>
        Effect.map(actions.createAnnuityContract(body), created)
      )
    ),
    route("PATCH", "/_sandbox/annuity_contracts/:id", (request) =>
      Effect.flatMap(read(UpdateAnnuityContractInput, request), (body) =>
        Effect.map(actions.updateAnnuityContract(param(request, "id"), body), ok)
      )
    ),
    route("DELETE", "/_sandbox/annuity_contracts/:id", (request) =>
      Effect.as(actions.deleteAnnuityContract(param(request, "id")), noContent)
    )
  ]
  return routes
})
