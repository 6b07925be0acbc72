/**
 * The event envelopes of spec §6.3: every event fixture of §6.4 decodes to its case of `CrmEvent`,
 * the untyped events need their endpoint's fixed type, and unknown types are kept raw.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import { CrmEvent, decodeEvent, EventDecodeError, eventTypeOf, UntypedEventTypes } from "../../src/crm/Events.ts"
import { type EventFixture, EventFixtures, eventFixture } from "../fixtures/Fixtures.ts"

const expectedTag = (eventType: EventFixture): CrmEvent["_tag"] => {
  if (eventType.endsWith(".deleted")) return "DeletedEvent"
  if (eventType === "client.created") return "ClientCreated"
  if (eventType === "client.updated") return "ClientUpdated"
  if (eventType === "prospect.created") return "ProspectCreated"
  if (eventType.startsWith("meeting.")) return "MeetingEvent"
  if (eventType.startsWith("task.")) return "TaskEvent"
  return "NoteEvent"
}

const isUntyped = (eventType: string) => (UntypedEventTypes as ReadonlyArray<string>).includes(eventType)

type Case<K extends CrmEvent["_tag"]> = Extract<CrmEvent, { readonly _tag: K }>

/** Narrows a decoded event to one case of the union, failing the test otherwise. */
const expectCase = <K extends CrmEvent["_tag"]>(event: CrmEvent, tag: K): Case<K> => {
  const guard = CrmEvent.guards[tag] as (u: unknown) => u is Case<K>
  return guard(event) ? event : assert.fail(`expected ${tag} for ${event.event_type}`)
}

describe("event envelopes (spec §6.3, §6.4)", () => {
  for (const eventType of EventFixtures) {
    it.effect(`decodes ${eventType}`, () =>
      Effect.gen(function* () {
        // The untyped events need their endpoint's fixed type; the others name themselves.
        const event = yield* decodeEvent(
          eventFixture(eventType),
          isUntyped(eventType) ? { fixedEventType: eventType } : undefined
        )
        expectCase(event, expectedTag(eventType))
        assert.strictEqual(event.event_type, eventType)
      })
    )
  }

  it.effect("gives meeting, task and note events their snapshot and context fields", () =>
    Effect.gen(function* () {
      const meeting = expectCase(yield* decodeEvent(eventFixture("meeting.updated")), "MeetingEvent")
      assert.strictEqual(meeting.payload.id, "mtg_4410")
      assert.strictEqual(meeting.payload.meeting.ai_summary, "Discussed income needs and RMD timing.")
      assert.strictEqual(meeting.payload.subscription_id, "whsub_01HZX4K2M9")
      assert.strictEqual(meeting.payload.company_id, "cmp_12AB")

      const note = expectCase(yield* decodeEvent(eventFixture("note.deleted")), "DeletedEvent")
      assert.strictEqual(note.payload.household_id, "hh_204")
      assert.notProperty(note.payload, "note")

      const completed = expectCase(yield* decodeEvent(eventFixture("task.completed")), "TaskEvent")
      assert.strictEqual(completed.payload.task.status, "done")
      assert.strictEqual(completed.payload.task.completed_at, "2025-03-14T10:00:00Z")
    })
  )

  it.effect("reads flat client.created and prospect.created, and nested client.updated", () =>
    Effect.gen(function* () {
      const created = expectCase(
        yield* decodeEvent(eventFixture("client.created"), { fixedEventType: "client.created" }),
        "ClientCreated"
      )
      assert.strictEqual(created.payload.id, "cli_3001")
      assert.strictEqual(created.payload.aum, "2450000.00")
      assert.strictEqual(created.payload.book_id, "book_3F9A")

      const updated = expectCase(
        yield* decodeEvent(eventFixture("client.updated"), { fixedEventType: "client.updated" }),
        "ClientUpdated"
      )
      assert.strictEqual(updated.payload.client.tier, "diamond")
      assert.deepStrictEqual(updated.payload.changed_fields, ["tier", "aum"])

      const prospect = expectCase(
        yield* decodeEvent(eventFixture("prospect.created"), { fixedEventType: "prospect.created" }),
        "ProspectCreated"
      )
      assert.strictEqual(prospect.payload.last_name, "Reyes")
    })
  )

  it.effect("refuses an untyped body on an endpoint without a fixed event type", () =>
    Effect.gen(function* () {
      const exit = yield* Effect.exit(decodeEvent(eventFixture("client.updated")))
      assert.isTrue(Exit.isFailure(exit))
      const error = yield* Effect.flip(decodeEvent(eventFixture("client.updated")))
      assert.instanceOf(error, EventDecodeError)
      assert.include(error.message, "no event_type")
      const notObject = yield* Effect.flip(decodeEvent([1, 2], { fixedEventType: "client.created" }))
      assert.include(notObject.message, "not a JSON object")
    })
  )

  it.effect("keeps selectable-but-unshown and unknown event types raw", () =>
    Effect.gen(function* () {
      const body = { event_type: "household.tag_added", household_id: "hh_204", tag: { id: "tag_Z" } }
      const tagged = expectCase(yield* decodeEvent(body), "OtherEvent")
      assert.deepStrictEqual(tagged.payload, body)
      const unknown = expectCase(
        yield* decodeEvent({ id: "c1", first_name: "Ana" }, { fixedEventType: "contact.created" }),
        "OtherEvent"
      )
      assert.strictEqual(unknown.event_type, "contact.created")
      const future = expectCase(yield* decodeEvent({ event_type: "meeting.archived", id: "mtg_1" }), "OtherEvent")
      assert.strictEqual(future.event_type, "meeting.archived")
    })
  )

  it.effect("accepts an extra field and a new enum value in an event and its snapshot", () =>
    Effect.gen(function* () {
      const body = eventFixture("task.updated")
      const task = { ...(body.task as Record<string, unknown>), status: "blocked", effort_points: 3 }
      const event = expectCase(yield* decodeEvent({ ...body, task, delivery_region: "us-west" }), "TaskEvent")
      assert.strictEqual(event.payload.task.status, "blocked")
    })
  )

  it.effect("fails, naming the field, when a snapshot does not decode", () =>
    Effect.gen(function* () {
      const body = eventFixture("meeting.created")
      const meeting = { ...(body.meeting as Record<string, unknown>), updated_at: "not a time" }
      const error = yield* Effect.flip(decodeEvent({ ...body, meeting }))
      assert.strictEqual(error.eventType, "meeting.created")
      assert.include(error.message, "updated_at")
    })
  )

  it("takes the body's event_type over the endpoint's fixed type", () => {
    assert.strictEqual(eventTypeOf({ event_type: "task.updated" }, "client.created"), "task.updated")
    assert.strictEqual(eventTypeOf({ id: "x" }, "client.created"), "client.created")
    assert.strictEqual(eventTypeOf({ id: "x" }), undefined)
  })
})
