/**
 * OutboundWriter: pushes the firm's writes from `crm_sync.outbox` to the CRM, exactly once in
 * effect. A row is decoded before anything is sent, then POSTed at `interactive` priority with the
 * row's own `Idempotency-Key`, fixed for the row's life, so every retry — in this process, or in
 * another after a crash — is the same request to the CRM. Rows are claimed one at a time under a
 * lease (`outbound.lease_timeout`) that the writer renews while it works, and every outcome is
 * written only by the lease's holder: another replica takes a row over only when its holder died.
 * `OutboundWriterLive` runs it in the daemon.
 */
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Random from "effect/Random"
import * as Result from "effect/Result"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import { randomUUID } from "node:crypto"
import { AppConfig } from "../config/AppConfig.ts"
import { CrmClient, type CrmClientShape } from "../crm/CrmClient.ts"
import type { CrmError } from "../crm/CrmError.ts"
import * as Models from "../crm/Models.ts"
import { describeIssue } from "../crm/Pagination.ts"
import { oneLine } from "../observability/Text.ts"
import { isDatabaseCause } from "../warehouse/DatabaseCause.ts"
import { Warehouse } from "../warehouse/Warehouse.ts"
import * as Outbox from "./Outbox.ts"

const { KEY_LIFETIME_MS } = Outbox
const POLL_INTERVAL = Duration.seconds(5)
const LISTEN_RETRY = Duration.seconds(2)
/** How often an outcome the database refused is written again. */
const RECORD_RETRY = Duration.millis(500)
const BACKOFF_BASE_MS = 2_000
const BACKOFF_CAP_MS = 10 * 60 * 1000

/** One entry per supported `operation`: the body it takes and the call that sends it. */
const operations = {
  "contact.create": {
    body: Models.ContactCreate,
    resource: "contacts",
    send: (client: CrmClientShape, body: Models.ContactCreate, key: string, sendBy: number, retry5xx: boolean) =>
      client.createContact(body, { idempotencyKey: key, priority: "interactive", sendBy, retryServerErrors: retry5xx })
  },
  "prospect.create": {
    body: Models.ProspectCreate,
    resource: "prospects",
    send: (client: CrmClientShape, body: Models.ProspectCreate, key: string, sendBy: number, retry5xx: boolean) =>
      client.createProspect(body, { idempotencyKey: key, priority: "interactive", sendBy, retryServerErrors: retry5xx })
  }
} as const

export type Operation = keyof typeof operations
export const supportedOperations = Object.keys(operations) as ReadonlyArray<Operation>

/** Decodes a payload for its operation: the body to send, or why it cannot be sent. */
export const decodePayload = (operation: string, payload: unknown): Result.Result<unknown, string> => {
  // Own keys only: `constructor` or `toString` is no operation.
  if (!Object.hasOwn(operations, operation)) {
    return Result.fail(`unknown operation "${operation}" (supported: ${supportedOperations.join(", ")})`)
  }
  const schema = operations[operation as Operation].body as Schema.Decoder<unknown>
  return Result.mapError(
    Schema.decodeUnknownResult(schema)(payload, { onExcessProperty: "error", errors: "first" }),
    (error) => describeIssue(error.issue, { values: true, root: "payload" })
  )
}

const backoffMs = (attempts: number) =>
  Effect.map(Random.next, (random) => {
    const ceiling = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** (attempts - 1))
    return Math.round(ceiling / 2 + (random * ceiling) / 2)
  })

const recordIdOf = (raw: unknown): string | null =>
  typeof raw === "object" && raw !== null && "id" in raw && typeof raw.id === "string" ? raw.id : null

const KEY_EXPIRED =
  "first sent over an hour ago and its outcome is unknown: the CRM no longer remembers the idempotency key, so sending again could create a duplicate; check the CRM, then `crm-sync outbox retry ID --new-key` if the record is not there"
const SERVER_ERROR =
  "the CRM may have created the record before failing, and a retry would run again (spec §4 rule 6: a 5xx " +
  "answer is not cached); check the CRM for it, then `crm-sync outbox retry` (same key) if it is not there. " +
  "outbound.retry_server_errors retries such rows automatically, at the risk of a second record"
const ANSWER_LOST =
  "its answer was lost after the request went out: the CRM may have created the record and answered with " +
  "a 5xx, and a retry would run again (spec §4 rule 6: a 5xx answer is not cached); check the CRM for it, " +
  "then `crm-sync outbox retry` (same key) if it is not there. outbound.retry_server_errors retries such " +
  "rows automatically, at the risk of a second record"
const KEY_REUSED =
  "its idempotency key was used before with another body, and that earlier request may have created the record; check the CRM before retrying"

/** The writer as `make` assembles it: its identity, settings, and the CRM clients made so far. */
interface Writer {
  readonly worker: string
  readonly config: AppConfig["Service"]
  readonly warehouse: Warehouse["Service"]
  readonly leaseSeconds: number
  /** By connection name, made on first use. */
  readonly clients: Map<string, CrmClientShape>
}

// ---------------------------------------------------------------------------------------------
// Recording the CRM's answer
// ---------------------------------------------------------------------------------------------

/**
 * An outcome is written however long the database takes to come back (twice the lease, 30 s at least):
 * lost, the row would be claimed again once its lease ran out and sent again — and after a 5xx
 * the CRM did not cache, that would create the record twice (found by the chaos suite, seed
 * 535740: a 503 after the commit, answered while PostgreSQL restarted).
 */
const durably = <A, E, R>(writer: Writer, write: Effect.Effect<A, E, R>) =>
  write.pipe(
    Effect.retry(
      Schedule.spaced(RECORD_RETRY).pipe(
        Schedule.upTo({
          times: Math.ceil(Math.max(writer.leaseSeconds * 2_000, 30_000) / Duration.toMillis(RECORD_RETRY))
        })
      )
    )
  )

const settle = (writer: Writer, ...args: Parameters<typeof Outbox.settle>) => durably(writer, Outbox.settle(...args))

type SettleOptions = Parameters<typeof Outbox.settle>[3]

/** What a failed call makes of its row: a final status with its reason, or another try later. */
export type FailureOutcome =
  | {
      readonly _tag: "Settle"
      readonly status: "failed" | "needs_review"
      readonly error: string
      readonly options?: SettleOptions
    }
  | { readonly _tag: "Reschedule"; readonly error: string }

const settled = (status: "failed" | "needs_review", error: string, options?: SettleOptions): FailureOutcome => ({
  _tag: "Settle",
  status,
  error,
  options
})

/**
 * The outcome of a call the CRM failed, by the error's reason:
 * - the CRM refuses the request (4xx validation, unknown book): `needs_review` with its reason;
 * - the token cannot write (401/403): `failed`; nothing will change until someone fixes the token;
 * - transient (5xx when `outbound.retry_server_errors`, transport, 429): `pending` again with
 *   exponential backoff, up to `outbound.max_attempts`, then `failed`;
 * - 5xx otherwise, or an answer lost after the request went out (a reset, a timeout): `needs_review`,
 *   since the CRM may have created the record and answered with an uncached 5xx (spec §4 rule 6);
 * - 409 (a request with the same key is still running at the CRM): `pending` again, same key;
 * - the key outlived the CRM's memory of it before a permit came: `needs_review` (see `processRow`).
 */
export const failureOutcome = (
  row: Pick<Outbox.OutboxRow, "attempts">,
  error: CrmError,
  policy: { readonly retryServerErrors: boolean; readonly maxAttempts: number }
): FailureOutcome => {
  const reason = error.reason
  if (reason._tag === "KeyExpired") return settled("needs_review", KEY_EXPIRED)
  if (reason._tag === "Server" && !policy.retryServerErrors) {
    return settled("needs_review", `${error.message}: ${SERVER_ERROR}`, {
      response: { status: reason.status, error: reason.code }
    })
  }
  if (reason._tag === "Transport" && reason.mayHaveRun === true && !policy.retryServerErrors) {
    return settled("needs_review", `${error.message}: ${ANSWER_LOST}`)
  }
  if (error.retryable) {
    if (row.attempts >= policy.maxAttempts) {
      return settled("failed", `gave up after ${row.attempts} attempts: ${error.message}`)
    }
    return { _tag: "Reschedule", error: error.message }
  }
  // Nothing was sent before this answer (this call's first attempt, the row's first claim).
  const firstContact = error.attempts === 1 && row.attempts === 1
  if (reason._tag === "Unauthorized" || reason._tag === "Forbidden") {
    return settled("failed", error.message, { createdNothing: firstContact })
  }
  const response = {
    status: "status" in reason ? reason.status : undefined,
    error: "code" in reason ? reason.code : undefined,
    detail: "detail" in reason ? reason.detail : undefined
  }
  if (reason._tag === "Invalid" && reason.code === "idempotency_key_reused") {
    // The key went out before with another body (the payload was edited after an attempt).
    return settled("needs_review", `${error.message}: ${KEY_REUSED}`, { response })
  }
  // The CRM refused this very request: with the same key and body, an earlier attempt that had
  // created the record would have been answered with it instead, so nothing exists under the key.
  // Its detail ("book_id is unknown") is what a person must fix, so `error` says it too.
  return settled(
    "needs_review",
    response.detail === undefined ? error.message : `${error.message}: ${response.detail}`,
    {
      response,
      createdNothing: reason._tag === "Invalid" || reason._tag === "NotFound"
    }
  )
}

const recordFailure = Effect.fnUntraced(function* (writer: Writer, row: Outbox.OutboxRow, error: CrmError) {
  const outcome = failureOutcome(row, error, {
    retryServerErrors: writer.config.outbound.retry_server_errors,
    maxAttempts: writer.config.outbound.max_attempts
  })
  if (outcome._tag === "Settle") return yield* settle(writer, row, outcome.status, outcome.error, outcome.options)
  return yield* durably(writer, Outbox.reschedule(row, outcome.error, yield* backoffMs(row.attempts)))
})

/**
 * 2xx: `succeeded`, with the record id and response; the record is written to the warehouse
 * (`source = write`) so the firm sees it before the next poll.
 */
const recordCreated = Effect.fnUntraced(function* (writer: Writer, row: Outbox.OutboxRow, raw: unknown) {
  const operation = operations[row.operation as Operation]
  // The warehouse copy is a courtesy (the next poll or event brings it too): its failure must
  // not turn a created record into a retried one, nor into one to review. That includes the
  // defect effect/sql makes of a rollback whose connection is gone (a database restart).
  yield* writer.warehouse
    .upsert(operation.resource, [raw], { source: "write" })
    .pipe(
      Effect.catchCause((cause) =>
        Cause.hasInterruptsOnly(cause)
          ? Effect.failCause(cause)
          : Effect.logWarning("outbox: created record not written to the warehouse", oneLine(cause, 300))
      )
    )
  yield* durably(writer, Outbox.succeed(row, { recordId: recordIdOf(raw), response: raw }))
  yield* Effect.logInfo(`outbox ${row.id}: ${row.operation} created ${recordIdOf(raw) ?? "(no id)"}`)
})

// ---------------------------------------------------------------------------------------------
// Sending
// ---------------------------------------------------------------------------------------------

const clientFor = Effect.fnUntraced(function* (writer: Writer, connection: string | null) {
  const name = connection ?? writer.config.connections[0]?.name
  if (name === undefined) return Option.none<CrmClientShape>()
  const held = writer.clients.get(name)
  if (held !== undefined) return Option.some(held)
  const made = yield* CrmClient.make(name).pipe(Effect.option)
  if (Option.isSome(made)) writer.clients.set(name, made.value)
  return made
})

const send = Effect.fnUntraced(function* (writer: Writer, row: Outbox.OutboxRow, body: unknown) {
  const client = yield* clientFor(writer, row.connection)
  if (Option.isNone(client)) {
    return yield* settle(writer, row, "failed", `no CRM connection named ${row.connection ?? "(default)"}`, {
      createdNothing: row.attempts === 1
    })
  }
  const operation = operations[row.operation as Operation]
  const firstAttempt = row.first_attempt_at?.getTime() ?? (yield* Clock.currentTimeMillis)
  const sent = yield* (
    operation.send as (
      c: CrmClientShape,
      b: unknown,
      k: string,
      sendBy: number,
      retry5xx: boolean
    ) => Effect.Effect<{ raw: unknown }, CrmError>
  )(
    client.value,
    body,
    row.idempotency_key,
    firstAttempt + KEY_LIFETIME_MS,
    writer.config.outbound.retry_server_errors
  ).pipe(Effect.result)
  if (Result.isFailure(sent)) return yield* recordFailure(writer, row, sent.failure)
  return yield* recordCreated(writer, row, sent.success.raw)
})

/**
 * Decodes the row against the body its operation takes (spec §2.2 for contacts, §4 for prospects):
 * a payload that cannot be right is `needs_review` with the reason, and no request is spent on it.
 * A row whose first attempt is older than the CRM's idempotency-key lifetime (1 hour, spec §8) is
 * never re-sent blindly: an earlier attempt may have created the record, and a new request could
 * create it twice, so it goes to `needs_review`. The check runs here, when the row is claimed, and
 * again before every attempt of the call (`sendBy`), since a permit can take long to come.
 */
const processRow = Effect.fnUntraced(function* (writer: Writer, row: Outbox.OutboxRow) {
  const body = decodePayload(row.operation, row.payload)
  if (Result.isFailure(body)) {
    return yield* settle(writer, row, "needs_review", body.failure, { createdNothing: row.attempts === 1 })
  }
  if (row.first_attempt_at !== null) {
    const age = (yield* Clock.currentTimeMillis) - row.first_attempt_at.getTime()
    if (age > KEY_LIFETIME_MS) return yield* settle(writer, row, "needs_review", KEY_EXPIRED)
  }
  return yield* send(writer, row, body.success)
})

// ---------------------------------------------------------------------------------------------
// Claiming
// ---------------------------------------------------------------------------------------------

/**
 * What becomes of a row whose handling the database cut short: another try, with the same
 * idempotency key, so a create the CRM already made is answered with its record instead of made
 * twice (and one older than the key's lifetime goes to review, `processRow`). If the database
 * cannot take even that, the row's lease lapses and a writer claims it again.
 */
const retryAfterDatabase = (writer: Writer, row: Outbox.OutboxRow, cause: Cause.Cause<unknown>) =>
  Effect.gen(function* () {
    yield* Effect.logWarning(`outbox ${row.id}: the database failed; the row is tried again`, oneLine(cause, 300))
    const error = `the database failed: ${oneLine(cause, 300)}`
    yield* durably(writer, Outbox.reschedule(row, error, yield* backoffMs(row.attempts)))
  }).pipe(Effect.catchCause(() => Effect.void))

/**
 * One row, its lease renewed while it is worked on (a permit can take long to come), so no other
 * writer claims it meanwhile. Whatever goes wrong ends the row with its reason, or (the database's
 * failure) has it tried again; none stays in flight but for the lease.
 */
const handle = Effect.fnUntraced(function* (writer: Writer, row: Outbox.OutboxRow) {
  const renewEvery = Duration.millis((writer.leaseSeconds * 1000) / 3)
  const heartbeat = yield* Outbox.renew(row).pipe(
    Effect.ignore,
    Effect.repeat(Schedule.spaced(renewEvery)),
    Effect.delay(renewEvery),
    // `handle` runs uninterruptibly; the heartbeat must stay interruptible to be stopped.
    Effect.interruptible,
    Effect.forkChild
  )
  yield* processRow(writer, row).pipe(
    Effect.catchCause((cause) =>
      isDatabaseCause(cause)
        ? retryAfterDatabase(writer, row, cause)
        : Effect.gen(function* () {
            yield* Effect.logError(`outbox ${row.id}: unexpected failure`, cause)
            yield* settle(writer, row, "needs_review", `unexpected failure: ${oneLine(cause, 300)}`).pipe(Effect.ignore)
          })
    ),
    Effect.ensuring(Fiber.interrupt(heartbeat))
  )
})

/** Claims and sends until nothing is due; returns how many rows were handled. */
const drain = (writer: Writer) =>
  Effect.gen(function* () {
    let handled = 0
    while (true) {
      // One row per claim: a row waits for its permit under its own renewed lease, never behind
      // others in a batch whose leases run out meanwhile. In order: the firm's writes may depend
      // on each other, and each row's outcome is committed before the next is claimed.
      const rows = yield* Outbox.claim({ worker: writer.worker, limit: 1, leaseSeconds: writer.leaseSeconds })
      if (rows.length === 0) return handled
      for (const row of rows) {
        yield* handle(writer, row).pipe(Effect.uninterruptible)
        handled++
      }
    }
  })

const make = Effect.gen(function* () {
  const config = yield* AppConfig
  const pg = yield* PgClient.PgClient
  const writer: Writer = {
    worker: `outbound-${randomUUID().slice(0, 8)}`,
    config,
    warehouse: yield* Warehouse,
    leaseSeconds: Duration.toSeconds(config.outbound.lease_timeout),
    clients: new Map()
  }
  return { worker: writer.worker, drain: drain(writer), pg }
})

export const OutboundWriter = { make }

/**
 * The writer as a background job of the daemon: drains on every notification and every few
 * seconds. Idle, it waits on LISTEN `crm_sync_outbox` (the table's insert trigger notifies), with a
 * slow poll as a fallback for missed notifications and for rows whose backoff has passed; a lost
 * LISTEN (a database restart) is established again within seconds.
 */
export const OutboundWriterLive = Layer.effectDiscard(
  Effect.gen(function* () {
    const writer = yield* make
    const wake = yield* Queue.sliding<void>(1)
    // LISTEN on a dedicated connection, re-established whenever it is lost (a database restart):
    // after each (re)start, one drain catches up on rows inserted while nobody listened.
    yield* Effect.scoped(
      Effect.gen(function* () {
        const notifications = yield* writer.pg.listen("crm_sync_outbox")
        yield* Queue.offer(wake, undefined)
        while (true) {
          yield* Queue.take(notifications)
          yield* Queue.offer(wake, undefined)
        }
      })
    ).pipe(
      Effect.catchCause((cause) =>
        Cause.hasInterruptsOnly(cause)
          ? Effect.failCause(cause)
          : Effect.andThen(
              Effect.logWarning("outbox: LISTEN lost; listening again shortly (polling meanwhile)", cause),
              Effect.sleep(LISTEN_RETRY)
            )
      ),
      Effect.forever,
      Effect.forkScoped
    )
    yield* Effect.logInfo(`outbound writer ${writer.worker} started`)
    yield* Effect.forever(
      Effect.gen(function* () {
        yield* writer.drain.pipe(Effect.catchCause((cause) => Effect.logError("outbox: drain failed", cause)))
        yield* Effect.raceFirst(Queue.take(wake), Effect.sleep(POLL_INTERVAL))
      })
    ).pipe(Effect.forkScoped)
  })
)
