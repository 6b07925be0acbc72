/**
 * One signed delivery attempt (spec §5.7, §6.1): POST the payload with `Content-Type:
 * application/json` and the three `<prefix>-id`, `<prefix>-timestamp`, `<prefix>-signature`
 * headers, signed with the endpoint's `whsec_` secret by the `standardwebhooks` library. The
 * timestamp is the wall clock, not sandbox time: receivers check it against their own clock,
 * so an advanced sandbox clock must not make every signature stale.
 */
import { Context, Duration, Effect, Layer, Result } from "effect"
import { FetchHttpClient, HttpClient, HttpClientRequest } from "effect/http"
import { Webhook } from "standardwebhooks"
import { SandboxConfig } from "./Options.ts"
import { SandboxClock } from "./SandboxClock.ts"

export interface SendInput {
  readonly url: string
  readonly secret: string
  readonly messageId: string
  readonly payload: string
}

export interface SendResult {
  /** Null when no HTTP answer came (connection refused, timeout). */
  readonly status: number | null
  readonly error: string | null
  readonly headers: Readonly<Record<string, string>>
  readonly responseBody: string | null
  readonly durationMs: number
  readonly sentAt: number
}

/** Thin adapter over the library, which wants a `Date`. */
export const sign = (secret: string, messageId: string, timestampMs: number, payload: string): string =>
  new Webhook(secret).sign(messageId, new Date(timestampMs), payload)

export class SandboxWebhookSender extends Context.Service<
  SandboxWebhookSender,
  { send(input: SendInput): Effect.Effect<SendResult> }
>()("crm-sync/sandbox/SandboxWebhookSender") {
  static readonly layer = Layer.effect(
    SandboxWebhookSender,
    Effect.gen(function* () {
      const options = yield* SandboxConfig
      const clock = yield* SandboxClock
      const client = yield* HttpClient.HttpClient
      const prefix = options.webhookHeaderPrefix

      const send = Effect.fn("SandboxWebhookSender.send")(function* (input: SendInput) {
        const sentAt = yield* clock.wallNow
        const headers = {
          "content-type": "application/json",
          "user-agent": "crm-sandbox-webhooks/1.0",
          [`${prefix}-id`]: input.messageId,
          [`${prefix}-timestamp`]: String(Math.floor(sentAt / 1000)),
          [`${prefix}-signature`]: sign(input.secret, input.messageId, sentAt, input.payload)
        }
        const request = HttpClientRequest.post(input.url).pipe(
          HttpClientRequest.setHeaders(headers),
          HttpClientRequest.bodyText(input.payload, "application/json")
        )
        const outcome = yield* client.execute(request).pipe(
          Effect.flatMap((response) =>
            response.text.pipe(
              Effect.map((text) => ({ status: response.status, body: text.slice(0, 500) })),
              Effect.orElseSucceed(() => ({ status: response.status, body: "" }))
            )
          ),
          Effect.timeout(Duration.millis(options.webhookTimeoutMs)),
          Effect.result
        )
        const durationMs = (yield* clock.wallNow) - sentAt
        const result: SendResult = Result.isSuccess(outcome)
          ? {
              status: outcome.success.status,
              error: null,
              headers,
              responseBody: outcome.success.body,
              durationMs,
              sentAt
            }
          : { status: null, error: String(outcome.failure), headers, responseBody: null, durationMs, sentAt }
        return result
      })

      return SandboxWebhookSender.of({ send })
    })
  ).pipe(Layer.provide(FetchHttpClient.layer))
}
