/**
 * EventWrites: what a webhook delivery asks of the warehouse, and those writes applied for a batch.
 * `decide` turns a claimed inbox row into its warehouse writes, or into the final status it gets
 * without any (`dead`, `unhandled`); it never fails and calls nothing outside. `applyWrites` groups
 * the writes of several rows per table, ids in a fixed order (so concurrent processors cannot
 * deadlock), and applies them in the caller's transaction.
 */
import * as DateTime from "effect/DateTime"
import * as Effect from "effect/Effect"
import * as Predicate from "effect/Predicate"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import { type CrmEvent, decodeEvent } from "../crm/Events.ts"
import * as Models from "../crm/Models.ts"
import type { ClientChange, ClientDelivery, Resource, TranscriptRead, Warehouse } from "../warehouse/Warehouse.ts"
import { parseJsonBody } from "./JsonBody.ts"
import { tooDeep } from "./JsonDepth.ts"
import type { ClaimedRow } from "./WebhookInbox.ts"

// ---------------------------------------------------------------------------------------------
// From a delivery to its writes (pure)
// ---------------------------------------------------------------------------------------------

export type Json = Readonly<Record<string, unknown>>

/** The warehouse writes one event asks for. */
export interface Writes {
  readonly upserts: ReadonlyArray<{ readonly resource: Resource; readonly record: Json }>
  /**
   * A client snapshot, written field by field (Warehouse.writeClients): `changedFields` null for a
   * `client.created`, which stands for no time and only fills fields never known.
   */
  readonly client: { readonly record: Json; readonly changedFields: ReadonlyArray<string> | null } | null
  readonly deletes: ReadonlyArray<{ readonly resource: Resource; readonly id: string }>
  /** Parent ids a note envelope carries at top level (spec §6.3), kept on the note row. */
  readonly noteParent: { readonly id: string; readonly householdId: string } | null
  readonly clientChange: {
    readonly clientId: string
    readonly changedFields: ReadonlyArray<string>
    readonly subscriptionId: string | null
    readonly bookId: string | null
  } | null
  /** The meeting whose transcript to read (meeting.transcript_ready). */
  readonly transcriptOf: string | null
}

const noWrites: Writes = {
  upserts: [],
  client: null,
  deletes: [],
  noteParent: null,
  clientChange: null,
  transcriptOf: null
}

/** Where a row stands after decoding: writes to apply, or a final status without any. */
export type Decision =
  | { readonly _tag: "Apply"; readonly row: ClaimedRow; readonly eventType: string; readonly writes: Writes }
  | {
      readonly _tag: "Settle"
      readonly row: ClaimedRow
      readonly eventType: string
      readonly status: "unhandled" | "dead"
      readonly error: string
    }

/** Context fields of spec §6.2; a flat envelope's record is the body without them (book_id stays: it is a field of the stored record). */
const CONTEXT_ONLY = ["subscription_id", "user_id", "company_id", "event_type"]

const withoutContext = (body: Json): Json => {
  const record: Record<string, unknown> = {}
  for (const [key, value] of Object.entries(body)) if (!CONTEXT_ONLY.includes(key)) record[key] = value
  return record
}

/** A nested record, given the envelope's `book_id` when it has none of its own (the client model keeps it). */
const withBook = (record: Json, body: Json): Json =>
  record.book_id === undefined && Predicate.isString(body.book_id) ? { ...record, book_id: body.book_id } : record

const deletedResource: Record<string, Resource> = {
  "meeting.deleted": "meetings",
  "task.deleted": "tasks",
  "note.deleted": "notes"
}

const decodesAs = <A>(schema: Schema.Decoder<A>) => {
  const decode = Schema.decodeUnknownResult(schema)
  return (input: unknown) => Result.isSuccess(decode(input))
}
const isContact = decodesAs(Models.Contact)
const isProspect = decodesAs(Models.Prospect)

/**
 * Events whose payloads the spec does not show (spec §6.1, §6.4) are applied only when they are
 * recognisably a record of a table (a contact under `contact` or at top level; a prospect at top
 * level, like `prospect.created`); otherwise, and for types with no table (`person.updated`,
 * `household.tag_added`), they stay in the inbox as received, `unhandled`, for a later replay.
 */
const unshownWrites = (eventType: string, body: Json): Writes | string => {
  if (eventType === "contact.created" || eventType === "contact.updated") {
    const nested = body.contact
    const record = Predicate.isObject(nested) ? (nested as Json) : withoutContext(body)
    if (isContact(record)) return { ...noWrites, upserts: [{ resource: "contacts", record: withBook(record, body) }] }
    return `${eventType}: the payload is not a recognisable contact (spec §6.4: shape not shown); kept in the inbox`
  }
  if (eventType === "prospect.updated") {
    const record = withoutContext(body)
    if (isProspect(record)) return { ...noWrites, upserts: [{ resource: "prospects", record }] }
    return `${eventType}: the payload is not a recognisable prospect (spec §6.4: shape not shown); kept in the inbox`
  }
  return `no handler for event type ${eventType}; kept in the inbox (replay once one exists)`
}

/**
 * The writes of one decoded event. `body` is the delivery as received, for the raw records.
 * Snapshots are upserted through the warehouse's forward-only guard (an older snapshot never
 * replaces a newer one, and a snapshot may be newer than its event, spec §6.1); `*.deleted` marks
 * the record deleted (a tombstone when it was never seen, so a late snapshot cannot resurrect it);
 * a client is written field by field: `client.updated` writes the fields its `changed_fields`
 * names (and fills those never known), `client.created` only fills (a creation precedes every
 * update); `client.updated` adds its `changed_fields` to `crm.client_changes`;
 * `meeting.transcript_ready` asks for its transcript to be read.
 */
const writesOf = (event: CrmEvent, body: Json): Writes | string => {
  switch (event._tag) {
    case "MeetingEvent":
      return {
        ...noWrites,
        upserts: [{ resource: "meetings", record: body.meeting as Json }],
        transcriptOf: event.event_type === "meeting.transcript_ready" ? event.payload.meeting.id : null
      }
    case "TaskEvent":
      // Status and completed_at come from the same snapshot, so completion and reopening keep
      // them consistent (spec §3); the guard keeps an older snapshot from undoing a newer one.
      return { ...noWrites, upserts: [{ resource: "tasks", record: body.task as Json }] }
    case "NoteEvent": {
      const householdId = event.payload.household_id
      return {
        ...noWrites,
        upserts: [{ resource: "notes", record: body.note as Json }],
        noteParent: householdId === null ? null : { id: event.payload.note.id, householdId }
      }
    }
    case "DeletedEvent": {
      const householdId = event.payload.household_id
      return {
        ...noWrites,
        deletes: [{ resource: deletedResource[event.event_type]!, id: event.payload.id }],
        noteParent:
          event.event_type === "note.deleted" && householdId !== null ? { id: event.payload.id, householdId } : null
      }
    }
    case "ClientCreated":
      return { ...noWrites, client: { record: withoutContext(body), changedFields: null } }
    case "ClientUpdated":
      return {
        ...noWrites,
        client: { record: withBook(body.client as Json, body), changedFields: event.payload.changed_fields },
        clientChange: {
          clientId: event.payload.client.id,
          changedFields: event.payload.changed_fields,
          subscriptionId: event.payload.subscription_id,
          bookId: event.payload.book_id
        }
      }
    case "ProspectCreated":
      return { ...noWrites, upserts: [{ resource: "prospects", record: withoutContext(body) }] }
    case "OtherEvent":
      return unshownWrites(event.event_type, body)
  }
}

/** The configured endpoints with a fixed event type, by name: the only way to the events of spec §6.3. */
export type TypedEndpoints = ReadonlyArray<{ readonly name: string; readonly eventType: string }>

/** The events that carry no `event_type` (spec §6.3). */
const UNTYPED_EVENTS = ["client.created", "client.updated", "prospect.created"]

/**
 * Which of them a body can be: `client.updated` nests the record under `client` beside
 * `changed_fields`; `client.created` and `prospect.created` put the record's fields at the top.
 */
const untypedCandidates = (body: object): ReadonlyArray<string> =>
  "changed_fields" in body || "client" in body ? ["client.updated"] : ["client.created", "prospect.created"]

/**
 * Why a body with no `event_type` reached an endpoint with no fixed type, and what to fix. It is
 * one of the events of spec §6.3; the CRM sends its copy to the endpoint filtered to its type too,
 * and that copy completes this row (WebhookInbox.insert) — unless that endpoint refused it, which
 * is what a wrong signing secret there does.
 */
export const untypedReason = (endpoint: string, typedEndpoints: TypedEndpoints, body: object = {}): string => {
  const untyped = typedEndpoints.filter((candidate) => UNTYPED_EVENTS.includes(candidate.eventType))
  const likely = untyped.filter((candidate) => untypedCandidates(body).includes(candidate.eventType))
  const typed = likely.length > 0 ? likely : untyped
  return typed.length === 0
    ? `no event_type: a client.* or prospect.created event reached endpoint ${endpoint}, which has no fixed event type; ` +
        "configure an endpoint with event_type client.created, client.updated or prospect.created for each (spec §6.3)"
    : `no event_type: a client.* or prospect.created event reached endpoint ${endpoint} and its copy on ` +
        `${typed.map((candidate) => candidate.name).join(", ")} never arrived; check that the signing secret of ` +
        `${typed.length === 1 ? "that endpoint" : "those endpoints"} matches the CRM's (crm-sync status lists refused deliveries)`
}

/**
 * Decodes one claimed row into its writes, or the final status it gets without any: a body that
 * does not decode is `dead` at once (trying again cannot help; `replay` after a fix can); an event
 * type without a handler is `unhandled`, kept for a later replay, never failed. A row is decoded by
 * its `event_type`, or by its endpoint's fixed type for the events of spec §6.3 that carry none.
 */
export const decide = (row: ClaimedRow, typedEndpoints: TypedEndpoints = []): Effect.Effect<Decision> =>
  Effect.gen(function* () {
    const eventType = row.eventType ?? "unknown"
    const settle = (status: "unhandled" | "dead", error: string): Decision => ({
      _tag: "Settle",
      row,
      eventType,
      status,
      error
    })
    const parsed = parseJsonBody(row.body)
    if (Result.isFailure(parsed)) {
      return settle("dead", parsed.failure._tag === "TooDeep" ? tooDeep : "the body is not UTF-8 JSON")
    }
    const body = parsed.success
    if (row.eventType === null && Predicate.isObject(body) && !("event_type" in body)) {
      return settle("dead", untypedReason(row.endpoint, typedEndpoints, body))
    }
    const decoded = yield* Effect.result(decodeEvent(body, { fixedEventType: row.eventType ?? undefined }))
    // A body that does not decode will not decode next time either: dead, with the reason.
    if (Result.isFailure(decoded)) return settle("dead", decoded.failure.message)
    const writes = writesOf(decoded.success, body as Json)
    return typeof writes === "string"
      ? settle("unhandled", writes)
      : { _tag: "Apply", row, eventType: decoded.success.event_type, writes }
  })

export type ApplyDecision = Extract<Decision, { _tag: "Apply" }>
export type SettleDecision = Extract<Decision, { _tag: "Settle" }>

// ---------------------------------------------------------------------------------------------
// The writes of a batch, grouped per table
// ---------------------------------------------------------------------------------------------

/** A row to apply, with the transcript read for it, if any. */
export interface Applying {
  readonly decision: ApplyDecision
  readonly transcript?: TranscriptRead
}

/** The warehouse calls a batch makes, in the order they are made. */
export interface BatchWrites {
  /** Per table in name order, records in id order, each with the time it stands for (null: none). */
  readonly upserts: ReadonlyArray<{
    readonly resource: Resource
    readonly records: ReadonlyArray<Json>
    readonly orderedAt: ReadonlyArray<string | null>
  }>
  /** Client snapshots, each with its delivery's first signed time (none for a creation). */
  readonly clients: ReadonlyArray<ClientDelivery>
  readonly transcripts: ReadonlyArray<TranscriptRead>
  /** Per table: distinct ids in order, and when they were deleted (epoch ms, the CRM's clock). */
  readonly deletes: ReadonlyArray<{
    readonly resource: Resource
    readonly ids: ReadonlyArray<string>
    readonly at: number
  }>
  readonly noteParents: ReadonlyArray<{ readonly id: string; readonly householdId: string }>
  readonly clientChanges: ReadonlyArray<ClientChange>
}

/** The `updated_at` of a raw snapshot, in epoch ms (0 when it has none). */
const snapshotMillis = (record: Json): number => {
  const value = record.updated_at
  const millis = Predicate.isString(value) ? Date.parse(value) : Number.NaN
  return Number.isNaN(millis) ? 0 : millis
}

/** A hook-timestamp's resolution (Standard Webhooks: whole seconds since the epoch). */
const SIGNED_SECOND = 1000

/** The writes of several rows, grouped per table and in a fixed order. */
export const groupWrites = (items: ReadonlyArray<Applying>): BatchWrites => {
  const upserts = new Map<Resource, Array<{ readonly record: Json; readonly at: string | null }>>()
  const deletes = new Map<Resource, { ids: Array<string>; at: number }>()
  const noteParents: Array<{ readonly id: string; readonly householdId: string }> = []
  const clientChanges: Array<ClientChange> = []
  const clients: Array<ClientDelivery> = []
  const transcripts: Array<TranscriptRead> = []
  for (const { decision, transcript } of items) {
    const { row, writes } = decision
    // The CRM's time of the delivery: the first signed time seen for its hook-id (a retry is
    // signed anew, and the intake keeps the first copy it stored). Our clock only for rows
    // stored before signed times were kept.
    const signed = row.signedAt ?? row.receivedAt
    for (const { resource, record } of writes.upserts) {
      const list = upserts.get(resource) ?? []
      // A snapshot without an updated_at of its own stands for when it was signed.
      list.push({ record, at: signed.toISOString() })
      upserts.set(resource, list)
    }
    if (writes.client !== null) {
      // A client's fields are ordered by their delivery's signed time; a creation stands for none
      // (it is older than every update of the client, docs/decisions.md).
      const { record, changedFields } = writes.client
      clients.push({ record, changedFields, signedAt: changedFields === null ? null : signed.toISOString() })
    }
    for (const { resource, id } of writes.deletes) {
      const entry = deletes.get(resource) ?? { ids: [], at: 0 }
      entry.ids.push(id)
      // The signed time counts whole seconds; the deletion happened before the delivery was signed,
      // so within the end of that second: a snapshot of that second (its updated_at has
      // milliseconds) is from before the deletion, and must not undo it.
      entry.at = Math.max(entry.at, row.signedAt === null ? row.receivedAt.getTime() : signed.getTime() + SIGNED_SECOND)
      deletes.set(resource, entry)
    }
    if (writes.noteParent !== null) noteParents.push(writes.noteParent)
    if (writes.clientChange !== null) {
      // `client.updated` history (spec §6.3), keyed by hook-id.
      const change = writes.clientChange
      clientChanges.push({
        hookId: row.hookId,
        clientId: change.clientId,
        changedFields: change.changedFields,
        subscriptionId: change.subscriptionId,
        bookId: change.bookId,
        receivedAt: DateTime.fromDateUnsafe(row.receivedAt)
      })
    }
    if (transcript !== undefined) transcripts.push(transcript)
  }
  return {
    // Ids in a fixed order, so two processors writing overlapping batches lock rows in the
    // same order and cannot deadlock (sort is stable: repeats of an id keep their order).
    upserts: [...upserts.entries()]
      .toSorted(([a], [b]) => a.localeCompare(b))
      .map(([resource, items]) => {
        const ordered = items.toSorted((a, b) => String(a.record.id).localeCompare(String(b.record.id)))
        return { resource, records: ordered.map((item) => item.record), orderedAt: ordered.map((item) => item.at) }
      }),
    clients,
    transcripts,
    // A record created and deleted within one batch ends deleted (deletes follow the upserts).
    // The deletion time is in the CRM's clock, never ours: the deletion's signed time (the
    // envelope carries none), and at least the newest snapshot of the batch, so no snapshot
    // already seen can undo it (markDeleted also keeps it at or after the stored updated_at).
    deletes: [...deletes].map(([resource, { ids, at }]) => ({
      resource,
      ids: [...new Set(ids)].toSorted(),
      at: Math.max(at, ...(upserts.get(resource) ?? []).map((item) => snapshotMillis(item.record)))
    })),
    noteParents,
    clientChanges
  }
}

/** Applies the writes of several rows; run it in the transaction that settles them. */
export const applyWrites = Effect.fnUntraced(function* (
  warehouse: Warehouse["Service"],
  items: ReadonlyArray<Applying>
) {
  const writes = groupWrites(items)
  for (const { resource, records, orderedAt } of writes.upserts) {
    yield* warehouse.upsert(resource, records, { source: "webhook", orderedAt })
  }
  yield* warehouse.writeClients(writes.clients, { source: "webhook" })
  // The read started last wins, whichever batch commits last; none found retires the stored one.
  yield* warehouse.writeTranscripts(writes.transcripts, { source: "webhook" })
  // After the upserts: a record created and deleted within one batch ends deleted (a deleted
  // meeting's transcript with it).
  for (const { resource, ids, at } of writes.deletes) {
    yield* warehouse.markDeleted(resource, ids, DateTime.makeUnsafe(at), { source: "webhook" })
  }
  // Spec §6.3: a note envelope's top-level household_id is retained after deletion.
  yield* warehouse.keepNoteHouseholds(writes.noteParents)
  // `client.updated` history, one statement for the batch.
  yield* warehouse.recordClientChanges(writes.clientChanges)
})
