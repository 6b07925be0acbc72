/**
 * EventProcessor: applies the deliveries waiting in `crm_sync.webhook_inbox` to the warehouse.
 *
 * A batch is leased with `FOR UPDATE SKIP LOCKED` (WebhookInbox.claim), so any number of
 * processes share the inbox without coordinating in memory. Each row is decoded by its
 * `event_type`, or by its endpoint's fixed type for the events of spec §6.3 that carry none
 * (Events.decodeEvent), and turned into warehouse writes: snapshots are upserted through the
 * warehouse's forward-only guard (an older snapshot never replaces a newer one, and a snapshot may
 * be newer than its event, spec §6.1), `*.deleted` marks the record deleted (a tombstone when it was
 * never seen, so a late snapshot cannot resurrect it), `client.updated` adds its `changed_fields`
 * to `crm.client_changes`, and `meeting.transcript_ready` reads the transcript (TranscriptReader,
 * interactive priority) before the transaction, so no HTTP call ever holds one open.
 *
 * The writes of a whole batch and the settlement of its inbox rows commit in one transaction:
 * a row is `processed` exactly when its effects are in the warehouse, so a crash at any point
 * leaves it claimable again (after its lease expires) and applying it again changes nothing. A
 * transaction that fails transiently (a deadlock, a lost connection) is tried again; one that
 * fails over some row's data is split, each row tried alone, and the ones that still fail are put
 * back as `failed` with a backoff (`dead` after `webhooks.max_attempts`). A body that does not decode is
 * `dead` at once (trying again cannot help; `replay` after a fix can); an event type without a
 * handler is `unhandled`, kept for a later replay, never failed.
 *
 * `EventProcessorLive` runs it: woken by LISTEN/NOTIFY on the inbox channel (the intake's INSERT
 * notifies on commit), with a periodic poll as a fallback (a lost notification, retries coming
 * due), plus a reaper for leases whose holder died and the pruning of old processed rows.
 */
import { PgClient } from "@effect/sql-pg"
import {
  Cause,
  Clock,
  Context,
  DateTime,
  Duration,
  Effect,
  Exit,
  Layer,
  Predicate,
  Queue,
  Result,
  Schema
} from "effect"
import { oneLine } from "../observability/Text.ts"
import { SqlClient } from "effect/sql/SqlClient"
import { isSqlError, type SqlError } from "effect/sql/SqlError"
import { randomBytes } from "node:crypto"
import { hostname } from "node:os"
import { AppConfig } from "../config/AppConfig.ts"
import { CrmError } from "../crm/CrmError.ts"
import { type CrmEvent, decodeEvent } from "../crm/Events.ts"
import * as Models from "../crm/Models.ts"
import * as Metrics from "../observability/Metrics.ts"
import { type Resource, Warehouse } from "../warehouse/Warehouse.ts"
import { WarehouseError } from "../warehouse/WarehouseError.ts"
import { TranscriptReader } from "./TranscriptReader.ts"
import { nestsDeeperThan, tooDeep } from "./JsonDepth.ts"
import {
  type ClaimedRow,
  type Failure,
  INBOX_CHANNEL,
  type ReplaySelection,
  type Settlement,
  WebhookInbox
} from "./WebhookInbox.ts"

export interface EventProcessorOptions {
  /** Rows claimed and applied per transaction. */
  readonly batchSize?: number
  /** How often to look for due rows without a notification (lost NOTIFY, retries coming due). */
  readonly pollInterval?: Duration.Input
  /** A claimed row whose holder has not settled it by then is freed by the reaper. */
  readonly leaseTimeout?: Duration.Input
  /** Identifies this processor in `locked_by` (default: host, pid and a random suffix). */
  readonly workerId?: string
  /** Transcript reads in flight at once. */
  readonly transcriptConcurrency?: number
  /**
   * Batches this process applies at once, each claimed and committed on its own. Two keep
   * PostgreSQL busy while the next batch is decoded.
   */
  readonly concurrency?: number
}

/** What one batch did. */
export interface BatchReport {
  readonly claimed: number
  readonly processed: number
  readonly unhandled: number
  readonly dead: number
  /** Put back to be retried later (or dead after the last attempt). */
  readonly failed: number
}

const emptyReport: BatchReport = { claimed: 0, processed: 0, unhandled: 0, dead: 0, failed: 0 }

const addReports = (a: BatchReport, b: BatchReport): BatchReport => ({
  claimed: a.claimed + b.claimed,
  processed: a.processed + b.processed,
  unhandled: a.unhandled + b.unhandled,
  dead: a.dead + b.dead,
  failed: a.failed + b.failed
})

/** Processed rows are kept at least this long: longer than any sender's retries (issue 6). */
export const MINIMUM_RETENTION = Duration.days(7)

// ---------------------------------------------------------------------------------------------
// From a delivery to its writes (pure)
// ---------------------------------------------------------------------------------------------

type Json = Readonly<Record<string, unknown>>

/** The warehouse writes one event asks for. */
interface Writes {
  readonly upserts: ReadonlyArray<{ readonly resource: Resource; readonly record: Json }>
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

const noWrites: Writes = { upserts: [], deletes: [], noteParent: null, clientChange: null, transcriptOf: null }

/** Where a row stands after decoding: writes to apply, or a final status without any. */
type Decision =
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

/** The writes of one decoded event. `body` is the delivery as received, for the raw records. */
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
      return { ...noWrites, upserts: [{ resource: "clients", record: withoutContext(body) }] }
    case "ClientUpdated":
      return {
        ...noWrites,
        upserts: [{ resource: "clients", record: withBook(body.client as Json, body) }],
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

const utf8 = new TextDecoder("utf-8", { fatal: true })

const parseBody = (row: ClaimedRow) =>
  Effect.try({
    try: () => {
      const text = utf8.decode(row.body)
      if (nestsDeeperThan(text)) throw new RangeError(tooDeep)
      return JSON.parse(text) as unknown
    },
    catch: (cause) =>
      cause instanceof RangeError && cause.message === tooDeep ? tooDeep : "the body is not UTF-8 JSON"
  })

/** Decodes one claimed row into its writes, or the final status it gets without any. */
const decide = (row: ClaimedRow): Effect.Effect<Decision> =>
  Effect.gen(function* () {
    const eventType = row.eventType ?? "unknown"
    const settle = (status: "unhandled" | "dead", error: string): Decision => ({
      _tag: "Settle",
      row,
      eventType,
      status,
      error
    })
    const parsed = yield* Effect.result(parseBody(row))
    if (Result.isFailure(parsed)) return settle("dead", parsed.failure)
    const body = parsed.success
    const decoded = yield* Effect.result(decodeEvent(body, { fixedEventType: row.eventType ?? undefined }))
    // A body that does not decode will not decode next time either: dead, with the reason.
    if (Result.isFailure(decoded)) return settle("dead", decoded.failure.message)
    const writes = writesOf(decoded.success, body as Json)
    return typeof writes === "string"
      ? settle("unhandled", writes)
      : { _tag: "Apply", row, eventType: decoded.success.event_type, writes }
  })

type ApplyDecision = Extract<Decision, { _tag: "Apply" }>
type SettleDecision = Extract<Decision, { _tag: "Settle" }>

/** A transcript read's outcome: the raw response, or none because the meeting has gone (404). */
type TranscriptOutcome = { readonly raw: unknown } | { readonly missing: string }

/** A row ready to be applied, with the transcript read for it (or a note on why there is none). */
type Ready = {
  readonly decision: ApplyDecision
  readonly transcript?: unknown
  readonly note?: string
}

const settlementOf = (
  item: { readonly decision: Decision; readonly note?: string },
  status: Settlement["status"]
): Settlement => ({
  hookId: item.decision.row.hookId,
  status,
  error: item.decision._tag === "Settle" ? item.decision.error : (item.note ?? null)
})

const record = (eventType: string, result: string) =>
  Metrics.increment(Metrics.webhookEvents, { event_type: eventType, result })

/** A background loop's failure: logged, then a pause before the loop goes on. */
const onError = (what: string, pause: Duration.Input) => (cause: Cause.Cause<unknown>) =>
  Effect.andThen(
    Effect.logWarning(`webhook processor: ${what} failed`).pipe(Effect.annotateLogs({ error: describe(cause) })),
    Effect.sleep(pause)
  )

/** A failure that the same transaction may not meet again: a deadlock, a serialization failure, a lost connection. */
const isTransient = (error: unknown): boolean =>
  (error instanceof WarehouseError && error.retryable) || (isSqlError(error) && error.reason.isRetryable)

const describe = (cause: Cause.Cause<unknown>): string => oneLine(cause)

// ---------------------------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------------------------

export class EventProcessor extends Context.Service<
  EventProcessor,
  {
    readonly workerId: string
    readonly batchSize: number
    readonly concurrency: number
    readonly pollInterval: Duration.Duration
    readonly leaseTimeout: Duration.Duration
    /** Claims one batch of due rows and applies it; the report says what became of them. */
    readonly processBatch: Effect.Effect<BatchReport, SqlError | WarehouseError>
    /** Processes batches (`concurrency` at a time) until no row is due; returns the totals. */
    readonly drain: Effect.Effect<BatchReport, SqlError | WarehouseError>
  }
>()("crm-sync/webhooks/EventProcessor") {
  static readonly layerWith = (options: EventProcessorOptions = {}) =>
    Layer.effect(
      EventProcessor,
      Effect.gen(function* () {
        const config = yield* AppConfig
        const sql = yield* SqlClient
        const inbox = yield* WebhookInbox
        const warehouse = yield* Warehouse
        const transcripts = yield* TranscriptReader
        const workerId = options.workerId ?? `${hostname()}:${process.pid}:${randomBytes(3).toString("hex")}`
        const batchSize = options.batchSize ?? 500
        const concurrency = Math.max(1, options.concurrency ?? 2)
        const maxAttempts = config.webhooks.max_attempts
        const transcriptConcurrency = options.transcriptConcurrency ?? 4

        const readTranscript = (item: ApplyDecision) =>
          transcripts.read(item.row.endpoint, item.writes.transcriptOf!).pipe(
            Effect.map((raw): TranscriptOutcome => ({ raw })),
            // The meeting is gone (deleted since): nothing to read, and the row is still done.
            Effect.catchIf(
              (error) => error instanceof CrmError && error.reason._tag === "NotFound",
              () => Effect.succeed<TranscriptOutcome>({ missing: "transcript not found (404): the meeting is gone" })
            )
          )

        /** The warehouse writes of several rows, grouped per table and in a fixed order. */
        const applyWrites = Effect.fnUntraced(function* (
          items: ReadonlyArray<{ readonly decision: ApplyDecision; readonly transcript?: unknown }>
        ) {
          const upserts = new Map<Resource, Array<{ readonly record: Json; readonly at: string }>>()
          const deletes = new Map<Resource, { ids: Array<string>; at: number }>()
          const noteParents: Array<{ readonly id: string; readonly householdId: string }> = []
          const changes: Array<{ readonly row: ClaimedRow; readonly change: NonNullable<Writes["clientChange"]> }> = []
          const transcriptRecords: Array<Json> = []
          for (const { decision, transcript } of items) {
            const { row, writes } = decision
            // A snapshot without an updated_at of its own (a client) stands for when it was signed.
            const at = (row.signedAt ?? row.receivedAt).toISOString()
            for (const { resource, record } of writes.upserts) {
              const list = upserts.get(resource) ?? []
              list.push({ record, at })
              upserts.set(resource, list)
            }
            for (const { resource, id } of writes.deletes) {
              const entry = deletes.get(resource) ?? { ids: [], at: 0 }
              entry.ids.push(id)
              entry.at = Math.max(entry.at, row.receivedAt.getTime())
              deletes.set(resource, entry)
            }
            if (writes.noteParent !== null) noteParents.push(writes.noteParent)
            if (writes.clientChange !== null) changes.push({ row, change: writes.clientChange })
            if (Predicate.isObject(transcript)) transcriptRecords.push(transcript as Json)
          }
          // Ids in a fixed order, so two processors writing overlapping batches lock rows in the
          // same order and cannot deadlock (sort is stable: repeats of an id keep their order).
          for (const [resource, items] of [...upserts.entries()].toSorted(([a], [b]) => a.localeCompare(b))) {
            const ordered = items.toSorted((a, b) => String(a.record.id).localeCompare(String(b.record.id)))
            yield* warehouse.upsert(
              resource,
              ordered.map((item) => item.record),
              { source: "webhook", orderedAt: ordered.map((item) => item.at) }
            )
          }
          if (transcriptRecords.length > 0) {
            yield* warehouse.upsert("meeting_transcripts", transcriptRecords, { source: "webhook" })
          }
          // After the upserts: a record created and deleted within one batch ends deleted. The
          // deletion time is when the delivery arrived (the envelope carries none), and at least
          // the newest snapshot of the batch, so no snapshot already seen can undo it.
          for (const [resource, { ids, at }] of deletes) {
            const newest = Math.max(at, ...(upserts.get(resource) ?? []).map((item) => snapshotMillis(item.record)))
            yield* warehouse.markDeleted(resource, [...new Set(ids)].toSorted(), DateTime.makeUnsafe(newest), {
              source: "webhook"
            })
          }
          // Spec §6.3: a note envelope's top-level household_id is retained after deletion.
          yield* warehouse.keepNoteHouseholds(noteParents)
          // `client.updated` history (spec §6.3), one statement for the batch, keyed by hook-id.
          yield* warehouse.recordClientChanges(
            changes.map(({ row, change }) => ({
              hookId: row.hookId,
              clientId: change.clientId,
              changedFields: change.changedFields,
              subscriptionId: change.subscriptionId,
              bookId: change.bookId,
              receivedAt: DateTime.fromDateUnsafe(row.receivedAt)
            }))
          )
        })

        /** Applies rows and settles them (and the final-status rows) in one transaction. */
        const commit = (ready: ReadonlyArray<Ready>, finals: ReadonlyArray<SettleDecision>) =>
          sql.withTransaction(
            Effect.andThen(
              applyWrites(ready),
              inbox.settle(workerId, [
                ...ready.map((item) => settlementOf(item, "processed")),
                ...finals.map((decision) => settlementOf({ decision }, decision.status))
              ])
            )
          )

        const processBatch = Effect.gen(function* () {
          const rows = yield* inbox.claim(workerId, batchSize)
          if (rows.length === 0) return emptyReport
          const started = yield* Clock.currentTimeMillis
          const decisions = yield* Effect.forEach(rows, decide)
          const finals = decisions.filter((d): d is SettleDecision => d._tag === "Settle")
          const applying = decisions.filter((d): d is ApplyDecision => d._tag === "Apply")

          // Follow-up reads first, outside any transaction.
          const failures: Array<Failure & { readonly eventType: string }> = []
          const ready: Array<Ready> = []
          const outcomes = yield* Effect.forEach(
            applying,
            (decision): Effect.Effect<{ decision: ApplyDecision; outcome?: Exit.Exit<TranscriptOutcome, unknown> }> =>
              decision.writes.transcriptOf === null
                ? Effect.succeed({ decision })
                : Effect.map(Effect.exit(readTranscript(decision)), (outcome) => ({ decision, outcome })),
            { concurrency: transcriptConcurrency }
          )
          for (const { decision, outcome } of outcomes) {
            if (outcome === undefined) ready.push({ decision })
            else if (outcome._tag === "Failure") {
              failures.push({
                hookId: decision.row.hookId,
                attempts: decision.row.attempts,
                eventType: decision.eventType,
                error: `transcript read failed: ${describe(outcome.cause)}`
              })
            } else if ("raw" in outcome.value) ready.push({ decision, transcript: outcome.value.raw })
            else ready.push({ decision, note: outcome.value.missing })
          }

          // The whole batch in one transaction, tried again after a transient failure (a deadlock
          // with another processor, a lost connection). If the database stays unreachable, the
          // batch fails as a whole and its leases expire into the reaper's hands; any other
          // failure is about some row's data, so each row is then tried alone to isolate it.
          const together = yield* Effect.exit(
            commit(ready, finals).pipe(Effect.retry({ times: 2, while: isTransient }))
          )
          let committed: ReadonlyArray<Ready> = ready
          if (together._tag === "Failure") {
            const error = Cause.squash(together.cause)
            if (isTransient(error)) return yield* Effect.failCause(together.cause)
            yield* Effect.logWarning("webhook batch failed; applying its rows one by one").pipe(
              Effect.annotateLogs({ rows: rows.length, error: describe(together.cause) })
            )
            const alone: Array<Ready> = []
            for (const item of ready) {
              const exit = yield* Effect.exit(commit([item], []))
              if (exit._tag === "Success") alone.push(item)
              else {
                failures.push({
                  hookId: item.decision.row.hookId,
                  attempts: item.decision.row.attempts,
                  eventType: item.decision.eventType,
                  error: describe(exit.cause)
                })
              }
            }
            yield* inbox.settle(
              workerId,
              finals.map((decision) => settlementOf({ decision }, decision.status))
            )
            committed = alone
          }
          const { dead } = yield* inbox.retryLater(workerId, failures, maxAttempts)
          const deadIds = new Set(dead)

          const now = yield* Clock.currentTimeMillis
          for (const item of committed) {
            yield* record(item.decision.eventType, "processed")
            yield* Metrics.observe(
              Metrics.webhookLagSeconds,
              Math.max(0, now - item.decision.row.receivedAt.getTime()) / 1000
            )
          }
          for (const decision of finals) yield* record(decision.eventType, decision.status)
          for (const failure of failures) {
            yield* record(failure.eventType, deadIds.has(failure.hookId) ? "dead" : "failed")
            yield* Effect.logWarning("webhook event failed").pipe(
              Effect.annotateLogs({
                hook_id: failure.hookId,
                event_type: failure.eventType,
                attempt: failure.attempts,
                dead: deadIds.has(failure.hookId),
                error: failure.error
              })
            )
          }
          yield* Metrics.observe(Metrics.webhookApplySeconds, (now - started) / 1000)
          return {
            claimed: rows.length,
            processed: committed.length,
            unhandled: finals.filter((d) => d.status === "unhandled").length,
            dead: finals.filter((d) => d.status === "dead").length + dead.length,
            failed: failures.length - dead.length
          } satisfies BatchReport
        }).pipe(Effect.withSpan("EventProcessor.processBatch"))

        const drainOne = Effect.gen(function* () {
          let total = emptyReport
          while (true) {
            const report = yield* processBatch
            total = addReports(total, report)
            if (report.claimed < batchSize) return total
          }
        })
        const drain = Effect.map(
          Effect.all(
            Array.from({ length: concurrency }, () => drainOne),
            { concurrency: "unbounded" }
          ),
          (reports) => reports.reduce(addReports, emptyReport)
        )

        return EventProcessor.of({
          workerId,
          batchSize,
          concurrency,
          pollInterval: Duration.fromInputUnsafe(options.pollInterval ?? "5 seconds"),
          leaseTimeout:
            options.leaseTimeout === undefined
              ? config.webhooks.lease_timeout
              : Duration.fromInputUnsafe(options.leaseTimeout),
          processBatch,
          drain
        })
      })
    )

  static readonly layer = EventProcessor.layerWith()
}

/** The `updated_at` of a raw snapshot, in epoch ms (0 when it has none). */
const snapshotMillis = (record: Json): number => {
  const value = record.updated_at
  const millis = Predicate.isString(value) ? Date.parse(value) : Number.NaN
  return Number.isNaN(millis) ? 0 : millis
}

// ---------------------------------------------------------------------------------------------
// The running processor
// ---------------------------------------------------------------------------------------------

/**
 * Runs the processor for the life of the layer: work on every notification and poll tick, the
 * LISTEN connection kept up (re-established after a failure), leases reaped, old rows pruned.
 */
export const EventProcessorLive = Layer.effectDiscard(
  Effect.gen(function* () {
    const processor = yield* EventProcessor
    const inbox = yield* WebhookInbox
    const pg = yield* PgClient.PgClient
    const config = yield* AppConfig
    const wake = yield* Queue.sliding<true>(1)
    const poke = Queue.offer(wake, true)

    // LISTEN on a dedicated connection; after it is confirmed, catch up once (rows committed
    // before it would otherwise wait for the next poll).
    const listen = Effect.scoped(
      Effect.gen(function* () {
        const notifications = yield* pg.listen(INBOX_CHANNEL)
        yield* poke
        while (true) {
          yield* Queue.take(notifications)
          yield* poke
        }
      })
    ).pipe(Effect.catchCause(onError("LISTEN", "2 seconds")), Effect.forever)

    const poll = Effect.gen(function* () {
      yield* Effect.sleep(processor.pollInterval)
      yield* poke
      const counts = yield* inbox.counts
      yield* Metrics.set(Metrics.webhookInboxBacklog, counts.backlog)
      yield* Metrics.set(Metrics.webhookInboxDead, counts.dead)
    }).pipe(Effect.catchCause(onError("poll", "1 second")), Effect.forever)

    // Each wake-up drains: batches until one comes back short (more may be waiting after a full one).
    const work = Effect.andThen(Queue.take(wake), processor.drain).pipe(
      Effect.catchCause(onError("batch", "1 second")),
      Effect.forever
    )

    const reap = Effect.gen(function* () {
      yield* Effect.sleep(Duration.max(Duration.divideUnsafe(processor.leaseTimeout, 2), Duration.seconds(1)))
      const freed = yield* inbox.reap(processor.leaseTimeout)
      if (freed > 0) {
        yield* Effect.logWarning("webhook processor: freed expired leases").pipe(Effect.annotateLogs({ rows: freed }))
        yield* poke
      }
    }).pipe(Effect.catchCause(onError("reaper", "5 seconds")), Effect.forever)

    const retention = Duration.max(config.webhooks.retention, MINIMUM_RETENTION)
    const prune = Effect.gen(function* () {
      const deleted = yield* inbox.prune(retention)
      if (deleted > 0) yield* Effect.logInfo("webhook inbox pruned").pipe(Effect.annotateLogs({ rows: deleted }))
      yield* Effect.sleep(config.schedules.prune)
    }).pipe(Effect.catchCause(onError("prune", "1 minute")), Effect.forever)

    yield* Effect.forkScoped(listen)
    yield* Effect.forkScoped(poll)
    yield* Effect.forkScoped(work)
    yield* Effect.forkScoped(reap)
    yield* Effect.forkScoped(prune)
    yield* Effect.logInfo("webhook processor started").pipe(
      Effect.annotateLogs({ worker: processor.workerId, batch_size: processor.batchSize })
    )
  })
)

/**
 * `crm-sync webhooks replay [--dead | <hook-id>]`: puts dead rows (or one row, whatever its status)
 * back to pending with a fresh set of attempts; a running processor is woken by NOTIFY.
 */
export const replay = Effect.fn("EventProcessor.replay")(function* (selection: ReplaySelection) {
  const inbox = yield* WebhookInbox
  const replayed = yield* inbox.replay(selection)
  yield* Effect.logInfo("webhook deliveries replayed").pipe(
    Effect.annotateLogs({ rows: replayed, selection: selection._tag === "Dead" ? "dead" : selection.hookId })
  )
  return replayed
})
