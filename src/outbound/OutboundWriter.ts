/**
 * OutboundWriter: pushes the firm's writes from `crm_sync.outbox` to the CRM, exactly once in
 * effect.
 *
 * Each claimed row is decoded against the body its operation takes (spec §2.2 for contacts, §4
 * for prospects) before anything is sent: a payload that cannot be right is `needs_review` with
 * the reason, and no request is spent on it. A valid one is POSTed at `interactive` priority with
 * the row's own `Idempotency-Key`, fixed for the row's life, so every retry — in this process, or
 * in another after a crash — is the same request to the CRM. Outcomes:
 * - 2xx: `succeeded`, with the record id and response; the record is written to the warehouse
 *   (`source = write`) so the firm sees it before the next poll.
 * - the CRM refuses the request (4xx validation, unknown book): `needs_review` with its reason.
 * - the token cannot write (401/403): `failed`; nothing will change until someone fixes the token.
 * - transient (5xx, transport, 429): `pending` again with exponential backoff, up to
 *   `outbound.max_attempts`, then `failed`.
 * A row whose first attempt is older than the CRM's idempotency-key lifetime (1 hour, spec §8) is
 * never re-sent blindly: an earlier attempt may have created the record, and a new request could
 * create it twice, so it goes to `needs_review`.
 *
 * Idle, the writer waits on LISTEN `crm_sync_outbox` (the table's insert trigger notifies), with a
 * slow poll as a fallback for missed notifications and for rows whose backoff has passed.
 */
import { PgClient } from "@effect/sql-pg"
import { Clock, Duration, Effect, Layer, Option, Queue, Random, Result, Schema, SchemaIssue } from "effect"
import { randomUUID } from "node:crypto"
import { AppConfig } from "../config/AppConfig.ts"
import { CrmClient, type CrmClientShape } from "../crm/CrmClient.ts"
import type { CrmError } from "../crm/CrmError.ts"
import * as Models from "../crm/Models.ts"
import { Warehouse } from "../warehouse/Warehouse.ts"
import * as Outbox from "./Outbox.ts"

/** The CRM keeps an idempotency key 1 hour (spec §4 rule 6); stay well inside it. */
const KEY_LIFETIME_MS = 55 * 60 * 1000
const LEASE_SECONDS = 120
const BATCH = 20
const POLL_INTERVAL = Duration.seconds(5)
const BACKOFF_BASE_MS = 2_000
const BACKOFF_CAP_MS = 10 * 60 * 1000

/** One entry per supported `operation`: the body it takes and the call that sends it. */
const operations = {
  "contact.create": {
    body: Models.ContactCreate,
    resource: "contacts",
    send: (client: CrmClientShape, body: Models.ContactCreate, key: string) =>
      client.createContact(body, { idempotencyKey: key, priority: "interactive" })
  },
  "prospect.create": {
    body: Models.ProspectCreate,
    resource: "prospects",
    send: (client: CrmClientShape, body: Models.ProspectCreate, key: string) =>
      client.createProspect(body, { idempotencyKey: key, priority: "interactive" })
  }
} as const

export type Operation = keyof typeof operations
export const supportedOperations = Object.keys(operations) as ReadonlyArray<Operation>

const formatter = SchemaIssue.makeFormatterStandardSchemaV1()

/** The first problem with a payload, as `path: message`. */
const describeIssue = (issue: SchemaIssue.Issue) => {
  const first = formatter(issue).issues[0]
  const path = (first?.path ?? [])
    .map((segment) => (typeof segment === "object" && segment !== null && "key" in segment ? segment.key : segment))
    .join(".")
  return `${path === "" ? "payload" : `payload.${path}`}: ${first?.message ?? "invalid"}`
}

/** Decodes a payload for its operation: the body to send, or why it cannot be sent. */
export const decodePayload = (operation: string, payload: unknown): Result.Result<unknown, string> => {
  if (!(operation in operations)) {
    return Result.fail(`unknown operation "${operation}" (supported: ${supportedOperations.join(", ")})`)
  }
  const schema = operations[operation as Operation].body as Schema.Decoder<unknown>
  return Result.mapError(
    Schema.decodeUnknownResult(schema)(payload, { onExcessProperty: "error", errors: "first" }),
    (error) => describeIssue(error.issue)
  )
}

const backoffMs = (attempts: number) =>
  Effect.map(Random.next, (random) => {
    const ceiling = Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** (attempts - 1))
    return Math.round(ceiling / 2 + (random * ceiling) / 2)
  })

const recordIdOf = (raw: unknown): string | null =>
  typeof raw === "object" && raw !== null && "id" in raw && typeof raw.id === "string" ? raw.id : null

const make = Effect.gen(function* () {
  const config = yield* AppConfig
  const pg = yield* PgClient.PgClient
  const warehouse = yield* Warehouse
  const worker = `outbound-${randomUUID().slice(0, 8)}`
  const maxAttempts = config.outbound.max_attempts

  const clients = new Map<string, CrmClientShape>()
  const clientFor = Effect.fnUntraced(function* (connection: string | null) {
    const name = connection ?? config.connections[0]?.name
    if (name === undefined) return Option.none<CrmClientShape>()
    const held = clients.get(name)
    if (held !== undefined) return Option.some(held)
    const made = yield* CrmClient.make(name).pipe(Effect.option)
    if (Option.isSome(made)) clients.set(name, made.value)
    return made
  })

  const onError = Effect.fnUntraced(function* (row: Outbox.OutboxRow, error: CrmError) {
    const reason = error.reason
    if (error.retryable) {
      if (row.attempts >= maxAttempts) {
        return yield* Outbox.settle(row, "failed", `gave up after ${row.attempts} attempts: ${error.message}`)
      }
      return yield* Outbox.reschedule(row, error.message, yield* backoffMs(row.attempts))
    }
    if (reason._tag === "Unauthorized" || reason._tag === "Forbidden") {
      return yield* Outbox.settle(row, "failed", error.message)
    }
    return yield* Outbox.settle(row, "needs_review", error.message, {
      status: "status" in reason ? reason.status : undefined,
      error: "code" in reason ? reason.code : undefined,
      detail: "detail" in reason ? reason.detail : undefined
    })
  })

  const process = Effect.fnUntraced(function* (row: Outbox.OutboxRow) {
    const body = decodePayload(row.operation, row.payload)
    if (Result.isFailure(body)) return yield* Outbox.settle(row, "needs_review", body.failure)
    if (row.first_attempt_at !== null && row.attempts > 1) {
      const age = (yield* Clock.currentTimeMillis) - row.first_attempt_at.getTime()
      if (age > KEY_LIFETIME_MS) {
        return yield* Outbox.settle(
          row,
          "needs_review",
          "first sent over an hour ago and its outcome is unknown: the CRM no longer remembers the idempotency key, so sending again could create a duplicate; check the CRM, then `crm-sync outbox retry` it or mark it done"
        )
      }
    }
    const client = yield* clientFor(row.connection)
    if (Option.isNone(client)) {
      return yield* Outbox.settle(row, "failed", `no CRM connection named ${row.connection ?? "(default)"}`)
    }
    const operation = operations[row.operation as Operation]
    const sent = yield* (
      operation.send as (c: CrmClientShape, b: unknown, k: string) => Effect.Effect<{ raw: unknown }, CrmError>
    )(client.value, body.success, row.idempotency_key).pipe(Effect.result)
    if (Result.isFailure(sent)) return yield* onError(row, sent.failure)
    const raw = sent.success.raw
    // The warehouse copy is a courtesy (the next poll or event brings it too): its failure must
    // not turn a created record into a retried one.
    yield* warehouse
      .upsert(operation.resource, [raw], { source: "write" })
      .pipe(
        Effect.catch((error) => Effect.logWarning("outbox: created record not written to the warehouse", error.message))
      )
    yield* Outbox.succeed(row, { recordId: recordIdOf(raw), response: raw })
    yield* Effect.logInfo(`outbox ${row.id}: ${row.operation} created ${recordIdOf(raw) ?? "(no id)"}`)
  })

  /** Claims and sends until nothing is due; returns how many rows were handled. */
  const drain = Effect.gen(function* () {
    let handled = 0
    while (true) {
      const rows = yield* Outbox.claim({ worker, limit: BATCH, leaseSeconds: LEASE_SECONDS })
      if (rows.length === 0) return handled
      // One row at a time in order: the firm's writes may depend on each other, and the budget
      // paces them anyway. Each row's outcome is committed before the next is sent.
      for (const row of rows) {
        yield* process(row).pipe(
          Effect.catchCause((cause) => Effect.logError(`outbox ${row.id}: unexpected failure`, cause)),
          Effect.uninterruptible
        )
        handled++
      }
    }
  })

  return { worker, drain, pg }
})

export const OutboundWriter = { make }

/** The writer as a background job of the daemon: drains on every notification and every few seconds. */
export const OutboundWriterLive = Layer.effectDiscard(
  Effect.gen(function* () {
    const writer = yield* make
    const wake = yield* Queue.sliding<void>(1)
    yield* writer.pg.listen("crm_sync_outbox").pipe(
      Effect.flatMap((notifications) =>
        Effect.forever(Effect.andThen(Queue.take(notifications), Queue.offer(wake, undefined)))
      ),
      Effect.catch((error) => Effect.logWarning("outbox: LISTEN lost; polling only", error)),
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
