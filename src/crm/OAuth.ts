/**
 * The OAuth 2.0 side of spec §5.3: PKCE (S256) and the two token requests crm-sync makes to
 * `{token_url}` — the authorization-code exchange (`crm-sync connect`) and the `refresh_token`
 * grant (Credentials). Both authenticate the app with HTTP Basic (RFC 6749 §2.3.1, the method every
 * authorization server must accept) and send a form body (§4.1.3, §6).
 *
 * These requests go to the authorization server, not to the API, so they take no rate-budget
 * permit (spec §8 limits API requests). They still get a timeout, no redirects and no retries: a
 * refresh is retried by its caller, and only while it holds the connection's lock.
 *
 * `invalid_grant` (RFC 6749 §5.2) becomes `NeedsReauthorization`: the refresh token is spent or
 * revoked and only a new `connect` helps. Token values never appear in an error or a log line.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as HttpClient from "effect/http/HttpClient"
import * as HttpClientRequest from "effect/http/HttpClientRequest"
import { createHash, randomBytes } from "node:crypto"
import type { Connection } from "../config/AppConfig.ts"
import {
  CrmError,
  type CrmErrorReason,
  Invalid,
  MissingCredentials,
  NeedsReauthorization,
  Server,
  Transport,
  trimDetail,
  Undecodable
} from "./CrmError.ts"

/** The token endpoint's timeout: these calls sit inside a held lock, so they must end. */
const TOKEN_TIMEOUT = Duration.seconds(30)

export type OAuthSettings = NonNullable<Connection["oauth"]>

/** What a token response gives (RFC 6749 §5.1). */
export interface TokenSet {
  readonly accessToken: Redacted.Redacted<string>
  /** Absent when the server does not rotate it: the stored one stays in use. */
  readonly refreshToken: Redacted.Redacted<string> | undefined
  readonly expiresIn: Duration.Duration | undefined
  readonly scope: string | undefined
}

const TokenResponse = Schema.Struct({
  access_token: Schema.NonEmptyString,
  token_type: Schema.optionalKey(Schema.String),
  expires_in: Schema.optionalKey(Schema.Union([Schema.Finite, Schema.NumberFromString])),
  refresh_token: Schema.optionalKey(Schema.NullOr(Schema.String)),
  scope: Schema.optionalKey(Schema.NullOr(Schema.String))
})

/** RFC 6749 §5.2's `{error, error_description}`; some servers put the text in `detail` (spec §7's shape). */
const TokenErrorBody = Schema.Struct({
  error: Schema.String,
  error_description: Schema.optionalKey(Schema.NullOr(Schema.String)),
  detail: Schema.optionalKey(Schema.NullOr(Schema.String))
})

/** A PKCE pair and the `state` of one authorization (RFC 7636, RFC 6749 §10.12). */
export interface Authorization {
  readonly verifier: Redacted.Redacted<string>
  readonly challenge: string
  readonly state: string
}

const base64url = (bytes: Uint8Array) => Buffer.from(bytes).toString("base64url")

/** 32 random bytes of verifier (43 characters), its S256 challenge, and 16 bytes of state. */
export const makeAuthorization: Effect.Effect<Authorization> = Effect.sync(() => {
  const verifier = base64url(randomBytes(32))
  return {
    verifier: Redacted.make(verifier),
    challenge: base64url(createHash("sha256").update(verifier).digest()),
    state: base64url(randomBytes(16))
  }
})

/** The address the user opens to authorize crm-sync (RFC 6749 §4.1.1 with RFC 7636 §4.3). */
export const authorizeUrl = (oauth: OAuthSettings, authorization: Authorization): string => {
  const url = new URL(oauth.auth_url)
  url.searchParams.set("response_type", "code")
  url.searchParams.set("client_id", oauth.client_id)
  url.searchParams.set("redirect_uri", oauth.redirect_uri)
  url.searchParams.set("state", authorization.state)
  url.searchParams.set("code_challenge", authorization.challenge)
  url.searchParams.set("code_challenge_method", "S256")
  if (oauth.scope !== undefined && oauth.scope !== "") url.searchParams.set("scope", oauth.scope)
  // Spec §5.4: each connection authorizes one company; where the server lets the app ask for one.
  if (oauth.company_id !== undefined) url.searchParams.set("company_id", oauth.company_id)
  return url.toString()
}

/** RFC 6749 §2.3.1: id and secret are form-encoded before they are joined and base64-encoded. */
const formEncode = (value: string) => encodeURIComponent(value).replace(/%20/g, "+")

const tokenRequest = Effect.fnUntraced(function* (
  operation: string,
  connection: Connection,
  grant: Record<string, string>
) {
  const client = yield* HttpClient.HttpClient
  const fail = (reason: CrmErrorReason) => new CrmError({ operation, connection: connection.name, attempts: 1, reason })
  const oauth = connection.oauth
  if (oauth === undefined) {
    return yield* fail(new MissingCredentials({ detail: `connection ${connection.name} has no oauth settings` }))
  }
  const request = HttpClientRequest.post(oauth.token_url).pipe(
    HttpClientRequest.setHeader(
      "authorization",
      `Basic ${Buffer.from(`${formEncode(oauth.client_id)}:${formEncode(Redacted.value(oauth.client_secret))}`).toString("base64")}`
    ),
    HttpClientRequest.acceptJson,
    HttpClientRequest.bodyUrlParams({ ...grant, client_id: oauth.client_id })
  )
  const response = yield* client.execute(request).pipe(
    Effect.mapError(() => fail(new Transport({ kind: "network", detail: "token endpoint unreachable" }))),
    Effect.timeoutOrElse({
      duration: TOKEN_TIMEOUT,
      orElse: () => Effect.fail(fail(new Transport({ kind: "timeout" })))
    })
  )
  const text = yield* response.text.pipe(
    Effect.mapError(() => fail(new Transport({ kind: "network", detail: "the token response was cut off" })))
  )
  const json = parseJson(text)
  if (response.status >= 300 && response.status < 400) {
    return yield* fail(new Transport({ kind: "redirect", detail: `token endpoint answered ${response.status}` }))
  }
  if (response.status >= 500) return yield* fail(new Server({ status: response.status }))
  if (response.status >= 400) {
    const body = Option.flatMap(json, (value) => Schema.decodeUnknownOption(TokenErrorBody)(value))
    const code = Option.getOrUndefined(Option.map(body, (b) => b.error))
    const detail = trimDetail(
      Option.getOrUndefined(Option.flatMap(body, (b) => Option.fromNullishOr(b.error_description ?? b.detail)))
    )
    if (code === "invalid_grant") {
      return yield* fail(new NeedsReauthorization(detail === undefined ? {} : { detail }))
    }
    return yield* fail(
      new Invalid({
        status: response.status,
        ...(code === undefined ? {} : { code }),
        ...(detail === undefined ? {} : { detail })
      })
    )
  }
  if (Option.isNone(json)) {
    return yield* fail(new Undecodable({ status: response.status, malformed: true }))
  }
  const body = yield* Schema.decodeUnknownEffect(TokenResponse)(json.value).pipe(
    Effect.mapError(() =>
      fail(new Undecodable({ status: response.status, malformed: false, detail: "not an OAuth token response" }))
    )
  )
  return {
    accessToken: Redacted.make(body.access_token),
    refreshToken:
      body.refresh_token === undefined || body.refresh_token === null || body.refresh_token === ""
        ? undefined
        : Redacted.make(body.refresh_token),
    expiresIn: body.expires_in === undefined || body.expires_in <= 0 ? undefined : Duration.seconds(body.expires_in),
    scope: body.scope ?? undefined
  } satisfies TokenSet
})

const parseJson = Schema.decodeUnknownOption(Schema.fromJsonString(Schema.Unknown))

/** Exchanges an authorization code (RFC 6749 §4.1.3 with the PKCE verifier of RFC 7636 §4.5). */
export const exchangeCode = (connection: Connection, code: string, verifier: Redacted.Redacted<string>) =>
  tokenRequest("OAuth.exchangeCode", connection, {
    grant_type: "authorization_code",
    code,
    redirect_uri: connection.oauth?.redirect_uri ?? "",
    code_verifier: Redacted.value(verifier)
  })

/** Trades a refresh token for a new token pair (RFC 6749 §6). */
export const refreshGrant = (connection: Connection, refreshToken: Redacted.Redacted<string>) =>
  tokenRequest("OAuth.refresh", connection, {
    grant_type: "refresh_token",
    refresh_token: Redacted.value(refreshToken)
  })
