/**
 * TranscriptReader: the follow-up read of `meeting.transcript_ready` (spec §6.4: the snapshot has
 * no transcript text; read `GET /v1/meetings/{meeting_id}/transcript`). It goes through CrmClient
 * at `interactive` priority, so it takes its permit from the shared RateBudget ahead of crawls and
 * backfills: a user who just finished a meeting is waiting for it.
 *
 * The connection is the delivering endpoint's (`webhooks.endpoints[].connection`), else the first
 * configured one; clients are made once per connection and kept. The transcript is returned as
 * received (the raw JSON object), for the warehouse to decode and store.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { AppConfig } from "../config/AppConfig.ts"
import { CrmClient, type CrmClientShape, type UnknownConnection } from "../crm/CrmClient.ts"
import type { CrmError } from "../crm/CrmError.ts"

export class TranscriptReader extends Context.Service<
  TranscriptReader,
  {
    /** The transcript response of a meeting, raw, read with the endpoint's connection. */
    readonly read: (endpoint: string, meetingId: string) => Effect.Effect<unknown, CrmError | UnknownConnection>
  }
>()("crm-sync/webhooks/TranscriptReader") {
  /** Reads through CrmClient; needs what CrmClient needs (budget, credentials, HTTP client). */
  static readonly layer = Layer.effect(
    TranscriptReader,
    Effect.gen(function* () {
      const config = yield* AppConfig
      const context = yield* Effect.context<Effect.Services<ReturnType<typeof CrmClient.make>>>()
      const connectionOf = new Map(config.webhooks.endpoints.map((endpoint) => [endpoint.name, endpoint.connection]))
      const clients = new Map<string, CrmClientShape>()

      const clientFor = Effect.fnUntraced(function* (endpoint: string) {
        const name = connectionOf.get(endpoint) ?? config.connections[0]?.name ?? ""
        const held = clients.get(name)
        if (held !== undefined) return held
        const client = yield* CrmClient.make(name === "" ? undefined : name).pipe(Effect.provide(context))
        clients.set(name, client)
        return client
      })

      const read = Effect.fn("TranscriptReader.read")(function* (endpoint: string, meetingId: string) {
        const client = yield* clientFor(endpoint)
        const received = yield* client.getTranscript(meetingId, { priority: "interactive" })
        return received.raw
      })

      return TranscriptReader.of({ read })
    })
  )
}
