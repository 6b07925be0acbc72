/**
 * The CRM sandbox as one service: `Sandbox.layer(options)` generates the data, starts the HTTP
 * server on `options.port` (0 picks a free one) and provides `{ baseUrl, port, admin,
 * credentials }`. Tests start it in-process; `crm-sync sandbox` runs it as a process. The layer
 * wires the sandbox's internal services, which nothing outside this folder needs to name, and
 * gives them the live clock: a `TestClock` in the caller's context does not reach the sandbox.
 */
import { NodeHttpServer } from "@effect/platform-node"
import { Clock, Context, Effect, Layer } from "effect"
import { HttpServer } from "effect/http"
import { createServer } from "node:http"
import { SandboxActions } from "./Actions.ts"
import { SandboxAdmin } from "./Admin.ts"
import { SandboxAuth } from "./Auth.ts"
import { SandboxFaults } from "./Faults.ts"
import { SandboxIdempotency } from "./Idempotency.ts"
import { type ResolvedOptions, resolveOptions, SandboxConfig, type SandboxOptions } from "./Options.ts"
import { SandboxRateLimiter } from "./RateLimiter.ts"
import { SandboxRequestLog } from "./RequestLog.ts"
import { SandboxClock } from "./SandboxClock.ts"
import { makeHttpApp } from "./Server.ts"
import { SandboxStore } from "./Store.ts"
import { SandboxWebhooks } from "./Webhooks.ts"
import { SandboxWebhookSender } from "./WebhookSender.ts"

export interface SandboxCredentials {
  /** A write-enabled personal access token of the first user of the partner's own company. */
  readonly personalAccessToken: string
  readonly oauthClientId: string
  readonly oauthClientSecret: string
  readonly oauthRedirectUris: ReadonlyArray<string>
  /** The user the sandbox signs in as at `/oauth/authorize`, and that user's company. */
  readonly userId: string
  readonly companyId: string
}

export class Sandbox extends Context.Service<
  Sandbox,
  {
    /** `http://host:port`; API paths add `/v1/...`. */
    readonly baseUrl: string
    readonly port: number
    readonly options: ResolvedOptions
    readonly credentials: SandboxCredentials
    readonly admin: SandboxAdmin["Service"]
  }
>()("crm-sync/sandbox/Sandbox") {
  /** The sandbox's services, without the HTTP server (for tests of the internals). */
  static readonly internals = (options: ResolvedOptions) => {
    const config = Layer.succeed(SandboxConfig, options)
    const clock = SandboxClock.layer.pipe(Layer.provideMerge(config))
    const base = Layer.mergeAll(SandboxFaults.layer, SandboxRequestLog.layer, SandboxWebhookSender.layer).pipe(
      Layer.provideMerge(clock)
    )
    const store = SandboxStore.layer.pipe(Layer.provideMerge(base))
    const auth = SandboxAuth.layer.pipe(Layer.provideMerge(store))
    const limits = Layer.mergeAll(SandboxRateLimiter.layer, SandboxIdempotency.layer).pipe(Layer.provideMerge(auth))
    const webhooks = SandboxWebhooks.layer.pipe(Layer.provideMerge(limits))
    const actions = SandboxActions.layer.pipe(Layer.provideMerge(webhooks))
    return SandboxAdmin.layer.pipe(Layer.provideMerge(actions))
  }

  static readonly layer = (options: SandboxOptions = {}) =>
    Layer.unwrap(
      Effect.gen(function* () {
        const resolved = yield* resolveOptions(options)
        const server = Layer.effect(
          Sandbox,
          Effect.gen(function* () {
            const app = yield* makeHttpApp
            yield* HttpServer.serveEffect(app)
            const { address } = yield* HttpServer.HttpServer
            const port = "port" in address ? address.port : 0
            const host = resolved.host === "0.0.0.0" || resolved.host === "::" ? "127.0.0.1" : resolved.host
            const admin = yield* SandboxAdmin
            const { pat, app: oauthApp } = yield* (yield* SandboxAuth).bootstrap
            const state = yield* admin.state
            return Sandbox.of({
              baseUrl: `http://${host.includes(":") ? `[${host}]` : host}:${port}`,
              port,
              options: resolved,
              admin,
              credentials: {
                personalAccessToken: pat.token,
                oauthClientId: oauthApp.clientId,
                oauthClientSecret: oauthApp.clientSecret,
                oauthRedirectUris: oauthApp.redirectUris,
                userId: pat.userId,
                companyId: state.companies[pat.company]!.id
              }
            })
          })
        )
        return server.pipe(
          Layer.provide(NodeHttpServer.layer(createServer, { port: resolved.port, host: resolved.host })),
          Layer.provide(Sandbox.internals(resolved)),
          // the emulated CRM lives in real time even inside a TestClock test (move it with advanceClock)
          Layer.provide(Layer.succeed(Clock.Clock, Clock.Clock.defaultValue()))
        )
      })
    )
}
