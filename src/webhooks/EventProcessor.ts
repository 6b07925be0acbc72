/**
 * EventProcessor: applies the deliveries waiting in `crm_sync.webhook_inbox` to the warehouse.
 * A batch is leased with `FOR UPDATE SKIP LOCKED` (WebhookInbox.claim), so any number of processes
 * share the inbox without coordinating in memory; its rows are decided (EventWrites), transcripts
 * read outside any transaction, then the writes and the rows' settlement commit in one transaction:
 * a row is `processed` exactly when its effects are in the warehouse, so a crash at any point leaves
 * it claimable again (after its lease expires) and applying it again changes nothing.
 * `EventProcessorLive` runs it in the daemon.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Queue from "effect/Queue"
import { SqlClient } from "effect/sql/SqlClient"
import { isSqlError, type SqlError } from "effect/sql/SqlError"
import { randomBytes } from "node:crypto"
import { hostname } from "node:os"
import { AppConfig } from "../config/AppConfig.ts"
import { CrmError } from "../crm/CrmError.ts"
import * as Metrics from "../observability/Metrics.ts"
import { oneLine } from "../observability/Text.ts"
import { type TranscriptRead, Warehouse } from "../warehouse/Warehouse.ts"
import { WarehouseError } from "../warehouse/WarehouseError.ts"
import {
  type Applying,
  type ApplyDecision,
  applyWrites,
  decide,
  type TypedEndpoints,
  type Decision,
  type SettleDecision
} from "./EventWrites.ts"
import { TranscriptReader } from "./TranscriptReader.ts"
import { type Failure, INBOX_CHANNEL, type ReplaySelection, type Settlement, WebhookInbox } from "./WebhookInbox.ts"

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

/** A transcript read, or a note on why there is none (404: the meeting is gone). */
type TranscriptOutcome = { readonly read: TranscriptRead } | { readonly missing: string }

/** A row ready to be applied, with the transcript read for it (or a note on why there is none). */
type Ready = Applying & { readonly note?: string }

/** A claimed row that failed this time, with its event type for the metrics. */
type EventFailure = Failure & { readonly eventType: string }

const settlementOf = (
  item: { readonly decision: Decision; readonly note?: string },
  status: Settlement["status"]
): Settlement => ({
  hookId: item.decision.row.hookId,
  status,
  error: item.decision._tag === "Settle" ? item.decision.error : (item.note ?? null)
})

const failureOf = (decision: ApplyDecision, error: string): EventFailure => ({
  hookId: decision.row.hookId,
  attempts: decision.row.attempts,
  eventType: decision.eventType,
  error
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
// One batch: claimed, decided, followed up, committed, reported
// ---------------------------------------------------------------------------------------------

/** What the batch functions share, as the layer assembles it. */
interface Processor {
  readonly sql: SqlClient
  readonly inbox: WebhookInbox["Service"]
  readonly warehouse: Warehouse["Service"]
  readonly transcripts: TranscriptReader["Service"]
  readonly workerId: string
  readonly batchSize: number
  readonly maxAttempts: number
  /** The endpoints with a fixed event type: named in the reason of an untyped event gone dead. */
  readonly typedEndpoints: TypedEndpoints
  readonly transcriptConcurrency: number
}

/**
 * One transcript read, stamped with the database's clock as it starts: of two reads of one
 * meeting, the one started later is kept, whichever batch commits last.
 */
const readTranscript = (p: Processor, item: ApplyDecision) =>
  Effect.flatMap(p.warehouse.readStarted, (readAt) => {
    const meetingId = item.writes.transcriptOf!
    return p.transcripts.read(item.row.endpoint, meetingId).pipe(
      Effect.map((raw): TranscriptOutcome => ({ read: { meetingId, raw, readAt } })),
      // The meeting is gone (deleted since): nothing to read, and the row is still done. Its
      // transcript is retired by the meeting's deletion (its event, or the by-id check), not by
      // this 404, which a connection that cannot see the meeting would also get.
      Effect.catchIf(
        (error) => error instanceof CrmError && error.reason._tag === "NotFound",
        () => Effect.succeed<TranscriptOutcome>({ missing: "transcript not found (404): the meeting is gone" })
      )
    )
  })

/**
 * The follow-up reads: `meeting.transcript_ready` reads the transcript (TranscriptReader,
 * interactive priority) before the transaction, so no HTTP call ever holds one open. Each row is
 * then ready to apply, or failed for now.
 */
const followUp = Effect.fnUntraced(function* (p: Processor, applying: ReadonlyArray<ApplyDecision>) {
  const failures: Array<EventFailure> = []
  const ready: Array<Ready> = []
  const outcomes = yield* Effect.forEach(
    applying,
    (decision): Effect.Effect<{ decision: ApplyDecision; outcome?: Exit.Exit<TranscriptOutcome, unknown> }> =>
      decision.writes.transcriptOf === null
        ? Effect.succeed({ decision })
        : Effect.map(Effect.exit(readTranscript(p, decision)), (outcome) => ({ decision, outcome })),
    { concurrency: p.transcriptConcurrency }
  )
  for (const { decision, outcome } of outcomes) {
    if (outcome === undefined) ready.push({ decision })
    else if (outcome._tag === "Failure") {
      failures.push(failureOf(decision, `transcript read failed: ${describe(outcome.cause)}`))
    } else if ("read" in outcome.value) ready.push({ decision, transcript: outcome.value.read })
    else ready.push({ decision, note: outcome.value.missing })
  }
  return { ready, failures }
})

/** Applies rows and settles them (and the final-status rows) in one transaction. */
const commit = (p: Processor, ready: ReadonlyArray<Ready>, finals: ReadonlyArray<SettleDecision>) =>
  p.sql.withTransaction(
    Effect.andThen(
      applyWrites(p.warehouse, ready),
      p.inbox.settle(p.workerId, [
        ...ready.map((item) => settlementOf(item, "processed")),
        ...finals.map((decision) => settlementOf({ decision }, decision.status))
      ])
    )
  )

/**
 * The whole batch in one transaction, tried again after a transient failure (a deadlock with
 * another processor, a lost connection). If the database stays unreachable, the batch fails as a
 * whole and its leases expire into the reaper's hands; any other failure is about some row's
 * data, so each row is then tried alone to isolate it. Returns the rows committed and those that failed.
 */
const commitBatch = Effect.fnUntraced(function* (
  p: Processor,
  claimed: number,
  ready: ReadonlyArray<Ready>,
  finals: ReadonlyArray<SettleDecision>
) {
  const together = yield* Effect.exit(commit(p, ready, finals).pipe(Effect.retry({ times: 2, while: isTransient })))
  if (together._tag === "Success") return { committed: ready, failures: [] }
  const error = Cause.squash(together.cause)
  if (isTransient(error)) return yield* Effect.failCause(together.cause)
  yield* Effect.logWarning("webhook batch failed; applying its rows one by one").pipe(
    Effect.annotateLogs({ rows: claimed, error: describe(together.cause) })
  )
  const alone: Array<Ready> = []
  const failures: Array<EventFailure> = []
  for (const item of ready) {
    const exit = yield* Effect.exit(commit(p, [item], []))
    if (exit._tag === "Success") alone.push(item)
    else failures.push(failureOf(item.decision, describe(exit.cause)))
  }
  yield* p.inbox.settle(
    p.workerId,
    finals.map((decision) => settlementOf({ decision }, decision.status))
  )
  return { committed: alone, failures }
})

/** Counts and logs what became of a batch's rows, and how long it took since `started`. */
const recordOutcomes = Effect.fnUntraced(function* (
  committed: ReadonlyArray<Ready>,
  finals: ReadonlyArray<SettleDecision>,
  failures: ReadonlyArray<EventFailure>,
  deadIds: ReadonlySet<string>,
  started: number
) {
  const now = yield* Clock.currentTimeMillis
  for (const item of committed) {
    yield* record(item.decision.eventType, "processed")
    yield* Metrics.observe(Metrics.webhookLagSeconds, Math.max(0, now - item.decision.row.receivedAt.getTime()) / 1000)
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
})

/**
 * One batch. Rows that fail (a transcript read, their own data) are put back as `failed` with a
 * backoff, `dead` after `webhooks.max_attempts`; rows decided `dead` or `unhandled` settle with it.
 */
const processBatch = (p: Processor) =>
  Effect.gen(function* () {
    const rows = yield* p.inbox.claim(p.workerId, p.batchSize)
    if (rows.length === 0) return emptyReport
    const started = yield* Clock.currentTimeMillis
    const decisions = yield* Effect.forEach(rows, (row) => decide(row, p.typedEndpoints))
    const finals = decisions.filter((d): d is SettleDecision => d._tag === "Settle")
    const applying = decisions.filter((d): d is ApplyDecision => d._tag === "Apply")
    // Follow-up reads first, outside any transaction.
    const read = yield* followUp(p, applying)
    const applied = yield* commitBatch(p, rows.length, read.ready, finals)
    const failures = [...read.failures, ...applied.failures]
    const { dead } = yield* p.inbox.retryLater(p.workerId, failures, p.maxAttempts)
    yield* recordOutcomes(applied.committed, finals, failures, new Set(dead), started)
    return {
      claimed: rows.length,
      processed: applied.committed.length,
      unhandled: finals.filter((d) => d.status === "unhandled").length,
      dead: finals.filter((d) => d.status === "dead").length + dead.length,
      failed: failures.length - dead.length
    } satisfies BatchReport
  }).pipe(Effect.withSpan("EventProcessor.processBatch"))

/** Batches until one comes back short, `concurrency` such loops at once; returns the totals. */
const drain = (
  batch: Effect.Effect<BatchReport, SqlError | WarehouseError>,
  batchSize: number,
  concurrency: number
) => {
  const drainOne = Effect.gen(function* () {
    let total = emptyReport
    while (true) {
      const report = yield* batch
      total = addReports(total, report)
      if (report.claimed < batchSize) return total
    }
  })
  return Effect.map(
    Effect.all(
      Array.from({ length: concurrency }, () => drainOne),
      { concurrency: "unbounded" }
    ),
    (reports) => reports.reduce(addReports, emptyReport)
  )
}

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
        const p: Processor = {
          sql: yield* SqlClient,
          inbox: yield* WebhookInbox,
          warehouse: yield* Warehouse,
          transcripts: yield* TranscriptReader,
          workerId: options.workerId ?? `${hostname()}:${process.pid}:${randomBytes(3).toString("hex")}`,
          batchSize: options.batchSize ?? 500,
          maxAttempts: config.webhooks.max_attempts,
          typedEndpoints: config.webhooks.endpoints.flatMap((endpoint) =>
            endpoint.event_type === undefined ? [] : [{ name: endpoint.name, eventType: endpoint.event_type }]
          ),
          transcriptConcurrency: options.transcriptConcurrency ?? 4
        }
        const concurrency = Math.max(1, options.concurrency ?? 2)
        const batch = processBatch(p)
        return EventProcessor.of({
          workerId: p.workerId,
          batchSize: p.batchSize,
          concurrency,
          pollInterval: Duration.fromInputUnsafe(options.pollInterval ?? "5 seconds"),
          leaseTimeout:
            options.leaseTimeout === undefined
              ? config.webhooks.lease_timeout
              : Duration.fromInputUnsafe(options.leaseTimeout),
          processBatch: batch,
          drain: drain(batch, p.batchSize, concurrency)
        })
      })
    )

  static readonly layer = EventProcessor.layerWith()
}

// ---------------------------------------------------------------------------------------------
// The running processor
// ---------------------------------------------------------------------------------------------

/** Wakes the work loop; several wake-ups before it runs make one (a sliding queue of one). */
type Poke = Effect.Effect<boolean>

// LISTEN on a dedicated connection; after it is confirmed, catch up once (rows committed
// before it would otherwise wait for the next poll).
const listenLoop = (pg: PgClient.PgClient, poke: Poke) =>
  Effect.scoped(
    Effect.gen(function* () {
      const notifications = yield* pg.listen(INBOX_CHANNEL)
      yield* poke
      while (true) {
        yield* Queue.take(notifications)
        yield* poke
      }
    })
  ).pipe(Effect.catchCause(onError("LISTEN", "2 seconds")), Effect.forever)

/** A poll tick: a wake-up, and the inbox's backlog gauges. */
const pollLoop = (processor: EventProcessor["Service"], inbox: WebhookInbox["Service"], poke: Poke) =>
  Effect.gen(function* () {
    yield* Effect.sleep(processor.pollInterval)
    yield* poke
    const counts = yield* inbox.counts
    yield* Metrics.set(Metrics.webhookInboxBacklog, counts.backlog)
    yield* Metrics.set(Metrics.webhookInboxDead, counts.dead)
  }).pipe(Effect.catchCause(onError("poll", "1 second")), Effect.forever)

const reapLoop = (processor: EventProcessor["Service"], inbox: WebhookInbox["Service"], poke: Poke) =>
  Effect.gen(function* () {
    yield* Effect.sleep(Duration.max(Duration.divideUnsafe(processor.leaseTimeout, 2), Duration.seconds(1)))
    const freed = yield* inbox.reap(processor.leaseTimeout)
    if (freed > 0) {
      yield* Effect.logWarning("webhook processor: freed expired leases").pipe(Effect.annotateLogs({ rows: freed }))
      yield* poke
    }
  }).pipe(Effect.catchCause(onError("reaper", "5 seconds")), Effect.forever)

const pruneLoop = (config: AppConfig["Service"], inbox: WebhookInbox["Service"]) => {
  const retention = Duration.max(config.webhooks.retention, MINIMUM_RETENTION)
  return Effect.gen(function* () {
    const deleted = yield* inbox.prune(retention)
    if (deleted > 0) yield* Effect.logInfo("webhook inbox pruned").pipe(Effect.annotateLogs({ rows: deleted }))
    yield* Effect.sleep(config.schedules.prune)
  }).pipe(Effect.catchCause(onError("prune", "1 minute")), Effect.forever)
}

/**
 * Runs the processor for the life of the layer: work on every notification on the inbox channel
 * (the intake's INSERT notifies on commit) and on every poll tick (a lost notification, retries
 * coming due), the LISTEN connection kept up (re-established after a failure), leases whose holder
 * died reaped, old processed rows pruned.
 */
export const EventProcessorLive = Layer.effectDiscard(
  Effect.gen(function* () {
    const processor = yield* EventProcessor
    const inbox = yield* WebhookInbox
    const pg = yield* PgClient.PgClient
    const config = yield* AppConfig
    const wake = yield* Queue.sliding<true>(1)
    const poke = Queue.offer(wake, true)
    // Each wake-up drains: batches until one comes back short (more may be waiting after a full one).
    const work = Effect.andThen(Queue.take(wake), processor.drain).pipe(
      Effect.catchCause(onError("batch", "1 second")),
      Effect.forever
    )

    yield* Effect.forkScoped(listenLoop(pg, poke))
    yield* Effect.forkScoped(pollLoop(processor, inbox, poke))
    yield* Effect.forkScoped(work)
    yield* Effect.forkScoped(reapLoop(processor, inbox, poke))
    yield* Effect.forkScoped(pruneLoop(config, inbox))
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
  const outcome = yield* inbox.replay(selection)
  yield* Effect.logInfo("webhook deliveries replayed").pipe(
    Effect.annotateLogs({
      rows: outcome.replayed,
      left_dead: outcome.leftDead,
      selection: selection._tag === "Dead" ? "dead" : selection.hookId
    })
  )
  return outcome
})
