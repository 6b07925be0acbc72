/**
 * Credentials of spec §5: personal access tokens (fixed prefix `crm_pat_`, read-only until write
 * access is enabled on the token) and OAuth 2.0 apps with the authorization-code flow and PKCE
 * (S256 only), refresh-token rotation, one company per connection, and the sandbox-app rule of
 * §5.5 (an app in sandbox mode connects only to its owner's company). `authenticate` turns a
 * bearer token into a `Credential`; everything else here is the OAuth endpoints' logic and the
 * admin operations on tokens, apps and connections.
 */
import { Context, Effect, Layer } from "effect"
import { createHash, randomBytes } from "node:crypto"
import { ApiError, forbidden, notFound, unauthorized, validationFailed } from "./errors.ts"
import type { World } from "./Generator.ts"
import { SandboxConfig } from "./Options.ts"
import { hash, hashString } from "./Prng.ts"
import { SandboxClock } from "./SandboxClock.ts"
import { companyOrdinal, SandboxStore } from "./Store.ts"

export const PAT_PREFIX = "crm_pat_"
export const ACCESS_TOKEN_PREFIX = "crm_oat_"
export const REFRESH_TOKEN_PREFIX = "crm_ort_"

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

export interface PersonalToken {
  readonly id: string
  readonly token: string
  readonly userId: string
  readonly company: number
  readonly label: string
  canWrite: boolean
  revoked: boolean
}

export interface OAuthApp {
  readonly clientId: string
  clientSecret: string
  readonly name: string
  redirectUris: ReadonlyArray<string>
  readonly ownerCompany: number
  /** `sandbox`: connections only to the owner's company (spec §5.5). */
  mode: "sandbox" | "production"
  enabled: boolean
  readonly scope: string
}

interface AuthorizationCode {
  readonly clientId: string
  readonly userId: string
  readonly company: number
  readonly redirectUri: string
  readonly challenge: string
  readonly scope: string
  readonly expiresAt: number
  used: boolean
  /** The token family issued from this code, revoked if the code is replayed. */
  family: string | undefined
}

interface IssuedToken {
  readonly clientId: string
  readonly userId: string
  readonly company: number
  readonly scope: string
  readonly expiresAt: number
  readonly family: string
  revoked: boolean
  /** Refresh tokens only: when it was exchanged (rotation makes it single-use). */
  usedAt: number | undefined
}

export interface TokenResponse {
  readonly access_token: string
  readonly token_type: "Bearer"
  readonly expires_in: number
  readonly refresh_token: string
  readonly refresh_token_expires_in: number
  readonly scope: string
  readonly company_id: string
  readonly created_at: number
}

export interface ConnectionKey {
  readonly clientId: string
  readonly userId: string
  readonly company: number
}

/** An OAuth error of RFC 6749 §5.2; rendered as `{error, error_description}`. */
const oauthError = (error: string, description: string, status = 400) =>
  new ApiError({ status, error, detail: description })

const randomToken = (prefix: string, bytes = 24) => `${prefix}${randomBytes(bytes).toString("base64url")}`

/** A token derived from the seed, so the bootstrap credentials are the same on every start. */
const seededToken = (prefix: string, seed: number, salt: string) =>
  prefix + [1, 2, 3, 4, 5, 6].map((i) => hash(seed, hashString(salt), i).toString(16).padStart(8, "0")).join("")

const s256 = (verifier: string) => createHash("sha256").update(verifier).digest("base64url")

const loopback = (url: URL) => url.protocol === "http:" && ["127.0.0.1", "localhost", "[::1]"].includes(url.hostname)

/** RFC 8252 §7.3: a loopback redirect URI matches whatever its port. */
const redirectMatches = (registered: string, given: string): boolean => {
  if (registered === given) return true
  const a = URL.parse(registered)
  const b = URL.parse(given)
  if (a === null || b === null) return false
  return loopback(a) && loopback(b) && a.hostname === b.hostname && a.pathname === b.pathname && a.search === b.search
}

export const connectionKey = (key: ConnectionKey) => `${key.clientId}|${key.userId}|${key.company}`

const userOf = (world: World, userId: string) => world.usersById.get(userId)

const findCompany = (world: World, companyId: string) => {
  const ordinal = companyOrdinal(world, companyId)
  return ordinal === undefined ? Effect.fail(notFound(`company ${companyId} not found`)) : Effect.succeed(ordinal)
}

const findUser = (world: World, userId: string) => {
  const user = userOf(world, userId)
  return user === undefined ? Effect.fail(notFound(`user ${userId} not found`)) : Effect.succeed(user)
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
      const clock = yield* SandboxClock
      const store = yield* SandboxStore

      const pats = new Map<string, PersonalToken>()
      const apps = new Map<string, OAuthApp>()
      const codes = new Map<string, AuthorizationCode>()
      const accessTokens = new Map<string, IssuedToken>()
      const refreshTokens = new Map<string, IssuedToken>()
      let approver = ""
      let bootstrapPat: PersonalToken
      let bootstrapApp: OAuthApp
      let counter = 0
      let patCounter = 1

      const install = (world: World) => {
        pats.clear()
        apps.clear()
        codes.clear()
        accessTokens.clear()
        refreshTokens.clear()
        counter = 0
        patCounter = 1
        const user = world.users[0]!
        approver = user.id
        bootstrapPat = {
          id: "pat_00000001",
          token: seededToken(PAT_PREFIX, options.seed, "bootstrap-pat"),
          userId: user.id,
          company: 0,
          label: "sandbox bootstrap token",
          canWrite: true,
          revoked: false
        }
        pats.set(bootstrapPat.token, bootstrapPat)
        bootstrapApp = {
          clientId: seededToken("app_", options.seed, "bootstrap-app").slice(0, 28),
          clientSecret: seededToken("secret_", options.seed, "bootstrap-secret"),
          name: "Sandbox Partner App",
          redirectUris: ["http://localhost:8080/oauth/callback", "http://127.0.0.1:8080/oauth/callback"],
          ownerCompany: 0,
          mode: "sandbox",
          enabled: true,
          scope: "read write"
        }
        apps.set(bootstrapApp.clientId, bootstrapApp)
      }
      install(yield* store.world)

      const authenticate = Effect.fn("SandboxAuth.authenticate")(function* (authorization: string | undefined) {
        const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? "")
        if (match === null) return yield* unauthorized("missing or malformed Authorization: Bearer <token> header")
        const token = match[1]!
        const world = yield* store.world
        const now = yield* clock.now
        if (token.startsWith(PAT_PREFIX)) {
          const pat = pats.get(token)
          if (pat === undefined || pat.revoked) return yield* unauthorized("unknown or revoked personal access token")
          if (userOf(world, pat.userId)?.active !== true) return yield* unauthorized("the token's user is deactivated")
          const credential: Credential = {
            kind: "personal",
            tokenId: pat.id,
            userId: pat.userId,
            company: pat.company,
            canWrite: pat.canWrite
          }
          return credential
        }
        const issued = accessTokens.get(token)
        if (issued === undefined || issued.revoked) return yield* unauthorized("unknown or revoked access token")
        if (now >= issued.expiresAt) {
          return yield* new ApiError({ status: 401, error: "token_expired", detail: "the access token has expired" })
        }
        const app = apps.get(issued.clientId)
        if (app === undefined || !app.enabled) return yield* unauthorized("the OAuth app is disabled")
        if (userOf(world, issued.userId)?.active !== true) return yield* unauthorized("the token's user is deactivated")
        const credential: Credential = {
          kind: "oauth",
          clientId: issued.clientId,
          userId: issued.userId,
          company: issued.company,
          canWrite: issued.scope.split(" ").includes("write"),
          scope: issued.scope
        }
        return credential
      })

      const issue = (key: ConnectionKey, scope: string, family: string, now: number, world: World): TokenResponse => {
        const access = randomToken(ACCESS_TOKEN_PREFIX)
        const refresh = randomToken(REFRESH_TOKEN_PREFIX)
        const base = { clientId: key.clientId, userId: key.userId, company: key.company, scope, family }
        accessTokens.set(access, {
          ...base,
          expiresAt: now + options.accessTokenTtlMs,
          revoked: false,
          usedAt: undefined
        })
        refreshTokens.set(refresh, {
          ...base,
          expiresAt: now + options.refreshTokenTtlMs,
          revoked: false,
          usedAt: undefined
        })
        return {
          access_token: access,
          token_type: "Bearer",
          expires_in: Math.floor(options.accessTokenTtlMs / 1000),
          refresh_token: refresh,
          refresh_token_expires_in: Math.floor(options.refreshTokenTtlMs / 1000),
          scope,
          company_id: world.companies[key.company]!.id,
          created_at: Math.floor(now / 1000)
        }
      }

      const revokeWhere = (predicate: (token: IssuedToken) => boolean) => {
        for (const token of accessTokens.values()) if (predicate(token)) token.revoked = true
        for (const token of refreshTokens.values()) if (predicate(token)) token.revoked = true
      }

      /** §5.5 and company membership: may this user connect this app to this company? */
      const checkConnection = (world: World, app: OAuthApp, userId: string, company: number): string | undefined => {
        const user = userOf(world, userId)
        if (user === undefined || !user.active) return "the signed-in user is unknown or deactivated"
        if (!user.companies.includes(company)) return "the signed-in user does not belong to the selected company"
        if (app.mode === "sandbox" && company !== app.ownerCompany) {
          return "this app is in sandbox mode and can only connect to the partner's own company"
        }
        return undefined
      }

      const authorize = Effect.fn("SandboxAuth.authorize")(function* (params: URLSearchParams) {
        const world = yield* store.world
        const now = yield* clock.now
        const clientId = params.get("client_id") ?? ""
        const app = apps.get(clientId)
        if (app === undefined) return yield* oauthError("invalid_client", "unknown client_id")
        const redirectUri = params.get("redirect_uri") ?? ""
        if (!app.redirectUris.some((registered) => redirectMatches(registered, redirectUri))) {
          // never redirect to an unregistered address (RFC 6749 §4.1.2.1)
          return yield* oauthError("invalid_request", "redirect_uri is not registered for this app")
        }
        const redirect = (query: Record<string, string>) => {
          const url = new URL(redirectUri)
          for (const [key, value] of Object.entries(query)) url.searchParams.set(key, value)
          const state = params.get("state")
          if (state !== null) url.searchParams.set("state", state)
          return url.toString()
        }
        if (params.get("response_type") !== "code") {
          return redirect({ error: "unsupported_response_type", error_description: "response_type must be code" })
        }
        const challenge = params.get("code_challenge") ?? ""
        if (params.get("code_challenge_method") !== "S256" || !/^[A-Za-z0-9_-]{43}$/.test(challenge)) {
          return redirect({
            error: "invalid_request",
            error_description: "PKCE is required: code_challenge (43 base64url chars) with code_challenge_method=S256"
          })
        }
        if (!app.enabled) return redirect({ error: "access_denied", error_description: "the app is disabled" })
        const hint = params.get("login_hint")
        const user =
          hint === null ? userOf(world, approver) : world.users.find((u) => u.id === hint || u.email === hint)
        if (user === undefined) return redirect({ error: "access_denied", error_description: "unknown login_hint" })
        const companyId = params.get("company_id")
        const company = companyId === null ? user.companies[0]! : companyOrdinal(world, companyId)
        if (company === undefined) return redirect({ error: "access_denied", error_description: "unknown company_id" })
        const refusal = checkConnection(world, app, user.id, company)
        if (refusal !== undefined) return redirect({ error: "access_denied", error_description: refusal })
        const requested = (params.get("scope") ?? app.scope).split(/[\s+]+/).filter((s) => s.length > 0)
        const allowed = app.scope.split(" ")
        if (requested.some((scope) => !allowed.includes(scope))) {
          return redirect({ error: "invalid_scope", error_description: `allowed scopes: ${app.scope}` })
        }
        const code = randomToken("code_", 18)
        codes.set(code, {
          clientId,
          userId: user.id,
          company,
          redirectUri,
          challenge,
          scope: requested.join(" "),
          expiresAt: now + options.authorizationCodeTtlMs,
          used: false,
          family: undefined
        })
        return redirect({ code })
      })

      const token = Effect.fn("SandboxAuth.token")(function* (
        fields: Readonly<Record<string, string>>,
        basic: { readonly clientId: string; readonly secret: string } | undefined
      ) {
        const world = yield* store.world
        const now = yield* clock.now
        const clientId = basic?.clientId ?? fields.client_id ?? ""
        const secret = basic?.secret ?? fields.client_secret ?? ""
        const app = apps.get(clientId)
        if (app === undefined || app.clientSecret !== secret) {
          return yield* oauthError("invalid_client", "unknown client_id or wrong client_secret", 401)
        }
        if (!app.enabled) return yield* oauthError("unauthorized_client", "the app is disabled")
        switch (fields.grant_type) {
          case "authorization_code": {
            const code = codes.get(fields.code ?? "")
            if (code === undefined || code.clientId !== clientId) {
              return yield* oauthError("invalid_grant", "unknown authorization code")
            }
            if (code.used) {
              // RFC 6749 §4.1.2: a replayed code revokes what it issued
              if (code.family !== undefined) revokeWhere((t) => t.family === code.family)
              return yield* oauthError("invalid_grant", "authorization code already used")
            }
            if (now >= code.expiresAt) return yield* oauthError("invalid_grant", "authorization code expired")
            if (fields.redirect_uri !== code.redirectUri) {
              return yield* oauthError("invalid_grant", "redirect_uri does not match the authorization request")
            }
            const verifier = fields.code_verifier ?? ""
            if (!/^[A-Za-z0-9._~-]{43,128}$/.test(verifier)) {
              return yield* oauthError("invalid_request", "code_verifier must be 43-128 unreserved characters")
            }
            if (s256(verifier) !== code.challenge) {
              return yield* oauthError("invalid_grant", "code_verifier does not match code_challenge")
            }
            const refusal = checkConnection(world, app, code.userId, code.company)
            if (refusal !== undefined) return yield* oauthError("invalid_grant", refusal)
            code.used = true
            code.family = `fam_${++counter}`
            return issue(code, code.scope, code.family, now, world)
          }
          case "refresh_token": {
            const presented = fields.refresh_token ?? ""
            const refresh = refreshTokens.get(presented)
            if (refresh === undefined || refresh.clientId !== clientId) {
              return yield* oauthError("invalid_grant", "unknown refresh token")
            }
            if (refresh.usedAt !== undefined) {
              if (options.revokeRefreshFamilyOnReuse) revokeWhere((t) => t.family === refresh.family)
              return yield* oauthError("invalid_grant", "refresh token already used (tokens rotate on every refresh)")
            }
            if (refresh.revoked) return yield* oauthError("invalid_grant", "refresh token revoked")
            if (now >= refresh.expiresAt) return yield* oauthError("invalid_grant", "refresh token expired")
            const refusal = checkConnection(world, app, refresh.userId, refresh.company)
            if (refusal !== undefined) return yield* oauthError("invalid_grant", refusal)
            refresh.usedAt = now
            return issue(refresh, refresh.scope, refresh.family, now, world)
          }
          default:
            return yield* oauthError("unsupported_grant_type", "grant_type must be authorization_code or refresh_token")
        }
      })

      const patById = (id: string) => {
        const pat = [...pats.values()].find((p) => p.id === id)
        return pat === undefined ? Effect.fail(notFound(`token ${id} not found`)) : Effect.succeed(pat)
      }

      const appById = (clientId: string) => {
        const app = apps.get(clientId)
        return app === undefined ? Effect.fail(notFound(`app ${clientId} not found`)) : Effect.succeed(app)
      }

      return SandboxAuth.of({
        authenticate,
        authorize,
        token,
        bootstrap: Effect.sync(() => ({ pat: bootstrapPat, app: bootstrapApp })),
        createPat: Effect.fn("SandboxAuth.createPat")(function* (input) {
          const world = yield* store.world
          const user = yield* findUser(world, input.userId)
          const company =
            input.companyId === undefined ? user.companies[0]! : yield* findCompany(world, input.companyId)
          if (!user.companies.includes(company)) {
            return yield* validationFailed(`user ${user.id} does not belong to company ${input.companyId}`)
          }
          const pat: PersonalToken = {
            id: `pat_${String(++patCounter).padStart(8, "0")}`,
            token: randomToken(PAT_PREFIX),
            userId: user.id,
            company,
            label: input.label ?? "",
            canWrite: input.canWrite ?? false,
            revoked: false
          }
          pats.set(pat.token, pat)
          return pat
        }),
        setPatWrite: Effect.fn("SandboxAuth.setPatWrite")(function* (id, canWrite) {
          const pat = yield* patById(id)
          pat.canWrite = canWrite
          return pat
        }),
        revokePat: Effect.fn("SandboxAuth.revokePat")(function* (id) {
          const pat = yield* patById(id)
          pat.revoked = true
        }),
        pats: Effect.sync(() => [...pats.values()]),
        createApp: Effect.fn("SandboxAuth.createApp")(function* (input) {
          const world = yield* store.world
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
          apps.set(app.clientId, app)
          return app
        }),
        updateApp: Effect.fn("SandboxAuth.updateApp")(function* (clientId, patch) {
          const app = yield* appById(clientId)
          if (patch.enabled !== undefined) app.enabled = patch.enabled
          if (patch.mode !== undefined) app.mode = patch.mode
          if (patch.redirectUris !== undefined) app.redirectUris = patch.redirectUris
          return app
        }),
        rotateSecret: Effect.fn("SandboxAuth.rotateSecret")(function* (clientId) {
          const app = yield* appById(clientId)
          app.clientSecret = randomToken("secret_")
          return app
        }),
        deleteApp: Effect.fn("SandboxAuth.deleteApp")(function* (clientId) {
          yield* appById(clientId)
          apps.delete(clientId)
          revokeWhere((t) => t.clientId === clientId)
        }),
        app: appById,
        apps: Effect.sync(() => [...apps.values()]),
        connect: Effect.fn("SandboxAuth.connect")(function* (input) {
          const world = yield* store.world
          const now = yield* clock.now
          const app = yield* appById(input.clientId)
          const user = yield* findUser(world, input.userId)
          const company = yield* findCompany(world, input.companyId)
          const refusal = checkConnection(world, app, user.id, company)
          if (refusal !== undefined) return yield* forbidden("connection_refused", refusal)
          return issue({ clientId: app.clientId, userId: user.id, company }, app.scope, `fam_${++counter}`, now, world)
        }),
        disconnect: (key) =>
          Effect.sync(() =>
            revokeWhere((t) => t.clientId === key.clientId && t.userId === key.userId && t.company === key.company)
          ),
        setApprover: Effect.fn("SandboxAuth.setApprover")(function* (userId) {
          const user = yield* findUser(yield* store.world, userId)
          approver = user.id
        }),
        reset: Effect.gen(function* () {
          install(yield* store.world)
        })
      })
    })
  )
}
