/**
 * The OAuth 2.0 endpoints of spec §5: `GET /oauth/authorize` (authorization code with PKCE,
 * S256 only) and `POST /oauth/token` (code exchange and refresh-token rotation), and the token
 * pairs they issue. Every connection is checked against §5.5 (an app in sandbox mode connects
 * only to its owner's company) and the user's company membership, when the code is issued and
 * again at every exchange. A replayed code revokes what it issued (RFC 6749 §4.1.2).
 */
import { Effect } from "effect"
import { createHash, randomBytes } from "node:crypto"
import type { AuthDeps, AuthState, ConnectionKey, IssuedToken, OAuthApp, TokenResponse } from "./AuthTypes.ts"
import { ApiError } from "./errors.ts"
import type { World } from "./World.ts"
import type { ResolvedOptions } from "./Options.ts"
import { companyOrdinal } from "./Store.ts"

export const ACCESS_TOKEN_PREFIX = "crm_oat_"
export const REFRESH_TOKEN_PREFIX = "crm_ort_"

/** An OAuth error of RFC 6749 §5.2; rendered as `{error, error_description}`. */
const oauthError = (error: string, description: string, status = 400) =>
  new ApiError({ status, error, detail: description })

export const randomToken = (prefix: string, bytes = 24) => `${prefix}${randomBytes(bytes).toString("base64url")}`

const s256 = (verifier: string) => createHash("sha256").update(verifier).digest("base64url")

const loopback = (url: URL) => url.protocol === "http:" && ["127.0.0.1", "localhost", "[::1]"].includes(url.hostname)

/** RFC 8252 §7.3: a loopback redirect URI matches whatever its port. */
export const redirectMatches = (registered: string, given: string): boolean => {
  if (registered === given) return true
  const a = URL.parse(registered)
  const b = URL.parse(given)
  if (a === null || b === null) return false
  return loopback(a) && loopback(b) && a.hostname === b.hostname && a.pathname === b.pathname && a.search === b.search
}

/** §5.5 and company membership: may this user connect this app to this company? The refusal, if not. */
export const checkConnection = (world: World, app: OAuthApp, userId: string, company: number): string | undefined => {
  const user = world.usersById.get(userId)
  if (user === undefined || !user.active) return "the signed-in user is unknown or deactivated"
  if (!user.companies.includes(company)) return "the signed-in user does not belong to the selected company"
  if (app.mode === "sandbox" && company !== app.ownerCompany) {
    return "this app is in sandbox mode and can only connect to the partner's own company"
  }
  return undefined
}

export const revokeWhere = (state: AuthState, predicate: (token: IssuedToken) => boolean) => {
  for (const token of state.accessTokens.values()) if (predicate(token)) token.revoked = true
  for (const token of state.refreshTokens.values()) if (predicate(token)) token.revoked = true
}

/** A new access and refresh token of `family` for the connection. */
export const issue = (
  options: ResolvedOptions,
  state: AuthState,
  connection: { readonly key: ConnectionKey; readonly scope: string; readonly family: string },
  now: number,
  world: World
): TokenResponse => {
  const { key, scope, family } = connection
  const access = randomToken(ACCESS_TOKEN_PREFIX)
  const refresh = randomToken(REFRESH_TOKEN_PREFIX)
  const base = { clientId: key.clientId, userId: key.userId, company: key.company, scope, family }
  state.accessTokens.set(access, {
    ...base,
    expiresAt: now + options.accessTokenTtlMs,
    revoked: false,
    usedAt: undefined
  })
  state.refreshTokens.set(refresh, {
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

/** The registered redirect URI with `query` and the request's `state` added. */
const redirectTo = (redirectUri: string, params: URLSearchParams, query: Record<string, string>) => {
  const url = new URL(redirectUri)
  for (const [key, value] of Object.entries(query)) url.searchParams.set(key, value)
  const state = params.get("state")
  if (state !== null) url.searchParams.set("state", state)
  return url.toString()
}

/** What `/oauth/authorize` sends the browser back with: an error, or a new authorization code. */
const authorization = (
  deps: AuthDeps,
  world: World,
  app: OAuthApp,
  params: URLSearchParams,
  now: number
): Record<string, string> => {
  if (params.get("response_type") !== "code") {
    return { error: "unsupported_response_type", error_description: "response_type must be code" }
  }
  const challenge = params.get("code_challenge") ?? ""
  if (params.get("code_challenge_method") !== "S256" || !/^[A-Za-z0-9_-]{43}$/.test(challenge)) {
    return {
      error: "invalid_request",
      error_description: "PKCE is required: code_challenge (43 base64url chars) with code_challenge_method=S256"
    }
  }
  if (!app.enabled) return { error: "access_denied", error_description: "the app is disabled" }
  const hint = params.get("login_hint")
  const user =
    hint === null
      ? world.usersById.get(deps.state.approver)
      : world.users.find((u) => u.id === hint || u.email === hint)
  if (user === undefined) return { error: "access_denied", error_description: "unknown login_hint" }
  const companyId = params.get("company_id")
  const company = companyId === null ? user.companies[0]! : companyOrdinal(world, companyId)
  if (company === undefined) return { error: "access_denied", error_description: "unknown company_id" }
  const refusal = checkConnection(world, app, user.id, company)
  if (refusal !== undefined) return { error: "access_denied", error_description: refusal }
  const requested = (params.get("scope") ?? app.scope).split(/[\s+]+/).filter((s) => s.length > 0)
  const allowed = app.scope.split(" ")
  if (requested.some((scope) => !allowed.includes(scope))) {
    return { error: "invalid_scope", error_description: `allowed scopes: ${app.scope}` }
  }
  const code = randomToken("code_", 18)
  deps.state.codes.set(code, {
    clientId: app.clientId,
    userId: user.id,
    company,
    redirectUri: params.get("redirect_uri") ?? "",
    challenge,
    scope: requested.join(" "),
    expiresAt: now + deps.options.authorizationCodeTtlMs,
    used: false,
    family: undefined
  })
  return { code }
}

export const authorize = Effect.fn("SandboxAuth.authorize")(function* (deps: AuthDeps, params: URLSearchParams) {
  const world = yield* deps.store.world
  const now = yield* deps.clock.now
  const clientId = params.get("client_id") ?? ""
  const app = deps.state.apps.get(clientId)
  if (app === undefined) return yield* oauthError("invalid_client", "unknown client_id")
  const redirectUri = params.get("redirect_uri") ?? ""
  if (!app.redirectUris.some((registered) => redirectMatches(registered, redirectUri))) {
    // never redirect to an unregistered address (RFC 6749 §4.1.2.1)
    return yield* oauthError("invalid_request", "redirect_uri is not registered for this app")
  }
  return redirectTo(redirectUri, params, authorization(deps, world, app, params, now))
})

/** `grant_type=authorization_code`: a fresh, unexpired code of this app, its redirect URI and its PKCE verifier. */
const exchangeCode = Effect.fnUntraced(function* (
  deps: AuthDeps,
  world: World,
  app: OAuthApp,
  fields: Readonly<Record<string, string>>,
  now: number
) {
  const code = deps.state.codes.get(fields.code ?? "")
  if (code === undefined || code.clientId !== app.clientId) {
    return yield* oauthError("invalid_grant", "unknown authorization code")
  }
  if (code.used) {
    // RFC 6749 §4.1.2: a replayed code revokes what it issued
    if (code.family !== undefined) revokeWhere(deps.state, (t) => t.family === code.family)
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
  code.family = `fam_${++deps.state.counter}`
  return issue(deps.options, deps.state, { key: code, scope: code.scope, family: code.family }, now, world)
})

/** `grant_type=refresh_token`: rotation makes every refresh token single-use. */
const refreshGrant = Effect.fnUntraced(function* (
  deps: AuthDeps,
  world: World,
  app: OAuthApp,
  fields: Readonly<Record<string, string>>,
  now: number
) {
  const refresh = deps.state.refreshTokens.get(fields.refresh_token ?? "")
  if (refresh === undefined || refresh.clientId !== app.clientId) {
    return yield* oauthError("invalid_grant", "unknown refresh token")
  }
  if (refresh.usedAt !== undefined) {
    if (deps.options.revokeRefreshFamilyOnReuse) revokeWhere(deps.state, (t) => t.family === refresh.family)
    return yield* oauthError("invalid_grant", "refresh token already used (tokens rotate on every refresh)")
  }
  if (refresh.revoked) return yield* oauthError("invalid_grant", "refresh token revoked")
  if (now >= refresh.expiresAt) return yield* oauthError("invalid_grant", "refresh token expired")
  const refusal = checkConnection(world, app, refresh.userId, refresh.company)
  if (refusal !== undefined) return yield* oauthError("invalid_grant", refusal)
  refresh.usedAt = now
  return issue(deps.options, deps.state, { key: refresh, scope: refresh.scope, family: refresh.family }, now, world)
})

export const token = Effect.fn("SandboxAuth.token")(function* (
  deps: AuthDeps,
  fields: Readonly<Record<string, string>>,
  basic: { readonly clientId: string; readonly secret: string } | undefined
) {
  const world = yield* deps.store.world
  const now = yield* deps.clock.now
  const clientId = basic?.clientId ?? fields.client_id ?? ""
  const secret = basic?.secret ?? fields.client_secret ?? ""
  const app = deps.state.apps.get(clientId)
  if (app === undefined || app.clientSecret !== secret) {
    return yield* oauthError("invalid_client", "unknown client_id or wrong client_secret", 401)
  }
  if (!app.enabled) return yield* oauthError("unauthorized_client", "the app is disabled")
  switch (fields.grant_type) {
    case "authorization_code":
      return yield* exchangeCode(deps, world, app, fields, now)
    case "refresh_token":
      return yield* refreshGrant(deps, world, app, fields, now)
    default:
      return yield* oauthError("unsupported_grant_type", "grant_type must be authorization_code or refresh_token")
  }
})
