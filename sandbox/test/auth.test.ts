/**
 * Conformance of authentication (spec §5): personal access tokens, the OAuth 2.0
 * authorization-code flow with PKCE, refresh rotation, one company per connection and the
 * sandbox-app rule, plus the refusals of §3 (disabled app, deactivated user).
 */
import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { Sandbox } from "../src/Sandbox.ts"
import { call, oauthConnect, pkcePair } from "../src/testing.ts"
import { admin, api, resetSandbox, sandboxLayer } from "./fixtures.ts"

const REDIRECT = "http://127.0.0.1:8080/oauth/callback"

/** The bootstrap app's credentials. */
const bootstrapApp = Effect.map(Sandbox, (sandbox) => ({
  clientId: sandbox.credentials.oauthClientId,
  clientSecret: sandbox.credentials.oauthClientSecret,
  redirectUri: REDIRECT
}))

const form = (fields: Record<string, string>) => ({
  method: "POST" as const,
  headers: { "content-type": "application/x-www-form-urlencoded" },
  body: new URLSearchParams(fields).toString()
})

/** GET /oauth/authorize without following the redirect; the callback URL's query. */
const authorize = (params: Record<string, string>) =>
  Effect.gen(function* () {
    const sandbox = yield* Sandbox
    const response = yield* call(sandbox.baseUrl, `/oauth/authorize?${new URLSearchParams(params)}`, {
      manualRedirect: true
    })
    const location = response.headers.location
    return { response, callback: location === undefined ? undefined : new URL(location).searchParams }
  })

const token = (fields: Record<string, string>) =>
  Effect.flatMap(Sandbox, (sandbox) => call(sandbox.baseUrl, "/oauth/token", form(fields)))

layer(sandboxLayer(), { excludeTestServices: true })("sandbox authentication", (it) => {
  describe("§5 personal access tokens", () => {
    it.effect("§5.1: a missing, malformed or unknown bearer token is 401 with {error, detail}", () =>
      Effect.gen(function* () {
        for (const token of [undefined, "crm_pat_unknown", "not-a-token"]) {
          const response = yield* api("/v1/me", { token })
          assert.strictEqual(response.status, 401, String(token))
          assert.strictEqual(response.json.error, "unauthorized")
          assert.isString(response.json.detail)
        }
        const basic = yield* api("/v1/me", { token: undefined, headers: { authorization: "Basic dXNlcjpwYXNz" } })
        assert.strictEqual(basic.status, 401)
      })
    )

    it.effect("§5.2: personal access tokens carry the fixed prefix crm_pat_", () =>
      Effect.gen(function* () {
        const a = yield* admin
        const created = yield* a.createToken({ userId: "usr_00000002" })
        assert.match(created.token, /^crm_pat_[A-Za-z0-9_-]{20,}$/)
        assert.match((yield* Sandbox).credentials.personalAccessToken, /^crm_pat_/)
      })
    )

    it.effect("§5.2: a new token is read-only: reads work, writes are 403, /v1/me says can_write false", () =>
      Effect.gen(function* () {
        const a = yield* admin
        const { token } = yield* a.createToken({ userId: "usr_00000002" })
        assert.strictEqual((yield* api("/v1/businesses", { token })).status, 200)
        const me = (yield* api("/v1/me", { token })).json
        assert.deepStrictEqual(me.api_access, { auth_type: "personal_access_token", scope: "read", can_write: false })
        const write = yield* api("/v1/prospects", {
          token,
          method: "POST",
          json: { book_id: "bk_00000001", first_name: "Read", last_name: "Only" }
        })
        assert.strictEqual(write.status, 403)
        assert.strictEqual(write.json.error, "write_access_required")
      })
    )

    it.effect("§5.2: write access enabled on the token takes effect immediately", () =>
      Effect.gen(function* () {
        const a = yield* admin
        const created = yield* a.createToken({ userId: "usr_00000001" })
        yield* a.setTokenWrite(created.id, true)
        const me = (yield* api("/v1/me", { token: created.token })).json
        assert.strictEqual(me.api_access.can_write, true)
        const write = yield* api("/v1/prospects", {
          token: created.token,
          method: "POST",
          json: { book_id: "bk_00000001", first_name: "Now", last_name: "Writable" }
        })
        assert.strictEqual(write.status, 201)
      })
    )

    it.effect("§5.2: a revoked token is refused", () =>
      Effect.gen(function* () {
        const a = yield* admin
        const created = yield* a.createToken({ userId: "usr_00000001" })
        yield* a.revokeToken(created.id)
        assert.strictEqual((yield* api("/v1/me", { token: created.token })).status, 401)
      })
    )

    it.effect("§3: tokens of a deactivated user are refused until the user is active again", () =>
      Effect.gen(function* () {
        const a = yield* admin
        const created = yield* a.createToken({ userId: "usr_00000003" })
        yield* a.deactivateUser("usr_00000003")
        assert.strictEqual((yield* api("/v1/me", { token: created.token })).status, 401)
        yield* a.activateUser("usr_00000003")
        assert.strictEqual((yield* api("/v1/me", { token: created.token })).status, 200)
      })
    )
  })

  describe("§5 OAuth 2.0", () => {
    it.effect("§5.3: the authorization-code flow with PKCE issues a token pair bound to a company", () =>
      Effect.gen(function* () {
        const sandbox = yield* Sandbox
        const tokens = yield* oauthConnect(sandbox.baseUrl, yield* bootstrapApp)
        assert.match(tokens.access_token, /^crm_oat_/)
        assert.match(tokens.refresh_token, /^crm_ort_/)
        assert.strictEqual(tokens.token_type, "Bearer")
        assert.strictEqual(tokens.expires_in, 7200)
        assert.strictEqual(tokens.company_id, "cmp_00000001")
        const me = (yield* api("/v1/me", { token: tokens.access_token })).json
        assert.deepStrictEqual(me.api_access, { auth_type: "oauth", scope: "read write", can_write: true })
      })
    )

    it.effect("§5.3: the callback carries the same state; a missing or plain PKCE challenge is refused", () =>
      Effect.gen(function* () {
        const app = yield* bootstrapApp
        const pkce = pkcePair()
        const base = {
          response_type: "code",
          client_id: app.clientId,
          redirect_uri: REDIRECT,
          state: "opaque-state-123"
        }
        const ok = yield* authorize({ ...base, code_challenge: pkce.challenge, code_challenge_method: "S256" })
        assert.strictEqual(ok.response.status, 302)
        assert.strictEqual(ok.callback?.get("state"), "opaque-state-123")
        assert.isString(ok.callback?.get("code"))
        for (const pkceParams of [{}, { code_challenge: pkce.verifier, code_challenge_method: "plain" }]) {
          const refused = yield* authorize({ ...base, ...pkceParams })
          assert.strictEqual(refused.callback?.get("error"), "invalid_request")
          assert.strictEqual(refused.callback?.get("state"), "opaque-state-123")
        }
      })
    )

    it.effect("§5.3: an unregistered redirect URL or an unknown client is refused without redirecting", () =>
      Effect.gen(function* () {
        const app = yield* bootstrapApp
        const pkce = pkcePair()
        const params = {
          response_type: "code",
          state: "s",
          code_challenge: pkce.challenge,
          code_challenge_method: "S256"
        }
        const badRedirect = yield* authorize({
          ...params,
          client_id: app.clientId,
          redirect_uri: "https://evil.example/cb"
        })
        assert.strictEqual(badRedirect.response.status, 400)
        assert.isUndefined(badRedirect.callback)
        assert.strictEqual(badRedirect.response.json.error, "invalid_request")
        const badClient = yield* authorize({ ...params, client_id: "app_nope", redirect_uri: REDIRECT })
        assert.strictEqual(badClient.response.status, 400)
        assert.strictEqual(badClient.response.json.error, "invalid_client")
      })
    )

    it.effect("§5.3: the code exchange checks the verifier, the redirect URL, the client secret and single use", () =>
      Effect.gen(function* () {
        const app = yield* bootstrapApp
        const pkce = pkcePair()
        const code = (yield* authorize({
          response_type: "code",
          client_id: app.clientId,
          redirect_uri: REDIRECT,
          state: "s",
          code_challenge: pkce.challenge,
          code_challenge_method: "S256"
        })).callback!.get("code")!
        const exchange = {
          grant_type: "authorization_code",
          code,
          redirect_uri: REDIRECT,
          code_verifier: pkce.verifier,
          client_id: app.clientId,
          client_secret: app.clientSecret
        }
        const wrongSecret = yield* token({ ...exchange, client_secret: "secret_wrong" })
        assert.strictEqual(wrongSecret.status, 401)
        assert.strictEqual(wrongSecret.json.error, "invalid_client")
        const wrongVerifier = yield* token({ ...exchange, code_verifier: pkcePair().verifier })
        assert.strictEqual(wrongVerifier.json.error, "invalid_grant")
        const wrongRedirect = yield* token({ ...exchange, redirect_uri: "http://localhost:8080/oauth/callback" })
        assert.strictEqual(wrongRedirect.json.error, "invalid_grant")
        const first = yield* token(exchange)
        assert.strictEqual(first.status, 200)
        const replay = yield* token(exchange)
        assert.strictEqual(replay.status, 400)
        assert.strictEqual(replay.json.error, "invalid_grant")
        // a replayed code revokes what it issued (RFC 6749 §4.1.2)
        assert.strictEqual((yield* api("/v1/me", { token: first.json.access_token })).status, 401)
      })
    )

    it.effect("§5.3: /oauth/token accepts JSON bodies and HTTP Basic client authentication", () =>
      Effect.gen(function* () {
        const sandbox = yield* Sandbox
        const app = yield* bootstrapApp
        const pkce = pkcePair()
        const code = (yield* authorize({
          response_type: "code",
          client_id: app.clientId,
          redirect_uri: REDIRECT,
          state: "s",
          code_challenge: pkce.challenge,
          code_challenge_method: "S256"
        })).callback!.get("code")!
        const response = yield* call(sandbox.baseUrl, "/oauth/token", {
          method: "POST",
          headers: {
            authorization: `Basic ${Buffer.from(`${app.clientId}:${app.clientSecret}`).toString("base64")}`
          },
          json: { grant_type: "authorization_code", code, redirect_uri: REDIRECT, code_verifier: pkce.verifier }
        })
        assert.strictEqual(response.status, 200)
        assert.strictEqual(response.headers["cache-control"], "no-store")
        assert.match(response.json.access_token, /^crm_oat_/)
      })
    )

    it.effect("§5.3: refresh tokens rotate; the old one is invalid after use and its reuse is invalid_grant", () =>
      Effect.gen(function* () {
        const sandbox = yield* Sandbox
        const app = yield* bootstrapApp
        const first = yield* oauthConnect(sandbox.baseUrl, app)
        const refresh = {
          grant_type: "refresh_token",
          client_id: app.clientId,
          client_secret: app.clientSecret
        }
        const second = yield* token({ ...refresh, refresh_token: first.refresh_token })
        assert.strictEqual(second.status, 200)
        assert.notStrictEqual(second.json.refresh_token, first.refresh_token)
        assert.strictEqual(second.json.company_id, first.company_id)
        const reuse = yield* token({ ...refresh, refresh_token: first.refresh_token })
        assert.strictEqual(reuse.status, 400)
        assert.strictEqual(reuse.json.error, "invalid_grant")
        assert.strictEqual((yield* api("/v1/me", { token: second.json.access_token })).status, 200)
        const third = yield* token({ ...refresh, refresh_token: second.json.refresh_token })
        assert.strictEqual(third.status, 200)
      })
    )

    it.effect("§5.3: a rotated client secret replaces the old one", () =>
      Effect.gen(function* () {
        const a = yield* admin
        const app = yield* a.registerApp({ redirectUris: [REDIRECT] })
        const rotated = yield* a.rotateAppSecret(app.client_id)
        assert.notStrictEqual(rotated.client_secret, app.client_secret)
        const sandbox = yield* Sandbox
        const options = { clientId: app.client_id, redirectUri: REDIRECT }
        const old = yield* Effect.flip(oauthConnect(sandbox.baseUrl, { ...options, clientSecret: app.client_secret }))
        assert.match(old.message, /invalid_client/)
        yield* oauthConnect(sandbox.baseUrl, { ...options, clientSecret: rotated.client_secret })
      })
    )

    it.effect("§5.4: each connection authorizes one company; a user in two companies gets two token pairs", () =>
      Effect.gen(function* () {
        const sandbox = yield* Sandbox
        const a = yield* admin
        const app = yield* a.registerApp({ redirectUris: [REDIRECT], mode: "production" })
        const connect = (companyId: string) =>
          oauthConnect(sandbox.baseUrl, {
            clientId: app.client_id,
            clientSecret: app.client_secret,
            redirectUri: REDIRECT,
            companyId,
            loginHint: "usr_00000001"
          })
        const own = yield* connect("cmp_00000001")
        const other = yield* connect("cmp_00000002")
        assert.strictEqual(own.company_id, "cmp_00000001")
        assert.strictEqual(other.company_id, "cmp_00000002")
        const ownBooks = (yield* api("/v1/books", { token: own.access_token })).json.data.map((b: any) => b.id)
        const otherBooks = (yield* api("/v1/books", { token: other.access_token })).json.data.map((b: any) => b.id)
        assert.deepStrictEqual(ownBooks, ["bk_00000001", "bk_00000002", "bk_00000003"])
        assert.deepStrictEqual(otherBooks, ["bk_00000004"])
        const notMember = yield* Effect.flip(connect("cmp_00000003"))
        assert.match(notMember.message, /access_denied/)
      })
    )

    it.effect("§5.5: an app in sandbox mode connects only to the partner's own company", () =>
      Effect.gen(function* () {
        const sandbox = yield* Sandbox
        const a = yield* admin
        const app = yield* a.registerApp({ redirectUris: [REDIRECT], ownerCompanyId: "cmp_00000001" })
        assert.strictEqual(app.mode, "sandbox")
        const options = {
          clientId: app.client_id,
          clientSecret: app.client_secret,
          redirectUri: REDIRECT,
          loginHint: "usr_00000001",
          companyId: "cmp_00000002"
        }
        const refused = yield* Effect.flip(oauthConnect(sandbox.baseUrl, options))
        assert.match(refused.message, /access_denied.*sandbox mode/)
        yield* a.updateApp(app.client_id, { mode: "production" })
        const granted = yield* oauthConnect(sandbox.baseUrl, options)
        assert.strictEqual(granted.company_id, "cmp_00000002")
      })
    )

    it.effect("§3: tokens of a disabled app are refused; a deleted app's tokens stop working", () =>
      Effect.gen(function* () {
        const sandbox = yield* Sandbox
        const a = yield* admin
        const app = yield* a.registerApp({ redirectUris: [REDIRECT] })
        const tokens = yield* oauthConnect(sandbox.baseUrl, {
          clientId: app.client_id,
          clientSecret: app.client_secret,
          redirectUri: REDIRECT
        })
        yield* a.updateApp(app.client_id, { enabled: false })
        assert.strictEqual((yield* api("/v1/me", { token: tokens.access_token })).status, 401)
        yield* a.updateApp(app.client_id, { enabled: true })
        assert.strictEqual((yield* api("/v1/me", { token: tokens.access_token })).status, 200)
        yield* a.deleteApp(app.client_id)
        assert.strictEqual((yield* api("/v1/me", { token: tokens.access_token })).status, 401)
      })
    )

    it.effect("§3: an administrative disconnect revokes the connection's tokens", () =>
      Effect.gen(function* () {
        const a = yield* admin
        const app = (yield* a.apps)[0]!
        const tokens = yield* a.connect({ clientId: app.client_id, userId: "usr_00000002", companyId: "cmp_00000001" })
        assert.strictEqual((yield* api("/v1/me", { token: tokens.access_token })).status, 200)
        yield* a.disconnect({ clientId: app.client_id, userId: "usr_00000002", companyId: "cmp_00000001" })
        assert.strictEqual((yield* api("/v1/me", { token: tokens.access_token })).status, 401)
        const refresh = yield* token({
          grant_type: "refresh_token",
          refresh_token: tokens.refresh_token,
          client_id: app.client_id,
          client_secret: app.client_secret
        })
        assert.strictEqual(refresh.json.error, "invalid_grant")
      })
    )

    it.effect("§5.9: access tokens expire after their lifetime (401 token_expired); refresh still works", () =>
      Effect.gen(function* () {
        yield* resetSandbox
        const sandbox = yield* Sandbox
        const app = yield* bootstrapApp
        const tokens = yield* oauthConnect(sandbox.baseUrl, app)
        yield* sandbox.admin.advanceClock("2h")
        const expired = yield* api("/v1/me", { token: tokens.access_token })
        assert.strictEqual(expired.status, 401)
        assert.strictEqual(expired.json.error, "token_expired")
        const refreshed = yield* token({
          grant_type: "refresh_token",
          refresh_token: tokens.refresh_token,
          client_id: app.clientId,
          client_secret: app.clientSecret
        })
        assert.strictEqual(refreshed.status, 200)
        assert.strictEqual((yield* api("/v1/me", { token: refreshed.json.access_token })).status, 200)
        yield* sandbox.admin.advanceClock("31d")
        const stale = yield* token({
          grant_type: "refresh_token",
          refresh_token: refreshed.json.refresh_token,
          client_id: app.clientId,
          client_secret: app.clientSecret
        })
        assert.strictEqual(stale.json.error, "invalid_grant")
        yield* resetSandbox
      })
    )
  })
})
