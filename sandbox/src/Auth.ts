/**
 * Credentials of spec §5: personal access tokens (fixed prefix `crm_pat_`, read-only until write
 * access is enabled on the token) and OAuth 2.0 apps, whose endpoints are `OAuthFlow.ts`.
 * `authenticate` turns a bearer token into a `Credential`; the rest is the admin operations on
 * tokens, apps and connections. The bootstrap token and app are derived from the seed, so they
 * are the same on every start and after every reset.
 */
import { Context, Effect, Layer } from "effect"
import type { AuthDeps, AuthState, ConnectionKey, OAuthApp, PersonalToken, TokenResponse } from "./AuthTypes.ts"
import { ApiError, forbidden, notFound, unauthorized, validationFailed } from "./errors.ts"
import type { World } from "./World.ts"
import { authorize, checkConnection, issue, randomToken, revokeWhere, token } from "./OAuthFlow.ts"
import { SandboxConfig } from "./Options.ts"
import { hash, hashString } from "./Prng.ts"
import { SandboxClock } from "./SandboxClock.ts"
import { companyOrdinal, SandboxStore } from "./Store.ts"

export type { OAuthApp, PersonalToken, TokenResponse } from "./AuthTypes.ts"

export const PAT_PREFIX = "crm_pat_"

export type Credential =
  | {
      readonly kind: "personal"
      readonly tokenId: string
      readonly userId: string
      readonly company: number
      readonly canWrite: boolean
    }
  | {
      readonly kind: "oauth"
      readonly clientId: string
      readonly userId: string
      readonly company: number
      readonly canWrite: boolean
      readonly scope: string
    }

export interface CreatePatInput {
  readonly userId: string
  readonly companyId?: string | undefined
  readonly canWrite?: boolean | undefined
  readonly label?: string | undefined
}

export interface CreateAppInput {
  readonly name?: string | undefined
  readonly redirectUris?: ReadonlyArray<string> | undefined
  readonly ownerCompanyId?: string | undefined
  readonly mode?: "sandbox" | "production" | undefined
  readonly scope?: string | undefined
}

export interface AppPatch {
  readonly enabled?: boolean | undefined
  readonly mode?: "sandbox" | "production" | undefined
  readonly redirectUris?: ReadonlyArray<string> | undefined
}

/** A token derived from the seed, so the bootstrap credentials are the same on every start. */
const seededToken = (prefix: string, seed: number, salt: string) =>
  prefix + [1, 2, 3, 4, 5, 6].map((i) => hash(seed, hashString(salt), i).toString(16).padStart(8, "0")).join("")

/** A write-enabled token of the first user, and a sandbox-mode app of the partner's own company. */
const bootstrapCredentials = (seed: number, world: World) => {
  const pat: PersonalToken = {
    id: "pat_00000001",
    token: seededToken(PAT_PREFIX, seed, "bootstrap-pat"),
    userId: world.users[0]!.id,
    company: 0,
    label: "sandbox bootstrap token",
    canWrite: true,
    revoked: false
  }
  const app: OAuthApp = {
    clientId: seededToken("app_", seed, "bootstrap-app").slice(0, 28),
    clientSecret: seededToken("secret_", seed, "bootstrap-secret"),
    name: "Sandbox Partner App",
    redirectUris: ["http://localhost:8080/oauth/callback", "http://127.0.0.1:8080/oauth/callback"],
    ownerCompany: 0,
    mode: "sandbox",
    enabled: true,
    scope: "read write"
  }
  return { pat, app }
}

/** The label of the seeded per-user tokens (`userTokens`). */
export const USER_TOKEN_LABEL = "user token"

/** The seeded personal access token of `userId` in `companyId` (option `userTokens`). */
export const userTokenOf = (seed: number, userId: string, companyId: string) =>
  seededToken(PAT_PREFIX, seed, `user-pat:${userId}:${companyId}`)

/** With `userTokens`, a read-only seeded token per user and company, in user order. */
const installUserTokens = (state: AuthState, seed: number, world: World) => {
  for (const user of world.users) {
    for (const company of user.companies) {
      const pat: PersonalToken = {
        id: `pat_${String(++state.patCounter).padStart(8, "0")}`,
        token: userTokenOf(seed, user.id, world.companies[company]!.id),
        userId: user.id,
        company,
        label: USER_TOKEN_LABEL,
        canWrite: false,
        revoked: false
      }
      state.pats.set(pat.token, pat)
    }
  }
}

/** Forgets every credential but the bootstrap ones (and the seeded user tokens, when asked for). */
const install = (state: AuthState, seed: number, world: World, userTokens = false) => {
  state.pats.clear()
  state.apps.clear()
  state.codes.clear()
  state.accessTokens.clear()
  state.refreshTokens.clear()
  state.counter = 0
  state.patCounter = 1
  state.approver = world.users[0]!.id
  state.bootstrap = bootstrapCredentials(seed, world)
  state.pats.set(state.bootstrap.pat.token, state.bootstrap.pat)
  state.apps.set(state.bootstrap.app.clientId, state.bootstrap.app)
  if (userTokens) installUserTokens(state, seed, world)
}

const newState = (seed: number, world: World, userTokens: boolean): AuthState => {
  const state: AuthState = {
    pats: new Map(),
    apps: new Map(),
    codes: new Map(),
    accessTokens: new Map(),
    refreshTokens: new Map(),
    approver: "",
    bootstrap: bootstrapCredentials(seed, world),
    counter: 0,
    patCounter: 1
  }
  install(state, seed, world, userTokens)
  return state
}

const findCompany = (world: World, companyId: string) => {
  const ordinal = companyOrdinal(world, companyId)
  return ordinal === undefined ? Effect.fail(notFound(`company ${companyId} not found`)) : Effect.succeed(ordinal)
}

const findUser = (world: World, userId: string) => {
  const user = world.usersById.get(userId)
  return user === undefined ? Effect.fail(notFound(`user ${userId} not found`)) : Effect.succeed(user)
}

const patById = (state: AuthState, id: string) => {
  const pat = [...state.pats.values()].find((p) => p.id === id)
  return pat === undefined ? Effect.fail(notFound(`token ${id} not found`)) : Effect.succeed(pat)
}

const appById = (state: AuthState, clientId: string) => {
  const app = state.apps.get(clientId)
  return app === undefined ? Effect.fail(notFound(`app ${clientId} not found`)) : Effect.succeed(app)
}

const activeUser = (world: World, userId: string) => world.usersById.get(userId)?.active === true

const personalCredential = (world: World, state: AuthState, token: string) => {
  const pat = state.pats.get(token)
  if (pat === undefined || pat.revoked) return Effect.fail(unauthorized("unknown or revoked personal access token"))
  if (!activeUser(world, pat.userId)) return Effect.fail(unauthorized("the token's user is deactivated"))
  return Effect.succeed<Credential>({
    kind: "personal",
    tokenId: pat.id,
    userId: pat.userId,
    company: pat.company,
    canWrite: pat.canWrite
  })
}

const oauthCredential = (world: World, state: AuthState, token: string, now: number) => {
  const issued = state.accessTokens.get(token)
  if (issued === undefined || issued.revoked) return Effect.fail(unauthorized("unknown or revoked access token"))
  if (now >= issued.expiresAt) {
    return Effect.fail(new ApiError({ status: 401, error: "token_expired", detail: "the access token has expired" }))
  }
  const app = state.apps.get(issued.clientId)
  if (app === undefined || !app.enabled) return Effect.fail(unauthorized("the OAuth app is disabled"))
  if (!activeUser(world, issued.userId)) return Effect.fail(unauthorized("the token's user is deactivated"))
  return Effect.succeed<Credential>({
    kind: "oauth",
    clientId: issued.clientId,
    userId: issued.userId,
    company: issued.company,
    canWrite: issued.scope.split(" ").includes("write"),
    scope: issued.scope
  })
}

const authenticate = Effect.fn("SandboxAuth.authenticate")(function* (
  deps: AuthDeps,
  authorization: string | undefined
) {
  const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? "")
  if (match === null) return yield* unauthorized("missing or malformed Authorization: Bearer <token> header")
  const bearer = match[1]!
  const world = yield* deps.store.world
  const now = yield* deps.clock.now
  return yield* bearer.startsWith(PAT_PREFIX)
    ? personalCredential(world, deps.state, bearer)
    : oauthCredential(world, deps.state, bearer, now)
})

const createPat = Effect.fn("SandboxAuth.createPat")(function* (deps: AuthDeps, input: CreatePatInput) {
  const world = yield* deps.store.world
  const user = yield* findUser(world, input.userId)
  const company = input.companyId === undefined ? user.companies[0]! : yield* findCompany(world, input.companyId)
  if (!user.companies.includes(company)) {
    return yield* validationFailed(`user ${user.id} does not belong to company ${input.companyId}`)
  }
  const pat: PersonalToken = {
    id: `pat_${String(++deps.state.patCounter).padStart(8, "0")}`,
    token: randomToken(PAT_PREFIX),
    userId: user.id,
    company,
    label: input.label ?? "",
    canWrite: input.canWrite ?? false,
    revoked: false
  }
  deps.state.pats.set(pat.token, pat)
  return pat
})

const createApp = Effect.fn("SandboxAuth.createApp")(function* (deps: AuthDeps, input: CreateAppInput) {
  const world = yield* deps.store.world
  const ownerCompany = input.ownerCompanyId === undefined ? 0 : yield* findCompany(world, input.ownerCompanyId)
  const scope = input.scope ?? "read write"
  if (scope.split(" ").some((s) => s !== "read" && s !== "write")) {
    return yield* validationFailed("scope must be made of `read` and `write`")
  }
  const app: OAuthApp = {
    clientId: randomToken("app_", 12),
    clientSecret: randomToken("secret_"),
    name: input.name ?? "Partner App",
    redirectUris: input.redirectUris ?? ["http://127.0.0.1/oauth/callback"],
    ownerCompany,
    mode: input.mode ?? "sandbox",
    enabled: true,
    scope
  }
  deps.state.apps.set(app.clientId, app)
  return app
})

const connect = Effect.fn("SandboxAuth.connect")(function* (
  deps: AuthDeps,
  input: { readonly clientId: string; readonly userId: string; readonly companyId: string }
) {
  const world = yield* deps.store.world
  const now = yield* deps.clock.now
  const app = yield* appById(deps.state, input.clientId)
  const user = yield* findUser(world, input.userId)
  const company = yield* findCompany(world, input.companyId)
  const refusal = checkConnection(world, app, user.id, company)
  if (refusal !== undefined) return yield* forbidden("connection_refused", refusal)
  const key = { clientId: app.clientId, userId: user.id, company }
  return issue(deps.options, deps.state, { key, scope: app.scope, family: `fam_${++deps.state.counter}` }, now, world)
})

export class SandboxAuth extends Context.Service<
  SandboxAuth,
  {
    /** Spec §5.1: resolves `Authorization: Bearer <token>`; 401 for anything else. */
    authenticate(authorization: string | undefined): Effect.Effect<Credential, ApiError>
    /** `GET /oauth/authorize`: the redirect to send the browser to (with code or error). */
    authorize(params: URLSearchParams): Effect.Effect<string, ApiError>
    /** `POST /oauth/token`: form or JSON fields, plus HTTP Basic client credentials if sent. */
    token(
      fields: Readonly<Record<string, string>>,
      basic: { readonly clientId: string; readonly secret: string } | undefined
    ): Effect.Effect<TokenResponse, ApiError>
    readonly bootstrap: Effect.Effect<{ readonly pat: PersonalToken; readonly app: OAuthApp }>
    createPat(input: CreatePatInput): Effect.Effect<PersonalToken, ApiError>
    setPatWrite(id: string, canWrite: boolean): Effect.Effect<PersonalToken, ApiError>
    revokePat(id: string): Effect.Effect<void, ApiError>
    readonly pats: Effect.Effect<ReadonlyArray<PersonalToken>>
    createApp(input: CreateAppInput): Effect.Effect<OAuthApp, ApiError>
    updateApp(clientId: string, patch: AppPatch): Effect.Effect<OAuthApp, ApiError>
    rotateSecret(clientId: string): Effect.Effect<OAuthApp, ApiError>
    deleteApp(clientId: string): Effect.Effect<void, ApiError>
    app(clientId: string): Effect.Effect<OAuthApp, ApiError>
    readonly apps: Effect.Effect<ReadonlyArray<OAuthApp>>
    /** Issues a token pair as if the flow had completed (an admin shortcut; §5.5 still applies). */
    connect(input: {
      readonly clientId: string
      readonly userId: string
      readonly companyId: string
    }): Effect.Effect<TokenResponse, ApiError>
    /** Revokes every token of the connection. */
    disconnect(key: ConnectionKey): Effect.Effect<void>
    /** The user the sandbox signs in as at `/oauth/authorize` when no `login_hint` is given. */
    setApprover(userId: string): Effect.Effect<void, ApiError>
    readonly reset: Effect.Effect<void>
  }
>()("crm-sync/sandbox/SandboxAuth") {
  static readonly layer = Layer.effect(
    SandboxAuth,
    Effect.gen(function* () {
      const options = yield* SandboxConfig
      const store = yield* SandboxStore
      const state = newState(options.seed, yield* store.world, options.userTokens)
      const deps: AuthDeps = { options, clock: yield* SandboxClock, store, state }
      return SandboxAuth.of({
        authenticate: (authorization) => authenticate(deps, authorization),
        authorize: (params) => authorize(deps, params),
        token: (fields, basic) => token(deps, fields, basic),
        bootstrap: Effect.sync(() => state.bootstrap),
        createPat: (input) => createPat(deps, input),
        setPatWrite: Effect.fn("SandboxAuth.setPatWrite")(function* (id, canWrite) {
          const pat = yield* patById(state, id)
          pat.canWrite = canWrite
          return pat
        }),
        revokePat: Effect.fn("SandboxAuth.revokePat")(function* (id) {
          const pat = yield* patById(state, id)
          pat.revoked = true
        }),
        pats: Effect.sync(() => [...state.pats.values()]),
        createApp: (input) => createApp(deps, input),
        updateApp: Effect.fn("SandboxAuth.updateApp")(function* (clientId, patch) {
          const app = yield* appById(state, clientId)
          if (patch.enabled !== undefined) app.enabled = patch.enabled
          if (patch.mode !== undefined) app.mode = patch.mode
          if (patch.redirectUris !== undefined) app.redirectUris = patch.redirectUris
          return app
        }),
        rotateSecret: Effect.fn("SandboxAuth.rotateSecret")(function* (clientId) {
          const app = yield* appById(state, clientId)
          app.clientSecret = randomToken("secret_")
          return app
        }),
        deleteApp: Effect.fn("SandboxAuth.deleteApp")(function* (clientId) {
          yield* appById(state, clientId)
          state.apps.delete(clientId)
          revokeWhere(state, (t) => t.clientId === clientId)
        }),
        app: (clientId) => appById(state, clientId),
        apps: Effect.sync(() => [...state.apps.values()]),
        connect: (input) => connect(deps, input),
        disconnect: (key) =>
          Effect.sync(() =>
            revokeWhere(
              state,
              (t) => t.clientId === key.clientId && t.userId === key.userId && t.company === key.company
            )
          ),
        setApprover: Effect.fn("SandboxAuth.setApprover")(function* (userId) {
          const user = yield* findUser(yield* store.world, userId)
          state.approver = user.id
        }),
        reset: Effect.gen(function* () {
          install(state, options.seed, yield* store.world, options.userTokens)
        })
      })
    })
  )
}
