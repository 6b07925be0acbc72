/**
 * The webhook event envelopes of spec §6.3 as `Schema`s, and `decodeEvent`, which turns a delivery
 * body (plus, for the events that carry no `event_type`, the endpoint's fixed event type) into one
 * tagged union, `CrmEvent`.
 *
 * Envelope shapes: meeting, task and note events carry `event_type`, the record `id`, the context
 * fields of §6.2 and a snapshot under `meeting`, `task` or `note`; their `*.deleted` events carry
 * no snapshot. `client.created` and `prospect.created` are flat (record fields beside the context
 * fields); `client.updated` nests the record under `client` with `changed_fields`. Every other type
 * (selectable but unshown in §6.1, or new) decodes as `OtherEvent` with its body kept whole.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { Id, List, Nullable } from "./Fields.ts"
import { Client, Meeting, Note, Prospect, Task } from "./Models.ts"

/**
 * Context fields on every payload (spec §6.2). Read tolerantly like record fields: processing a
 * delivery needs the record id and snapshot, not these.
 */
export const EventContext = {
  subscription_id: Nullable(Schema.String),
  user_id: Nullable(Schema.String),
  book_id: Nullable(Schema.String),
  company_id: Nullable(Schema.String)
}

export const MeetingEventTypes = ["meeting.created", "meeting.updated", "meeting.transcript_ready"] as const
export const TaskEventTypes = ["task.created", "task.updated", "task.completed", "task.reopened"] as const
export const NoteEventTypes = ["note.created", "note.updated"] as const
export const DeletedEventTypes = ["meeting.deleted", "task.deleted", "note.deleted"] as const
/** The events without `event_type` (spec §6.3): told apart only by their endpoint's fixed type. */
export const UntypedEventTypes = ["client.created", "client.updated", "prospect.created"] as const
/** Selectable at endpoint setup (spec §6.1) but with payloads not shown (§6.4): kept raw. */
export const UnshownEventTypes = [
  "contact.created",
  "contact.updated",
  "prospect.updated",
  "person.updated",
  "household.tag_added"
] as const

/** Every event type named by spec §6. */
export const KnownEventTypes = [
  ...MeetingEventTypes,
  ...TaskEventTypes,
  ...NoteEventTypes,
  ...DeletedEventTypes,
  ...UntypedEventTypes,
  ...UnshownEventTypes
] as const
export type KnownEventType = (typeof KnownEventTypes)[number]

export const MeetingEvent = Schema.Struct({
  event_type: Schema.Literals(MeetingEventTypes),
  id: Id,
  ...EventContext,
  meeting: Meeting
})
export type MeetingEvent = typeof MeetingEvent.Type

export const TaskEvent = Schema.Struct({
  event_type: Schema.Literals(TaskEventTypes),
  id: Id,
  ...EventContext,
  task: Task
})
export type TaskEvent = typeof TaskEvent.Type

/** Note events also carry the parent `household_id` at top level when applicable (spec §6.3). */
export const NoteEvent = Schema.Struct({
  event_type: Schema.Literals(NoteEventTypes),
  id: Id,
  household_id: Nullable(Schema.String),
  ...EventContext,
  note: Note
})
export type NoteEvent = typeof NoteEvent.Type

/** `meeting.deleted`, `task.deleted`, `note.deleted`: identifiers only (spec §6.3, §6.4). */
export const DeletedEvent = Schema.Struct({
  event_type: Schema.Literals(DeletedEventTypes),
  id: Id,
  // Present on note.deleted: parent ids are retained after deletion (spec §6.3).
  household_id: Nullable(Schema.String),
  ...EventContext
})
export type DeletedEvent = typeof DeletedEvent.Type

/** `client.created`: the client's fields (spec §2.9) at top level beside the context fields. */
export const ClientCreatedEvent = Schema.Struct({ ...Client.fields, ...EventContext })
export type ClientCreatedEvent = typeof ClientCreatedEvent.Type

/**
 * `client.updated`: the record under `client`; `changed_fields` names the fields changed during a
 * 60-second debounce window (names only, no previous values, not a patch).
 */
export const ClientUpdatedEvent = Schema.Struct({
  ...EventContext,
  client: Client,
  changed_fields: List(Schema.String)
})
export type ClientUpdatedEvent = typeof ClientUpdatedEvent.Type

/** `prospect.created`: the prospect's fields at top level, no `event_type` (spec §6.4). */
export const ProspectCreatedEvent = Schema.Struct({ ...Prospect.fields, ...EventContext })
export type ProspectCreatedEvent = typeof ProspectCreatedEvent.Type

/** Any other event: its body as received. */
export const OtherEventBody = Schema.Record(Schema.String, Schema.Unknown)

/**
 * One decoded delivery. `_tag` says which envelope `payload` holds; `event_type` is the event's
 * name, from the body or, for the untyped events, from the endpoint's fixed type.
 */
export const CrmEvent = Schema.Union([
  Schema.TaggedStruct("MeetingEvent", { event_type: MeetingEvent.fields.event_type, payload: MeetingEvent }),
  Schema.TaggedStruct("TaskEvent", { event_type: TaskEvent.fields.event_type, payload: TaskEvent }),
  Schema.TaggedStruct("NoteEvent", { event_type: NoteEvent.fields.event_type, payload: NoteEvent }),
  Schema.TaggedStruct("DeletedEvent", { event_type: DeletedEvent.fields.event_type, payload: DeletedEvent }),
  Schema.TaggedStruct("ClientCreated", { event_type: Schema.Literal("client.created"), payload: ClientCreatedEvent }),
  Schema.TaggedStruct("ClientUpdated", { event_type: Schema.Literal("client.updated"), payload: ClientUpdatedEvent }),
  Schema.TaggedStruct("ProspectCreated", {
    event_type: Schema.Literal("prospect.created"),
    payload: ProspectCreatedEvent
  }),
  Schema.TaggedStruct("OtherEvent", { event_type: Schema.String, payload: OtherEventBody })
]).pipe(Schema.toTaggedUnion("_tag"))
export type CrmEvent = typeof CrmEvent.Type

export class EventDecodeError extends Schema.TaggedError<EventDecodeError>()("EventDecodeError", {
  eventType: Schema.NullOr(Schema.String),
  message: Schema.String
}) {}

const isObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

const tagOf = (eventType: string): CrmEvent["_tag"] => {
  if ((MeetingEventTypes as ReadonlyArray<string>).includes(eventType)) return "MeetingEvent"
  if ((TaskEventTypes as ReadonlyArray<string>).includes(eventType)) return "TaskEvent"
  if ((NoteEventTypes as ReadonlyArray<string>).includes(eventType)) return "NoteEvent"
  if ((DeletedEventTypes as ReadonlyArray<string>).includes(eventType)) return "DeletedEvent"
  if (eventType === "client.created") return "ClientCreated"
  if (eventType === "client.updated") return "ClientUpdated"
  if (eventType === "prospect.created") return "ProspectCreated"
  return "OtherEvent"
}

/**
 * The event type of a delivery: the body's `event_type` when it has one (it names the event, spec
 * §6.3), else the endpoint's fixed event type, else none (such a body cannot be told apart, §6.3).
 */
export const eventTypeOf = (body: unknown, fixedEventType?: string): string | undefined => {
  if (isObject(body) && typeof body.event_type === "string" && body.event_type !== "") return body.event_type
  return fixedEventType === undefined || fixedEventType === "" ? undefined : fixedEventType
}

const decodeCrmEvent = Schema.decodeUnknownEffect(CrmEvent)

/**
 * Decodes a delivery body (already parsed JSON) into a `CrmEvent`. `fixedEventType` is the type an
 * endpoint is filtered to; it is needed for `client.created`, `client.updated` and
 * `prospect.created`, whose bodies do not name themselves.
 */
export const decodeEvent = Effect.fn("Events.decodeEvent")(function* (
  body: unknown,
  options?: { readonly fixedEventType?: string | undefined }
) {
  const eventType = eventTypeOf(body, options?.fixedEventType)
  if (!isObject(body)) {
    return yield* new EventDecodeError({ eventType: eventType ?? null, message: "the body is not a JSON object" })
  }
  if (eventType === undefined) {
    return yield* new EventDecodeError({
      eventType: null,
      message: "the body has no event_type and the endpoint declares no fixed event type"
    })
  }
  return yield* decodeCrmEvent(
    { _tag: tagOf(eventType), event_type: eventType, payload: body },
    { errors: "all" }
  ).pipe(Effect.mapError((error) => new EventDecodeError({ eventType, message: `${eventType}: ${error.message}` })))
})
