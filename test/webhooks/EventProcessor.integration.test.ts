/**
 * The processor against a real PostgreSQL: deliveries stored in the inbox (as the intake stores
 * them) end as the right warehouse rows, in any order and any number of times; failures are
 * retried, then dead, then replayable; a crashed holder's lease is reaped and its rows applied once.
 */
import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { CrmError, NotFound, Server } from "../../src/crm/CrmError.ts"
import { Warehouse } from "../../src/warehouse/Warehouse.ts"
import { EventProcessor, EventProcessorLive, replay } from "../../src/webhooks/EventProcessor.ts"
import { TranscriptReader } from "../../src/webhooks/TranscriptReader.ts"
import { WebhookInbox } from "../../src/webhooks/WebhookInbox.ts"
import { eventFixture, EventFixtures, resourceFixture } from "../fixtures/Fixtures.ts"
import { TestDatabase } from "../support/TestDatabase.ts"
import { enqueue, hookId, makeSecret } from "./harness.ts"

/** What the stubbed transcript read does, per meeting id: fail (5xx), 404, or answer the fixture. */
const transcriptMode = new Map<string, "fail" | "missing">()
const transcriptCalls: Array<string> = []

const StubTranscripts = Layer.succeed(
  TranscriptReader,
  TranscriptReader.of({
    read: (_endpoint, meetingId) =>
      Effect.suspend(() => {
        transcriptCalls.push(meetingId)
        const mode = transcriptMode.get(meetingId)
        const error = (reason: Server | NotFound) =>
          Effect.fail(
            new CrmError({
              operation: "CrmClient.getTranscript",
              connection: "test",
              recordId: meetingId,
              attempts: 1,
              reason
            })
          )
        if (mode === "fail") return error(new Server({ status: 503 }))
        if (mode === "missing") return error(new NotFound({}))
        return Effect.succeed({ ...resourceFixture("meeting_transcript"), meeting_id: meetingId })
      })
  })
)

const config = AppConfig.layerFrom({
  webhooks: {
    endpoints: [
      { name: "default", secrets: [makeSecret()] },
      { name: "client-created", secrets: [makeSecret()], event_type: "client.created" },
      { name: "client-updated", secrets: [makeSecret()], event_type: "client.updated" },
      { name: "prospect-created", secrets: [makeSecret()], event_type: "prospect.created" }
    ],
    max_attempts: 2
  }
})

const TestLayer = EventProcessor.layerWith({ workerId: "test-worker", batchSize: 50 }).pipe(
  Layer.provideMerge(Layer.mergeAll(WebhookInbox.layer, Warehouse.layer, StubTranscripts)),
  Layer.provideMerge(config),
  Layer.provideMerge(TestDatabase)
)

const endpointOf: Partial<Record<string, string>> = {
  "client.created": "client-created",
  "client.updated": "client-updated",
  "prospect.created": "prospect-created"
}

/** Stores a fixture (optionally changed) as a delivery to the endpoint its type needs. */
const deliverFixture = (
  eventType: (typeof EventFixtures)[number],
  change?: (body: Record<string, any>) => void,
  signedAt?: number
) => {
  const body = eventFixture(eventType) as Record<string, any>
  change?.(body)
  return enqueue(body, { endpoint: endpointOf[eventType] ?? "default", eventType, signedAt })
}

const prospectAt = (first_name: string, updated_at: string) => (body: Record<string, any>) =>
  Object.assign(body, { id: "pro_order", first_name, updated_at })

const createdAs = (id: string) => (body: Record<string, any>) => Object.assign(body, { id, tier: "gold" })
const updatedAs = (id: string) => (body: Record<string, any>) => {
  body.client = { ...body.client, id, tier: "diamond" }
}

const drain = Effect.gen(function* () {
  const processor = yield* EventProcessor
  return yield* processor.drain
})

const inboxRow = (hookId: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const rows = yield* sql<{ status: string; attempts: number; last_error: string | null; locked_by: string | null }>`
      SELECT status, attempts, last_error, locked_by FROM crm_sync.webhook_inbox WHERE hook_id = ${hookId}`
    return rows[0]!
  })

const row = (table: string, id: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const rows = yield* sql.unsafe<Record<string, any>>(`SELECT * FROM crm.${table} WHERE id = $1`, [id])
    return rows[0]
  })

const count = (query: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const rows = yield* sql.unsafe<{ n: number | bigint }>(query)
    return Number(rows[0]!.n)
  })

layer(TestLayer, { excludeTestServices: true })("EventProcessor", (it) => {
  it.effect("a client snapshot signed earlier but applied after a newer one does not overwrite it", () =>
    Effect.gen(function* () {
      // Clients carry no updated_at (spec §2.9): their snapshots are ordered by the first signed
      // time of their hook-id. Here the older one was applied late (say, its processing failed
      // and was retried); a retry by the sender, re-signed later, is the test after this one.
      const signed = Date.parse("2026-02-01T10:00:00Z")
      yield* deliverFixture(
        "client.updated",
        (body) => (body.client = { ...body.client, id: "cli_order", tier: "gold" }),
        signed
      )
      yield* drain
      yield* deliverFixture(
        "client.updated",
        (body) => (body.client = { ...body.client, id: "cli_order", tier: "silver" }),
        signed - 60_000
      )
      yield* drain
      const client = yield* row("clients", "cli_order")
      assert.strictEqual(client?.tier, "gold", "the later-signed snapshot stays")
      assert.strictEqual(client?.updated_at.toISOString(), "2026-02-01T10:00:00.000Z")

      yield* deliverFixture(
        "client.updated",
        (body) => (body.client = { ...body.client, id: "cli_order", tier: "platinum" }),
        signed + 1_000
      )
      yield* drain
      assert.strictEqual((yield* row("clients", "cli_order"))?.tier, "platinum", "a newer one applies")
    })
  )

  it.effect(
    "a client.updated retried after a newer one was applied, re-signed at its retry, does not overwrite it",
    () =>
      Effect.gen(function* () {
        // A sender signs every attempt with that attempt's time (Standard Webhooks). M1's copy on the
        // all-types endpoint was stored at once (typeless, set aside); its copy on its own endpoint
        // failed and comes back five minutes later, re-signed. M2, newer, was applied in between.
        const first = Date.parse("2026-02-01T10:00:00Z")
        const m1 = eventFixture("client.updated") as Record<string, any>
        m1.client = { ...m1.client, id: "cli_retried", tier: "gold" }
        m1.changed_fields = ["tier"]
        const m1Hook = yield* enqueue(m1, { endpoint: "default", signedAt: first })
        yield* drain
        yield* deliverFixture(
          "client.updated",
          (body) => {
            body.client = { ...body.client, id: "cli_retried", tier: "silver" }
            body.changed_fields = ["tier"]
          },
          first + 60_000
        )
        yield* drain
        assert.strictEqual((yield* row("clients", "cli_retried"))?.tier, "silver")

        yield* enqueue(m1, {
          endpoint: "client-updated",
          eventType: "client.updated",
          id: m1Hook,
          signedAt: first + 300_000
        })
        yield* drain
        assert.strictEqual((yield* inboxRow(m1Hook)).status, "processed", "the retried copy completed its row")
        const client = yield* row("clients", "cli_retried")
        assert.strictEqual(client?.tier, "silver", "M1's retry, first signed before M2, does not undo M2")
        assert.strictEqual(client?.updated_at.toISOString(), "2026-02-01T10:01:00.000Z")
      })
  )

  it.effect(
    "copies of one hook-id stored in one batch keep the copy that knows its type, with the first signed time",
    () =>
      Effect.gen(function* () {
        // The intake's group commit can carry a message's copy on the all-types endpoint and a
        // retried copy on its own endpoint in one INSERT.
        const first = Date.parse("2026-02-01T10:00:00Z")
        yield* deliverFixture(
          "client.updated",
          (body) => (body.client = { ...body.client, id: "cli_batch" }),
          first + 60_000
        )
        yield* drain
        const m1 = eventFixture("client.updated") as Record<string, any>
        m1.client = { ...m1.client, id: "cli_batch", tier: "gold" }
        const body = new TextEncoder().encode(JSON.stringify(m1))
        const copy = { hookId: hookId(), body, status: "pending", error: null } as const
        const inbox = yield* WebhookInbox
        yield* inbox.insert([
          { ...copy, endpoint: "default", eventType: null, signedAt: first },
          { ...copy, endpoint: "client-updated", eventType: "client.updated", signedAt: first + 300_000 }
        ])
        yield* drain
        assert.strictEqual((yield* inboxRow(copy.hookId)).status, "processed")
        assert.strictEqual((yield* row("clients", "cli_batch"))?.tier, "diamond", "the newer snapshot stays")
      })
  )

  it.effect("a client.created retried after a client.updated never overwrites it, in any order or batch", () =>
    Effect.gen(function* () {
      // The creation's first attempt never reached the intake; its retry, signed five minutes
      // later, arrives after the debounced update (spec §6.4) that was signed a minute after it.
      const created = Date.parse("2026-02-01T10:00:00Z")
      // Across batches: the update applied, then the created retry.
      yield* deliverFixture("client.updated", updatedAs("cli_late_created"), created + 60_000)
      yield* drain
      yield* deliverFixture("client.created", createdAs("cli_late_created"), created + 300_000)
      yield* drain
      assert.strictEqual((yield* row("clients", "cli_late_created"))?.tier, "diamond", "updated, then created")

      // The created retry applied first, then the update (signed before it) processed after it.
      yield* deliverFixture("client.created", createdAs("cli_created_first"), created + 300_000)
      yield* drain
      assert.strictEqual((yield* row("clients", "cli_created_first"))?.tier, "gold")
      yield* deliverFixture("client.updated", updatedAs("cli_created_first"), created + 60_000)
      yield* drain
      assert.strictEqual((yield* row("clients", "cli_created_first"))?.tier, "diamond", "created, then updated")

      // Both in one batch.
      yield* deliverFixture("client.updated", updatedAs("cli_one_batch"), created + 60_000)
      yield* deliverFixture("client.created", createdAs("cli_one_batch"), created + 300_000)
      yield* drain
      assert.strictEqual((yield* row("clients", "cli_one_batch"))?.tier, "diamond", "one batch")
    })
  )

  it.effect("with the CRM's clock 120 s ahead, a late retry of the last update does not undo a deletion", () =>
    Effect.gen(function* () {
      // Times in the CRM's clock, two minutes ahead of ours (inside the accepted tolerance).
      const crmNow = Date.now() + 120_000
      const cases = [
        { resource: "tasks", updated: "task.updated", deleted: "task.deleted", key: "task" },
        { resource: "meetings", updated: "meeting.updated", deleted: "meeting.deleted", key: "meeting" },
        { resource: "notes", updated: "note.updated", deleted: "note.deleted", key: "note" }
      ] as const
      for (const { resource, updated, deleted, key } of cases) {
        const id = `${key}_skewed`
        const lastUpdate = (body: Record<string, any>) => {
          body.id = id
          body[key] = { ...body[key], id, updated_at: new Date(crmNow - 5_000).toISOString() }
        }
        // An earlier version was applied; the last update's first attempt failed.
        yield* deliverFixture(
          updated,
          (body) => {
            lastUpdate(body)
            body[key].updated_at = new Date(crmNow - 60_000).toISOString()
          },
          crmNow - 60_000
        )
        yield* deliverFixture(deleted, (body) => (body.id = id), crmNow)
        yield* drain
        assert.isNotNull((yield* row(resource, id))?.deleted_at, `${resource}: deleted`)
        // The retry of the last update from before the deletion, re-signed at its attempt.
        yield* deliverFixture(updated, lastUpdate, crmNow + 60_000)
        yield* drain
        const stored = yield* row(resource, id)
        assert.isNotNull(stored?.deleted_at, `${resource}: a snapshot from before the deletion does not undo it`)
        assert.strictEqual(
          stored?.deleted_at.getTime(),
          crmNow + 1000,
          `${resource}: deleted by the end of the second the deletion was signed in`
        )
      }
    })
  )

  it.effect("a deletion signed in the same second as the last update it follows is not undone by that update", () =>
    Effect.gen(function* () {
      // hook-timestamp counts whole seconds (Standard Webhooks), the snapshot's updated_at has
      // milliseconds: the last update (…:00.700) and the deletion signed right after it (…:00)
      // share a second. The update's first attempt failed; its retry arrives after the deletion.
      const second = Math.floor(Date.now() / 1000) * 1000 - 60_000
      const lastUpdate = (body: Record<string, any>) => {
        body.id = "tsk_same_second"
        body.task = { ...body.task, id: "tsk_same_second", updated_at: new Date(second + 700).toISOString() }
      }
      yield* deliverFixture("task.deleted", (body) => (body.id = "tsk_same_second"), second)
      yield* drain
      yield* deliverFixture("task.updated", lastUpdate, second + 6_000)
      yield* drain
      const stored = yield* row("tasks", "tsk_same_second")
      assert.isNotNull(stored?.deleted_at, "the update from before the deletion does not bring the task back")
    })
  )

  it.effect("an older prospect snapshot after a newer one does not overwrite it", () =>
    Effect.gen(function* () {
      yield* deliverFixture("prospect.created", prospectAt("Newer", "2026-02-01T10:00:00Z"))
      yield* drain
      yield* deliverFixture("prospect.created", prospectAt("Older", "2026-01-01T10:00:00Z"), Date.now() + 60_000)
      yield* drain
      const stored = yield* row("prospects", "pro_order")
      assert.strictEqual(stored?.first_name, "Newer")
      assert.strictEqual(stored?.updated_at.toISOString(), "2026-02-01T10:00:00.000Z")
    })
  )

  it.effect("meeting events: snapshot, linked records, transcript read, deletion", () =>
    Effect.gen(function* () {
      const created = yield* deliverFixture("meeting.created")
      yield* drain
      assert.strictEqual((yield* inboxRow(created)).status, "processed")
      const meeting = yield* row("meetings", "mtg_4410")
      assert.strictEqual(
        meeting?.title,
        eventFixture("meeting.created").meeting && (eventFixture("meeting.created").meeting as any).title
      )
      assert.strictEqual(meeting?.source, "webhook")
      assert.strictEqual(
        yield* count(`SELECT count(*)::int AS n FROM crm.meeting_households WHERE meeting_id = 'mtg_4410'`),
        1
      )
      assert.strictEqual(yield* count(`SELECT count(*)::int AS n FROM crm.households WHERE id = 'hh_204'`), 1)

      yield* deliverFixture("meeting.updated")
      yield* deliverFixture("meeting.transcript_ready")
      yield* drain
      const updated = yield* row("meetings", "mtg_4410")
      assert.strictEqual(updated?.updated_at.toISOString(), "2025-03-12T19:30:00.000Z", "the newest snapshot wins")
      assert.include(transcriptCalls, "mtg_4410")
      const transcript = yield* row("meeting_transcripts", "mtg_4410")
      assert.strictEqual(transcript?.has_transcript, true)
      assert.strictEqual(
        yield* count(`SELECT count(*)::int AS n FROM crm.meeting_transcript_segments WHERE meeting_id = 'mtg_4410'`),
        2
      )

      const deleted = yield* deliverFixture("meeting.deleted")
      yield* drain
      assert.strictEqual((yield* inboxRow(deleted)).status, "processed")
      assert.isNotNull((yield* row("meetings", "mtg_4410"))?.deleted_at)
    })
  )

  it.effect("task events: completion and reopening keep status and completed_at consistent, in any order", () =>
    Effect.gen(function* () {
      yield* deliverFixture("task.created")
      yield* deliverFixture("task.updated")
      yield* drain
      assert.strictEqual((yield* row("tasks", "tsk_55102"))?.status, "todo")

      // Reopened (newer snapshot) arrives before completed (older): the older one must not win.
      yield* deliverFixture("task.reopened")
      yield* drain
      yield* deliverFixture("task.completed")
      yield* drain
      const task = yield* row("tasks", "tsk_55102")
      assert.strictEqual(task?.status, "todo")
      assert.isNull(task?.completed_at)
      assert.strictEqual(task?.updated_at.toISOString(), "2025-03-15T09:30:00.000Z")
      assert.strictEqual(task?.record_id, "hh_204")
      assert.strictEqual(yield* count(`SELECT count(*)::int AS n FROM crm.task_tags WHERE task_id = 'tsk_55102'`), 1)

      yield* deliverFixture("task.deleted")
      yield* drain
      assert.isNotNull((yield* row("tasks", "tsk_55102"))?.deleted_at)
      // A late older snapshot never resurrects it.
      yield* deliverFixture("task.updated")
      yield* drain
      const after = yield* row("tasks", "tsk_55102")
      assert.isNotNull(after?.deleted_at)
      assert.strictEqual(after?.status, "todo")
    })
  )

  it.effect("a completed task stays done with its completed_at", () =>
    Effect.gen(function* () {
      yield* deliverFixture("task.completed", (body) => {
        body.id = body.task.id = "tsk_done"
      })
      yield* drain
      const task = yield* row("tasks", "tsk_done")
      assert.strictEqual(task?.status, "done")
      assert.strictEqual(task?.completed_at.toISOString(), "2025-03-14T10:00:00.000Z")
    })
  )

  it.effect("note events keep their parent ids, also on a note deleted before it was ever seen", () =>
    Effect.gen(function* () {
      // Deleted first: a tombstone that still knows its household (spec §6.3).
      yield* deliverFixture("note.deleted", (body) => {
        body.id = "nte_gone"
      })
      yield* drain
      const tombstone = yield* row("notes", "nte_gone")
      assert.isNotNull(tombstone?.deleted_at)
      assert.strictEqual(tombstone?.household_id, "hh_204")

      yield* deliverFixture("note.created")
      yield* deliverFixture("note.updated")
      yield* drain
      const note = yield* row("notes", "nte_90017")
      assert.strictEqual(note?.household_id, "hh_204")
      assert.strictEqual(note?.notable_id, (eventFixture("note.updated").note as any).notable_id)
      assert.strictEqual(note?.updated_at.toISOString(), "2025-03-13T09:00:00.000Z")
      yield* deliverFixture("note.deleted")
      yield* drain
      const deleted = yield* row("notes", "nte_90017")
      assert.isNotNull(deleted?.deleted_at)
      assert.strictEqual(deleted?.household_id, "hh_204")
    })
  )

  it.effect("a late created snapshot after the deletion leaves the record deleted (tombstone)", () =>
    Effect.gen(function* () {
      yield* deliverFixture("meeting.deleted", (body) => {
        body.id = "mtg_late"
      })
      yield* drain
      yield* deliverFixture("meeting.created", (body) => {
        body.id = body.meeting.id = "mtg_late"
      })
      yield* drain
      const meeting = yield* row("meetings", "mtg_late")
      assert.isNotNull(meeting?.deleted_at)
      assert.strictEqual(meeting?.title, (eventFixture("meeting.created").meeting as any).title, "the data is kept")
    })
  )

  it.effect("the flat client.created and prospect.created, and the nested client.updated with its history", () =>
    Effect.gen(function* () {
      yield* deliverFixture("client.created")
      yield* deliverFixture("prospect.created")
      yield* drain
      const client = yield* row("clients", "cli_3001")
      assert.strictEqual(client?.tier, "platinum")
      assert.strictEqual(client?.book_id, "book_3F9A")
      assert.isUndefined(client?.raw.subscription_id, "context fields are not part of the record")
      const prospect = yield* row("prospects", "pro_7001")
      assert.strictEqual(prospect?.first_name, "Daniel")
      assert.strictEqual(prospect?.book_id, "book_3F9A")

      const hookId = yield* deliverFixture("client.updated")
      yield* drain
      const updated = yield* row("clients", "cli_3001")
      assert.strictEqual(updated?.tier, "diamond")
      assert.strictEqual(updated?.book_id, "book_3F9A", "the envelope's book_id is kept")
      const sql = yield* SqlClient
      const changes = yield* sql<{ hook_id: string; changed_fields: ReadonlyArray<string> }>`
        SELECT hook_id, changed_fields FROM crm.client_changes WHERE client_id = 'cli_3001'`
      assert.deepStrictEqual(changes, [{ hook_id: hookId, changed_fields: ["tier", "aum"] }])
    })
  )

  it.effect("every event type of spec §6.4 is processed (none failed, none unhandled)", () =>
    Effect.gen(function* () {
      const ids = []
      for (const eventType of EventFixtures) ids.push(yield* deliverFixture(eventType))
      yield* drain
      for (const [index, id] of ids.entries()) {
        assert.strictEqual((yield* inboxRow(id)).status, "processed", EventFixtures[index])
      }
    })
  )

  it.effect("a delivery applied twice (a redelivery with a new hook-id) changes nothing the second time", () =>
    Effect.gen(function* () {
      const body = eventFixture("task.updated") as Record<string, any>
      body.id = body.task.id = "tsk_twice"
      yield* enqueue(body)
      yield* drain
      const first = yield* row("tasks", "tsk_twice")
      yield* enqueue(body)
      yield* drain
      const second = yield* row("tasks", "tsk_twice")
      assert.strictEqual(
        second?.synced_at.getTime(),
        first?.synced_at.getTime(),
        "an identical snapshot writes nothing"
      )
    })
  )

  it.effect("an unknown event type is unhandled, not failed; a body that does not decode is dead at once", () =>
    Effect.gen(function* () {
      const unknown = yield* enqueue({ event_type: "invoice.paid", id: "inv_1" })
      const person = yield* enqueue({ event_type: "person.updated", id: "per_1", book_id: "book_3F9A" })
      const broken = yield* enqueue({ event_type: "task.updated", id: "tsk_x", task: { title: "no id" } })
      const untyped = yield* enqueue({ id: "cli_x", name: "No type" })
      yield* drain
      assert.strictEqual((yield* inboxRow(unknown)).status, "unhandled")
      assert.strictEqual((yield* inboxRow(person)).status, "unhandled")
      const dead = yield* inboxRow(broken)
      assert.strictEqual(dead.status, "dead")
      assert.strictEqual(dead.attempts, 1)
      assert.include(dead.last_error ?? "", "task.updated")
      assert.strictEqual((yield* inboxRow(untyped)).status, "dead")
    })
  )

  it.effect("contact events with a recognisable contact are applied; unrecognisable ones stay unhandled", () =>
    Effect.gen(function* () {
      const contact = { ...resourceFixture("contact"), id: "con_evt" }
      const nested = yield* enqueue({ event_type: "contact.created", book_id: "book_3F9A", contact })
      const odd = yield* enqueue({ event_type: "contact.updated", something: "else" })
      yield* drain
      assert.strictEqual((yield* inboxRow(nested)).status, "processed")
      assert.strictEqual((yield* row("contacts", "con_evt"))?.id, "con_evt")
      assert.strictEqual((yield* inboxRow(odd)).status, "unhandled")
    })
  )

  it.effect("a failing follow-up read is retried with a backoff, then dead; replay brings it back", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      transcriptMode.set("mtg_flaky", "fail")
      const id = yield* deliverFixture("meeting.transcript_ready", (body) => {
        body.id = body.meeting.id = "mtg_flaky"
      })
      yield* drain
      const first = yield* inboxRow(id)
      assert.strictEqual(first.status, "failed")
      assert.strictEqual(first.attempts, 1)
      assert.include(first.last_error ?? "", "transcript read failed")
      assert.isNull(first.locked_by)
      const due = yield* sql<{ later: boolean }>`
        SELECT next_attempt_at > now() AS later FROM crm_sync.webhook_inbox WHERE hook_id = ${id}`
      assert.isTrue(due[0]!.later, "the retry waits for its backoff")
      assert.isUndefined(yield* row("meetings", "mtg_flaky"), "nothing of a failed row is applied")

      // Due now: the second (last) attempt fails too, and the row is dead.
      yield* sql`UPDATE crm_sync.webhook_inbox SET next_attempt_at = now() WHERE hook_id = ${id}`
      yield* drain
      assert.strictEqual((yield* inboxRow(id)).status, "dead")

      transcriptMode.delete("mtg_flaky")
      assert.strictEqual(
        (yield* replay({ _tag: "Dead" })).replayed,
        yield* count(`SELECT count(*)::int AS n FROM crm_sync.webhook_inbox WHERE status = 'pending' AND attempts = 0`)
      )
      yield* drain
      assert.strictEqual((yield* inboxRow(id)).status, "processed")
      assert.strictEqual((yield* row("meeting_transcripts", "mtg_flaky"))?.has_transcript, true)
    })
  )

  it.effect("a row PostgreSQL refuses fails alone: the rest of its batch is applied", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const good = eventFixture("client.updated") as Record<string, any>
      good.client.id = "cli_good"
      // U+0000 is valid JSON but jsonb cannot hold it: the history insert of this row fails.
      const poison = structuredClone(good)
      poison.client.id = "cli_poison"
      poison.changed_fields = ["ti\u0000er"]
      const task = eventFixture("task.created") as Record<string, any>
      task.id = task.task.id = "tsk_beside_poison"
      const goodId = yield* enqueue(good, { endpoint: "client-updated", eventType: "client.updated" })
      const poisonId = yield* enqueue(poison, { endpoint: "client-updated", eventType: "client.updated" })
      const taskId = yield* enqueue(task)
      yield* drain
      assert.strictEqual((yield* inboxRow(goodId)).status, "processed")
      assert.strictEqual((yield* inboxRow(taskId)).status, "processed")
      const failed = yield* inboxRow(poisonId)
      assert.strictEqual(failed.status, "failed")
      assert.isUndefined(yield* row("clients", "cli_poison"), "nothing of the failed row is applied")
      assert.strictEqual((yield* row("tasks", "tsk_beside_poison"))?.id, "tsk_beside_poison")

      yield* sql`UPDATE crm_sync.webhook_inbox SET next_attempt_at = now() WHERE hook_id = ${poisonId}`
      yield* drain
      const dead = yield* inboxRow(poisonId)
      assert.strictEqual(dead.status, "dead", "after max_attempts (2)")
      assert.strictEqual(dead.attempts, 2)
    })
  )

  it.effect("a transcript gone (404) does not hold the meeting back", () =>
    Effect.gen(function* () {
      transcriptMode.set("mtg_gone", "missing")
      const id = yield* deliverFixture("meeting.transcript_ready", (body) => {
        body.id = body.meeting.id = "mtg_gone"
      })
      yield* drain
      const inbox = yield* inboxRow(id)
      assert.strictEqual(inbox.status, "processed")
      assert.include(inbox.last_error ?? "", "404")
      assert.strictEqual((yield* row("meetings", "mtg_gone"))?.id, "mtg_gone")
    })
  )

  it.effect("a holder that died after claiming: its lease is reaped and the rows applied exactly once", () =>
    Effect.gen(function* () {
      const inbox = yield* WebhookInbox
      const body = eventFixture("client.updated") as Record<string, any>
      body.client.id = "cli_crash"
      const id = yield* enqueue(body, { endpoint: "client-updated", eventType: "client.updated" })
      // Another process claims it and dies before applying anything.
      const claimed = yield* inbox.claim("crashed-worker", 1000)
      assert.include(
        claimed.map((row) => row.hookId),
        id
      )
      assert.strictEqual((yield* drain).claimed, 0, "a live lease keeps others off")
      assert.isAbove(yield* inbox.reap(Duration.zero), 0)
      yield* drain
      const settled = yield* inboxRow(id)
      assert.strictEqual(settled.status, "processed")
      assert.strictEqual(settled.attempts, 2)
      assert.strictEqual(
        yield* count(`SELECT count(*)::int AS n FROM crm.client_changes WHERE client_id = 'cli_crash'`),
        1
      )
      // Processing the same rows again (a second replay) adds nothing.
      yield* replay({ _tag: "One", hookId: id })
      yield* drain
      assert.strictEqual(
        yield* count(`SELECT count(*)::int AS n FROM crm.client_changes WHERE client_id = 'cli_crash'`),
        1
      )
    })
  )
})

const ShortRetention = EventProcessor.layerWith({ workerId: "pruning-worker" }).pipe(
  Layer.provideMerge(Layer.mergeAll(WebhookInbox.layer, Warehouse.layer, StubTranscripts)),
  Layer.provideMerge(
    AppConfig.layerFrom({ webhooks: { endpoints: [{ name: "default", secrets: [makeSecret()] }], retention: "1 day" } })
  ),
  Layer.provideMerge(TestDatabase)
)

layer(ShortRetention, { excludeTestServices: true })("pruning", (it) => {
  it.effect("the running processor prunes finished rows past the retention, never younger than 7 days", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const ids = {
        old: yield* enqueue({ event_type: "invoice.paid", id: "a" }),
        recent: yield* enqueue({ event_type: "invoice.paid", id: "b" }),
        deadOld: yield* enqueue({ event_type: "task.updated", id: "c" }),
        pendingOld: yield* enqueue({ event_type: "invoice.paid", id: "d" })
      }
      // Finished 8 and 3 days ago (retention is 1 day, below the 7-day floor); a dead row and a
      // pending row of the same age are not finished and stay.
      yield* sql`UPDATE crm_sync.webhook_inbox SET status = 'processed', processed_at = now() - interval '8 days' WHERE hook_id = ${ids.old}`
      yield* sql`UPDATE crm_sync.webhook_inbox SET status = 'unhandled', processed_at = now() - interval '3 days' WHERE hook_id = ${ids.recent}`
      yield* sql`UPDATE crm_sync.webhook_inbox SET status = 'dead', processed_at = now() - interval '30 days' WHERE hook_id = ${ids.deadOld}`
      yield* sql`UPDATE crm_sync.webhook_inbox SET received_at = now() - interval '30 days' WHERE hook_id = ${ids.pendingOld}`

      const remaining = sql<{ hook_id: string }>`SELECT hook_id FROM crm_sync.webhook_inbox`.pipe(
        Effect.map((rows) => rows.map((row) => row.hook_id))
      )
      yield* Effect.scoped(
        Effect.gen(function* () {
          // Started with the layer: pruning runs first, before any work.
          yield* Layer.build(EventProcessorLive)
          for (let i = 0; i < 100 && (yield* remaining).includes(ids.old); i++) yield* Effect.sleep("50 millis")
        })
      )
      const left = yield* remaining
      assert.notInclude(left, ids.old)
      assert.includeMembers(left, [ids.recent, ids.deadOld, ids.pendingOld])
    })
  )
})
