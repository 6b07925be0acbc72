/**
 * From a delivery to its warehouse writes, without a database: what `decide` makes of a claimed
 * row (dead, unhandled, or the writes of its event), and how `groupWrites` orders a batch's writes
 * and dates its deletions.
 */
import { assert, describe, it } from "@effect/vitest"
import { DateTime, Effect } from "effect"
import { type ApplyDecision, type Decision, decide, groupWrites } from "../../src/webhooks/EventWrites.ts"
import type { ClaimedRow } from "../../src/webhooks/WebhookInbox.ts"
import { eventFixture, type JsonObject } from "../fixtures/Fixtures.ts"

const encoder = new TextEncoder()

/** A claimed row carrying `body`, typed as the intake would have typed it. */
const claimed = (
  body: string | JsonObject,
  options: {
    readonly hookId?: string
    readonly eventType?: string
    readonly receivedAt?: string
    readonly signedAt?: string
  } = {}
): ClaimedRow => ({
  hookId: options.hookId ?? "msg_1",
  endpoint: "default",
  eventType:
    options.eventType ?? (typeof body === "object" && typeof body.event_type === "string" ? body.event_type : null),
  body: encoder.encode(typeof body === "string" ? body : JSON.stringify(body)),
  attempts: 1,
  receivedAt: new Date(options.receivedAt ?? "2025-03-14T10:00:00Z"),
  signedAt: options.signedAt === undefined ? null : new Date(options.signedAt)
})

const applied = (decision: Decision): ApplyDecision =>
  decision._tag === "Apply" ? decision : assert.fail(`expected writes, got ${decision.status}: ${decision.error}`)

const settled = (decision: Decision) =>
  decision._tag === "Settle" ? decision : assert.fail(`expected a final status for ${decision.eventType}`)

/** A task snapshot of the fixture with another id and `updated_at`. */
const taskUpdated = (id: string, updatedAt: string) => {
  const body = eventFixture("task.updated")
  return { ...body, id, task: { ...(body.task as JsonObject), id, updated_at: updatedAt } }
}

describe("decide", () => {
  it.effect("a body that is not JSON, or does not decode, is dead with the reason", () =>
    Effect.gen(function* () {
      const notJson = settled(yield* decide(claimed("{not json", { eventType: "task.updated" })))
      assert.deepStrictEqual([notJson.status, notJson.error], ["dead", "the body is not UTF-8 JSON"])
      const undecodable = settled(yield* decide(claimed({ event_type: "task.updated", id: "tsk_1", task: {} })))
      assert.strictEqual(undecodable.status, "dead")
      assert.strictEqual(undecodable.eventType, "task.updated")
    })
  )

  it.effect(
    "an event without event_type on an all-types endpoint is dead with what to fix: its typed endpoint's secret",
    () =>
      Effect.gen(function* () {
        const typed = [
          { name: "client-created", eventType: "client.created" },
          { name: "client-updated", eventType: "client.updated" },
          { name: "prospect-created", eventType: "prospect.created" }
        ]
        const updated = settled(yield* decide(claimed(eventFixture("client.updated")), typed))
        assert.strictEqual(updated.status, "dead")
        assert.strictEqual(
          updated.error,
          "no event_type: a client.* or prospect.created event reached endpoint default and its copy on client-updated " +
            "never arrived; check that the signing secret of that endpoint matches the CRM's (crm-sync status lists refused deliveries)"
        )
        // A record's fields at the top: client.created or prospect.created.
        const created = settled(yield* decide(claimed(eventFixture("client.created")), typed))
        assert.include(created.error, "its copy on client-created, prospect-created never arrived")
        assert.include(created.error, "the signing secret of those endpoints")
        // No endpoint for those events at all: say to configure one.
        const unconfigured = settled(yield* decide(claimed(eventFixture("client.created")), []))
        assert.include(unconfigured.error, "configure an endpoint with event_type client.created")
      })
  )

  it.effect("an event type no table takes stays unhandled, for a later replay", () =>
    Effect.gen(function* () {
      const decision = settled(yield* decide(claimed({ event_type: "person.updated", id: "per_1" })))
      assert.strictEqual(decision.status, "unhandled")
      assert.include(decision.error, "no handler for event type person.updated")
    })
  )

  it.effect("client.updated writes the client with the envelope's book and its changed fields", () =>
    Effect.gen(function* () {
      const body = eventFixture("client.updated")
      // No event_type in the body (spec §6.3): the endpoint's fixed type says what it is.
      const { writes, eventType } = applied(yield* decide(claimed(body, { eventType: "client.updated" })))
      assert.strictEqual(eventType, "client.updated")
      assert.deepStrictEqual(writes.upserts, [])
      assert.deepStrictEqual(writes.client, {
        record: { ...(body.client as JsonObject), book_id: "book_3F9A" },
        changedFields: ["tier", "aum"]
      })
      assert.deepStrictEqual(writes.clientChange, {
        clientId: "cli_3001",
        changedFields: ["tier", "aum"],
        subscriptionId: "whsub_01HZX4K2M9",
        bookId: "book_3F9A"
      })
    })
  )

  it.effect("*.deleted marks its record deleted; a note keeps its household", () =>
    Effect.gen(function* () {
      const meeting = applied(yield* decide(claimed(eventFixture("meeting.deleted"))))
      assert.deepStrictEqual(meeting.writes.deletes, [{ resource: "meetings", id: "mtg_4410" }])
      assert.deepStrictEqual(meeting.writes.upserts, [])
      const note = applied(yield* decide(claimed(eventFixture("note.created"))))
      assert.deepStrictEqual(note.writes.noteParent, { id: "nte_90017", householdId: "hh_204" })
    })
  )
})

describe("groupWrites", () => {
  it.effect("orders tables by name and records by id, and dates a deletion after every snapshot of the batch", () =>
    Effect.gen(function* () {
      const rows = [
        claimed(taskUpdated("tsk_2", "2025-03-15T00:00:00Z"), { hookId: "a" }),
        claimed(eventFixture("note.created"), { hookId: "b" }),
        claimed(taskUpdated("tsk_1", "2025-03-13T00:00:00Z"), { hookId: "c", receivedAt: "2025-03-14T09:00:00Z" }),
        claimed({ ...eventFixture("task.deleted"), id: "tsk_2" }, { hookId: "d" }),
        claimed({ ...eventFixture("task.deleted"), id: "tsk_2" }, { hookId: "e" })
      ]
      const decisions = yield* Effect.forEach(rows, (row) => decide(row))
      const writes = groupWrites(decisions.map((decision) => ({ decision: applied(decision) })))

      assert.deepStrictEqual(
        writes.upserts.map(({ resource, records, orderedAt }) => ({
          resource,
          ids: records.map((record) => record.id),
          orderedAt
        })),
        [
          { resource: "notes", ids: ["nte_90017"], orderedAt: ["2025-03-14T10:00:00.000Z"] },
          {
            resource: "tasks",
            ids: ["tsk_1", "tsk_2"],
            orderedAt: ["2025-03-14T09:00:00.000Z", "2025-03-14T10:00:00.000Z"]
          }
        ]
      )
      // Received on the 14th, but a snapshot of the batch is from the 15th: the deletion must not
      // be older than a snapshot already applied, or that snapshot would undo it.
      assert.deepStrictEqual(writes.deletes, [
        { resource: "tasks", ids: ["tsk_2"], at: DateTime.toEpochMillis(DateTime.makeUnsafe("2025-03-15T00:00:00Z")) }
      ])
      assert.deepStrictEqual(writes.noteParents, [{ id: "nte_90017", householdId: "hh_204" }])
      assert.deepStrictEqual(writes.clientChanges, [])
    })
  )

  it.effect("dates in the CRM's clock: a deletion by the end of its signed second, a client.created by none", () =>
    Effect.gen(function* () {
      // Received a minute before it was signed: the CRM's clock runs ahead of ours.
      const times = { receivedAt: "2025-03-14T10:00:00Z", signedAt: "2025-03-14T10:01:00Z" }
      const rows = [
        claimed(eventFixture("client.created"), { ...times, hookId: "a", eventType: "client.created" }),
        claimed({ ...eventFixture("task.deleted"), id: "tsk_2" }, { ...times, hookId: "b" }),
        claimed(eventFixture("client.updated"), { ...times, hookId: "c", eventType: "client.updated" })
      ]
      const decisions = yield* Effect.forEach(rows, (row) => decide(row))
      const writes = groupWrites(decisions.map((decision) => ({ decision: applied(decision) })))
      assert.deepStrictEqual(writes.upserts, [])
      assert.deepStrictEqual(
        writes.clients.map(({ signedAt, changedFields }) => ({ signedAt, changedFields })),
        [
          { signedAt: null, changedFields: null },
          { signedAt: "2025-03-14T10:01:00.000Z", changedFields: ["tier", "aum"] }
        ]
      )
      assert.deepStrictEqual(writes.deletes, [
        { resource: "tasks", ids: ["tsk_2"], at: DateTime.toEpochMillis(DateTime.makeUnsafe(times.signedAt)) + 1000 }
      ])
    })
  )
})
