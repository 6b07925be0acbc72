/**
 * Transcripts through the processor against a real PostgreSQL: of two reads of one meeting's
 * transcript whose batches commit in the reverse order, the later read stays; a deleted meeting
 * takes its transcript (segments included) out of `crm.current_meeting_transcripts`, even when a
 * read started before the deletion commits after it; a read that finds no transcript retires the
 * stored one.
 */
import { assert, layer } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { Warehouse } from "../../src/warehouse/Warehouse.ts"
import { EventProcessor } from "../../src/webhooks/EventProcessor.ts"
import { TranscriptReader } from "../../src/webhooks/TranscriptReader.ts"
import { WebhookInbox } from "../../src/webhooks/WebhookInbox.ts"
import { eventFixture } from "../fixtures/Fixtures.ts"
import { TestDatabase } from "../support/TestDatabase.ts"
import { enqueue, makeSecret } from "./harness.ts"

/**
 * One scripted answer of the stubbed CRM: the transcript's text (null: the meeting has none, or it
 * is hidden), and optionally a signal once the read has started and a gate it waits on before answering.
 */
interface Step {
  readonly text: string | null
  readonly started?: Deferred.Deferred<void>
  readonly gate?: Deferred.Deferred<void>
}

/** Per meeting id, the answers of its next reads, in order. */
const script = new Map<string, Array<Step>>()

const StubTranscripts = Layer.succeed(
  TranscriptReader,
  TranscriptReader.of({
    read: (_endpoint, meetingId) =>
      Effect.gen(function* () {
        const step = script.get(meetingId)?.shift()
        if (step === undefined) return yield* Effect.die(`no scripted read left for ${meetingId}`)
        if (step.started !== undefined) yield* Deferred.succeed(step.started, undefined)
        if (step.gate !== undefined) yield* Deferred.await(step.gate)
        return {
          meeting_id: meetingId,
          transcript:
            step.text === null
              ? null
              : [{ text: step.text, participant: { name: "Jordan Lee" }, start_timestamp: "0", end_timestamp: "1" }]
        }
      })
  })
)

const config = AppConfig.layerFrom({
  webhooks: { endpoints: [{ name: "default", secrets: [makeSecret()] }], max_attempts: 2 }
})

// One row per batch, so two deliveries for one meeting are two batches, as with two processors.
const TestLayer = EventProcessor.layerWith({ workerId: "transcripts", batchSize: 1 }).pipe(
  Layer.provideMerge(Layer.mergeAll(WebhookInbox.layer, Warehouse.layer, StubTranscripts)),
  Layer.provideMerge(config),
  Layer.provideMerge(TestDatabase)
)

const transcriptReady = (meetingId: string) => {
  const body = eventFixture("meeting.transcript_ready") as Record<string, any>
  body.id = meetingId
  body.meeting = { ...body.meeting, id: meetingId }
  return enqueue(body)
}

const meetingDeleted = (meetingId: string) => {
  const body = eventFixture("meeting.deleted") as Record<string, any>
  body.id = meetingId
  return enqueue(body)
}

const processBatch = Effect.gen(function* () {
  return yield* (yield* EventProcessor).processBatch
})

const drain = Effect.gen(function* () {
  return yield* (yield* EventProcessor).drain
})

/** What an analyst sees of a meeting's transcript: the live row, and the segments' text in order. */
const visible = (meetingId: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const live = yield* sql<{ has_transcript: boolean }>`
      SELECT has_transcript FROM crm.current_meeting_transcripts WHERE id = ${meetingId}`
    const segments = yield* sql<{ text: string }>`
      SELECT text FROM crm.meeting_transcript_segments WHERE meeting_id = ${meetingId} ORDER BY ordinal`
    return { live: live.length, segments: segments.map((segment) => segment.text) }
  })

const inboxStatus = (meetingId: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    return (yield* sql<{ status: string }>`
      SELECT status FROM crm_sync.webhook_inbox WHERE convert_from(body, 'UTF8')::jsonb ->> 'id' = ${meetingId}
      ORDER BY received_at`).map((row) => row.status)
  })

layer(TestLayer, { excludeTestServices: true })("transcripts", (it) => {
  it.effect("of two reads committed in the reverse order, the one started later stays", () =>
    Effect.gen(function* () {
      const started = yield* Deferred.make<void>()
      const gate = yield* Deferred.make<void>()
      // The transcript changed between the two reads: the first read sees the old text, and
      // answers only after the second batch has committed.
      script.set("mtg_order", [{ text: "old text", started, gate }, { text: "new text" }])
      yield* transcriptReady("mtg_order")
      yield* transcriptReady("mtg_order")

      const first = yield* Effect.forkChild(processBatch)
      yield* Deferred.await(started)
      const second = yield* processBatch
      assert.strictEqual(second.processed, 1)
      assert.deepStrictEqual((yield* visible("mtg_order")).segments, ["new text"])

      yield* Deferred.succeed(gate, undefined)
      assert.strictEqual((yield* Fiber.join(first)).processed, 1)
      assert.deepStrictEqual(yield* visible("mtg_order"), { live: 1, segments: ["new text"] })
      assert.deepStrictEqual(yield* inboxStatus("mtg_order"), ["processed", "processed"])
    })
  )

  it.effect("meeting.deleted takes the meeting's transcript and its segments out of the current view", () =>
    Effect.gen(function* () {
      script.set("mtg_deleted", [{ text: "what the client said" }])
      yield* transcriptReady("mtg_deleted")
      yield* drain
      assert.deepStrictEqual(yield* visible("mtg_deleted"), { live: 1, segments: ["what the client said"] })

      yield* meetingDeleted("mtg_deleted")
      yield* drain
      assert.deepStrictEqual(yield* visible("mtg_deleted"), { live: 0, segments: [] })
    })
  )

  it.effect(
    "a read started before the meeting's deletion and committed after it does not bring the transcript back",
    () =>
      Effect.gen(function* () {
        const started = yield* Deferred.make<void>()
        const gate = yield* Deferred.make<void>()
        script.set("mtg_race", [{ text: "said before the deletion", started, gate }])
        yield* transcriptReady("mtg_race")
        yield* meetingDeleted("mtg_race")

        const reading = yield* Effect.forkChild(processBatch)
        yield* Deferred.await(started)
        assert.strictEqual((yield* processBatch).processed, 1)
        yield* Deferred.succeed(gate, undefined)
        assert.strictEqual((yield* Fiber.join(reading)).processed, 1)
        assert.deepStrictEqual(yield* visible("mtg_race"), { live: 0, segments: [] })
      })
  )

  it.effect("a read that finds no transcript (hidden since) retires the stored one", () =>
    Effect.gen(function* () {
      script.set("mtg_hidden", [{ text: "visible for a while" }, { text: null }])
      yield* transcriptReady("mtg_hidden")
      yield* drain
      assert.deepStrictEqual(yield* visible("mtg_hidden"), { live: 1, segments: ["visible for a while"] })

      yield* transcriptReady("mtg_hidden")
      yield* drain
      assert.deepStrictEqual(yield* visible("mtg_hidden"), { live: 0, segments: [] })
      assert.deepStrictEqual(yield* inboxStatus("mtg_hidden"), ["processed", "processed"])
    })
  )
})
