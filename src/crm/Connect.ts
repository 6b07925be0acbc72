/**
 * `crm-sync connect`: the OAuth authorization-code flow with PKCE (spec §5.3) for one configured
 * connection, ending with its token pair stored encrypted in `crm_sync.credentials`. One connection
 * authorizes one company (spec §5.4): a user in several companies configures one connection per
 * company and connects each.
 *
 * Also here: `reportAccess`, the `GET /v1/me` summary the daemon logs at start (auth type and
 * whether writes are enabled, spec §5.2).
 */
import * as Console from "effect/Console"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Schema from "effect/Schema"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import { timingSafeEqual } from "node:crypto"
import { AppConfig, type Connection } from "../config/AppConfig.ts"
import { CrmClient, UnknownConnection } from "./CrmClient.ts"
import { Credentials } from "./Credentials.ts"
import { type Authorization, authorizeUrl, exchangeCode, makeAuthorization, type OAuthSettings } from "./OAuth.ts"

export class ConnectFailed extends Schema.TaggedError<ConnectFailed>()("ConnectFailed", {
  connection: Schema.String,
  message: Schema.String
}) {}

export interface ConnectOptions {
  /** Receives the address to open in a browser; by default it is printed. */
  readonly onAuthorizeUrl?: (url: string) => Effect.Effect<void>
  /**
   * The address to listen on for the callback (default: the redirect_uri's host). In a container
   * whose port is published (`docker run -p 127.0.0.1:8765:8765`), `0.0.0.0`: the redirect still
   * names the loopback address the browser's machine forwards.
   */
  readonly listenHost?: string | undefined
  /** How long to wait for the browser to come back (default 10 minutes). */
  readonly timeout?: Duration.Input
}

export interface Connected {
  readonly connection: string
  /** The CRM user who authorized, from `GET /v1/me` (undefined if that call failed). */
  readonly userId: string | undefined
  readonly canWrite: boolean | undefined
  readonly scope: string | undefined
  readonly expiresIn: Duration.Duration | undefined
}

interface Callback {
  readonly url: URL
  readonly response: ServerResponse
}

const page = (title: string, text: string) =>
  `<!doctype html><meta charset="utf-8"><title>${title}</title><p>${text.replace(/[<>&]/g, "")}</p>`

const reply = (response: ServerResponse, status: number, title: string, text: string) =>
  Effect.sync(() => {
    response.writeHead(status, { "content-type": "text/html; charset=utf-8", connection: "close" })
    response.end(page(title, text))
  })

const sameState = (expected: string, received: string | null) => {
  if (received === null) return false
  const a = Buffer.from(expected)
  const b = Buffer.from(received)
  return a.length === b.length && timingSafeEqual(a, b)
}

/** A loopback HTTP server that queues each request for the flow to answer; closed with its scope. */
const listen = (connection: string, host: string, port: number, queue: Queue.Queue<Callback>) =>
  Effect.acquireRelease(
    Effect.callback<Server, ConnectFailed>((resume) => {
      const server = createServer((request: IncomingMessage, response: ServerResponse) => {
        Queue.offerUnsafe(queue, { url: new URL(request.url ?? "/", `http://${host}:${port}`), response })
      })
      server.once("error", (error) =>
        resume(
          Effect.fail(
            new ConnectFailed({
              connection,
              message: `cannot listen on ${host}:${port} for the callback: ${error.message}`
            })
          )
        )
      )
      server.listen(port, host, () => resume(Effect.succeed(server)))
    }),
    (server) =>
      Effect.callback<void>((resume) => {
        server.close(() => resume(Effect.void))
        server.closeAllConnections()
      })
  )

const failure = (connection: string, message: string) => new ConnectFailed({ connection, message })

/** A connection ready for the flow, and where its callback is listened for. */
interface FlowSettings {
  readonly connection: Connection
  readonly oauth: OAuthSettings
  readonly redirect: URL
  readonly host: string
  readonly port: number
}

/** The connection's settings, checked: an OAuth connection, an encryption key, a local redirect. */
const flowSettings = Effect.fnUntraced(function* (connectionName: string, options: ConnectOptions | undefined) {
  const config = yield* AppConfig
  const connection = config.connections.find((candidate) => candidate.name === connectionName)
  if (connection === undefined) return yield* new UnknownConnection({ connection: connectionName })
  const oauth = connection.oauth
  if (connection.credential !== "oauth" || oauth === undefined) {
    return yield* failure(
      connection.name,
      `connection ${connection.name} is not an OAuth connection with oauth settings`
    )
  }
  if (config.encryption_key === undefined) {
    return yield* failure(
      connection.name,
      "CRM_SYNC_ENCRYPTION_KEY is not set: OAuth tokens are stored encrypted with it"
    )
  }
  const redirect = new URL(oauth.redirect_uri)
  if (redirect.protocol !== "http:") {
    return yield* failure(
      connection.name,
      `redirect_uri must be a local http:// address crm-sync can listen on, not ${redirect.protocol}`
    )
  }
  const host = options?.listenHost ?? redirect.hostname.replace(/^\[|\]$/g, "")
  const port = redirect.port === "" ? 80 : Number(redirect.port)
  return { connection, oauth, redirect, host, port } satisfies FlowSettings
})

/**
 * The authorization code a callback carries, once it is the answer to our request; undefined for
 * a request the flow does not take (anything but the callback path, a forged state): it goes on
 * waiting. A refused authorization or a callback without a code ends the flow.
 */
const callbackCode = Effect.fnUntraced(function* (
  settings: FlowSettings,
  authorization: Authorization,
  { url, response }: Callback
) {
  const name = settings.connection.name
  if (url.pathname !== settings.redirect.pathname) {
    yield* reply(response, 404, "Not found", "This is crm-sync's OAuth callback; nothing else is served here.")
    return undefined
  }
  // RFC 6749 §10.12: a callback that does not carry our state is not the answer to our
  // request — refused, and the flow goes on waiting for the one that is (anyone who can reach
  // the port could send a forged one first).
  if (!sameState(authorization.state, url.searchParams.get("state"))) {
    yield* reply(response, 400, "crm-sync: refused", "The callback's state does not match; nothing was stored.")
    yield* Effect.logWarning("connect: a callback whose state does not match was refused; still waiting").pipe(
      Effect.annotateLogs({ connection: name })
    )
    return undefined
  }
  const error = url.searchParams.get("error")
  if (error !== null) {
    const description = (url.searchParams.get("error_description") ?? "").slice(0, 200)
    yield* reply(response, 400, "crm-sync: not connected", `The authorization was refused: ${error}. ${description}`)
    return yield* failure(
      name,
      `the authorization was refused: ${error}${description === "" ? "" : ` (${description})`}`
    )
  }
  const code = url.searchParams.get("code")
  if (code === null || code === "") {
    yield* reply(response, 400, "crm-sync: not connected", "The callback carries no authorization code.")
    return yield* failure(name, "the callback carries no authorization code")
  }
  return code
})

/** Exchanges the code for the token pair, stores it, and asks whose grant it is; the page says how it ended. */
const complete = Effect.fnUntraced(function* (
  connection: Connection,
  code: string,
  verifier: Authorization["verifier"],
  response: ServerResponse
) {
  const credentials = yield* Credentials
  const tokens = yield* exchangeCode(connection, code, verifier).pipe(
    Effect.tapError(() =>
      reply(response, 502, "crm-sync: not connected", "The code could not be exchanged for tokens; see the log.")
    )
  )
  yield* credentials
    .store(connection, tokens)
    .pipe(
      Effect.tapError(() =>
        reply(response, 500, "crm-sync: not connected", "The tokens could not be stored; see the log.")
      )
    )
  yield* reply(
    response,
    200,
    "crm-sync: connected",
    `crm-sync is connected as ${connection.name}. You can close this tab.`
  )
  // Whose grant this is decides the connection's user bucket (spec §8): one user connected
  // to several companies (§5.4) has one budget for all of them. Best effort: without it the
  // connection keeps a bucket of its own.
  const access = yield* CrmClient.make(connection.name).pipe(
    Effect.flatMap((client) => client.access()),
    Effect.tap((me) => credentials.recordUser(connection, me.userId)),
    Effect.tapError((error) =>
      Effect.logWarning("connected, but GET /v1/me failed; the connection's rate bucket is its own").pipe(
        Effect.annotateLogs({ connection: connection.name, error: error.message })
      )
    ),
    Effect.option
  )
  yield* Effect.logInfo("connected").pipe(Effect.annotateLogs({ connection: connection.name }))
  return {
    connection: connection.name,
    userId: Option.getOrUndefined(Option.map(access, (me) => me.userId)),
    canWrite: Option.getOrUndefined(Option.map(access, (me) => me.canWrite)),
    scope: tokens.scope,
    expiresIn: tokens.expiresIn
  } satisfies Connected
})

/**
 * Runs the authorization-code flow for `connectionName` and stores the token pair. Needs the
 * connection's `oauth` settings and `CRM_SYNC_ENCRYPTION_KEY`.
 *
 * The flow: make a PKCE verifier and a `state`; listen on the connection's `redirect_uri` (a
 * loopback address, RFC 8252 §7.3); hand the authorization address to the caller (the CLI prints
 * it, a test follows it); wait for the browser's callback; refuse it unless its `state` is ours;
 * exchange the code with the verifier; store the pair; ask `GET /v1/me` whose grant it is (the
 * user's rate bucket is shared by all their connections, spec §8). The callback page says how it
 * ended, and so does the returned value or error.
 */
export const connect = Effect.fn("Connect.connect")(function* (connectionName: string, options?: ConnectOptions) {
  const settings = yield* flowSettings(connectionName, options)
  const { connection } = settings
  const authorization = yield* makeAuthorization
  const address = authorizeUrl(settings.oauth, authorization)

  const flow = Effect.gen(function* () {
    const callbacks = yield* Queue.unbounded<Callback>()
    yield* listen(connection.name, settings.host, settings.port, callbacks)
    yield* (
      options?.onAuthorizeUrl ??
      ((url: string) => Console.log(`Open this address in a browser to connect ${connection.name}:\n\n  ${url}\n`))
    )(address)
    while (true) {
      const callback = yield* Queue.take(callbacks)
      const code = yield* callbackCode(settings, authorization, callback)
      if (code === undefined) continue
      return yield* complete(connection, code, authorization.verifier, callback.response)
    }
  })

  return yield* Effect.scoped(flow).pipe(
    Effect.timeoutOrElse({
      duration: options?.timeout ?? Duration.minutes(10),
      orElse: () => Effect.fail(failure(connection.name, "no callback arrived in time; run `crm-sync connect` again"))
    })
  )
})

/** `GET /v1/me`, logged: which kind of token this is and whether it may write (spec §5.2, §2.11). */
export const reportAccess = Effect.fn("Connect.reportAccess")(function* () {
  const client = yield* CrmClient
  const access = yield* client.access()
  yield* Effect.logInfo(
    `connection ${access.connection}: ${access.authType} token, write access ${access.canWrite ? "enabled" : "disabled (read-only)"}`
  ).pipe(
    Effect.annotateLogs({
      connection: access.connection,
      auth_type: access.authType,
      can_write: access.canWrite,
      scope: access.scope ?? ""
    })
  )
  return access
})
