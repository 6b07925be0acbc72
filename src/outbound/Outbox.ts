/**
 * The `crm_sync.outbox` table as the writer sees it: claim due rows under a lease, and record each
 * row's outcome. A firm inserts `(operation, payload)`; everything else on the row is crm-sync's.
 *
 * Claims are `FOR UPDATE SKIP LOCKED`, so several replicas share the work without coordination.
 * The holder renews its lease while it works (`renew`), so a row is claimed again only once its
 * holder has died; it carries the same `idempotency_key`, so the CRM answers the retry with the
 * first response instead of creating a second record (spec §4 rule 6). Every outcome is recorded
 * only by the row's holder (`locked_by`): a writer whose lease was taken over changes nothing.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql/SqlError"

export const OutboxStatus = Schema.Literals(["pending", "in_flight", "succeeded", "failed", "needs_review"])
export type OutboxStatus = typeof OutboxStatus.Type

export interface OutboxRow {
  readonly id: string
  readonly connection: string | null
  readonly operation: string
  readonly payload: unknown
  readonly idempotency_key: string
  readonly attempts: number
  readonly created_at: Date
  /** When the row's first attempt was claimed: the idempotency key's lifetime runs from there. */
  readonly first_attempt_at: Date | null
  /** The writer holding the row's lease. */
  readonly locked_by: string
}

export class OutboxRowNotFound extends Schema.TaggedError<OutboxRowNotFound>()("OutboxRowNotFound", {
  id: Schema.String
}) {
  override get message() {
    return `no outbox row ${this.id}`
  }
}

/** Queues a write the way a firm does: `(operation, payload)`; crm-sync fills in the rest. */
export const enqueue = Effect.fn("Outbox.enqueue")(function* (operation: string, payload: unknown) {
  const sql = yield* SqlClient
  yield* sql`INSERT INTO crm_sync.outbox (operation, payload) VALUES (${operation}, ${JSON.stringify(payload)}::jsonb)`
})

export const claim = Effect.fn("Outbox.claim")(function* (options: {
  readonly worker: string
  readonly limit: number
  readonly leaseSeconds: number
}): Effect.fn.Return<ReadonlyArray<OutboxRow>, SqlError, SqlClient> {
  const sql = yield* SqlClient
  return yield* sql<OutboxRow>`
    UPDATE crm_sync.outbox o
    SET status = 'in_flight', locked_by = ${options.worker}, locked_at = now(), attempts = o.attempts + 1,
        updated_at = now(), first_attempt_at = coalesce(o.first_attempt_at, now())
    WHERE o.id IN (
      SELECT id FROM crm_sync.outbox
      WHERE (status = 'pending' AND next_attempt_at <= now())
         OR (status = 'in_flight' AND locked_at < now() - ${options.leaseSeconds} * interval '1 second')
      ORDER BY id
      LIMIT ${options.limit}
      FOR UPDATE SKIP LOCKED
    )
    RETURNING o.id::text AS id, o.connection, o.operation, o.payload, o.idempotency_key::text AS idempotency_key,
              o.attempts, o.created_at, o.first_attempt_at, o.locked_by`
})

/** Keeps the holder's lease fresh while it works (a permit may take long); false if it was lost. */
export const renew = Effect.fn("Outbox.renew")(function* (row: OutboxRow) {
  const sql = yield* SqlClient
  const rows = yield* sql<{ id: string }>`
    UPDATE crm_sync.outbox SET locked_at = now()
    WHERE id = ${row.id}::bigint AND status = 'in_flight' AND locked_by = ${row.locked_by}
    RETURNING id::text AS id`
  return rows.length > 0
})

export const succeed = Effect.fn("Outbox.succeed")(function* (
  row: OutboxRow,
  result: { readonly recordId: string | null; readonly response: unknown }
) {
  const sql = yield* SqlClient
  yield* sql`
    UPDATE crm_sync.outbox
    SET status = 'succeeded', record_id = ${result.recordId}, response = ${JSON.stringify(result.response)}::jsonb,
        error = NULL, locked_by = NULL, locked_at = NULL, updated_at = now(), completed_at = now()
    WHERE id = ${row.id}::bigint AND status = 'in_flight' AND locked_by = ${row.locked_by}`
})

/** Back to `pending`, due again after `delayMs` (a transient failure). */
export const reschedule = Effect.fn("Outbox.reschedule")(function* (row: OutboxRow, error: string, delayMs: number) {
  const sql = yield* SqlClient
  yield* sql`
    UPDATE crm_sync.outbox
    SET status = 'pending', error = ${error}, next_attempt_at = now() + ${delayMs} * interval '1 millisecond',
        locked_by = NULL, locked_at = NULL, updated_at = now()
    WHERE id = ${row.id}::bigint AND status = 'in_flight' AND locked_by = ${row.locked_by}`
})

/**
 * A final outcome other than success: `failed` (gave up) or `needs_review` (a person must look).
 * `createdNothing`: the outcome proves no record exists under the row's key (see migration 0011).
 */
export const settle = Effect.fn("Outbox.settle")(function* (
  row: OutboxRow,
  status: "failed" | "needs_review",
  error: string,
  options: { readonly response?: unknown; readonly createdNothing?: boolean } = {}
) {
  const sql = yield* SqlClient
  yield* sql`
    UPDATE crm_sync.outbox
    SET status = ${status}, error = ${error},
        response = ${options.response === undefined ? null : JSON.stringify(options.response)}::jsonb,
        created_nothing = ${options.createdNothing ?? false},
        locked_by = NULL, locked_at = NULL, updated_at = now(), completed_at = now()
    WHERE id = ${row.id}::bigint AND status = 'in_flight' AND locked_by = ${row.locked_by}`
})

/** Why `outbox retry` will not send a row again by itself (it would need a new key, which could duplicate). */
export class RetryNeedsNewKey extends Schema.TaggedError<RetryNeedsNewKey>()("RetryNeedsNewKey", {
  id: Schema.String
}) {
  override get message() {
    return (
      `outbox ${this.id}: its first attempt was over an hour ago and may have created the record; the CRM no ` +
      `longer remembers its idempotency key, so sending it again needs a new key and could create a duplicate. ` +
      `Check the CRM first; if the record is not there, run \`crm-sync outbox retry ${this.id} --new-key\``
    )
  }
}

/** How long the CRM remembers an idempotency key (spec §8: 1 hour), less a margin for clocks. */
export const KEY_LIFETIME_MS = 55 * 60 * 1000

export interface RetryResult {
  readonly id: string
  readonly status: string
  readonly changed: boolean
  /** Whether the row was given a new idempotency key. */
  readonly newKey: boolean
}

/**
 * `crm-sync outbox retry ID [--new-key]`: a `failed` or `needs_review` row goes back to `pending`,
 * due now. It keeps its idempotency key — an earlier attempt may have created the record, and the
 * same key makes the CRM answer with that record instead of creating another — unless its outcome
 * proved nothing was created (`created_nothing`: refused before sending, or by the CRM), when it
 * gets a fresh one (its payload has usually been corrected, and the CRM refuses a key reused with
 * another body). A row whose key the CRM has forgotten (first attempt over an hour ago) and whose
 * outcome is unknown is not sent again unless the operator asks for a new key, knowingly.
 */
export const retry = Effect.fn("Outbox.retry")(function* (id: string, options: { readonly newKey?: boolean } = {}) {
  const sql = yield* SqlClient
  return yield* sql.withTransaction(
    Effect.gen(function* () {
      const found = yield* sql<{ status: OutboxStatus; created_nothing: boolean; key_age_ms: number | null }>`
        SELECT status, created_nothing,
               (extract(epoch FROM now() - first_attempt_at) * 1000)::float8 AS key_age_ms
        FROM crm_sync.outbox WHERE id = ${id}::bigint FOR UPDATE`
      const row = found[0]
      if (row === undefined) return yield* new OutboxRowNotFound({ id })
      if (row.status !== "failed" && row.status !== "needs_review" && row.status !== "pending") {
        return { id, status: row.status, changed: false, newKey: false } satisfies RetryResult
      }
      const keyForgotten = row.key_age_ms !== null && row.key_age_ms > KEY_LIFETIME_MS
      if (keyForgotten && !row.created_nothing && options.newKey !== true) return yield* new RetryNeedsNewKey({ id })
      const newKey = options.newKey === true || row.created_nothing
      yield* sql`
        UPDATE crm_sync.outbox
        SET status = 'pending', next_attempt_at = now(), attempts = 0, error = NULL, locked_by = NULL,
            locked_at = NULL, updated_at = now(), completed_at = NULL, created_nothing = false,
            idempotency_key = CASE WHEN ${newKey} THEN gen_random_uuid() ELSE idempotency_key END,
            first_attempt_at = CASE WHEN ${newKey} THEN NULL ELSE first_attempt_at END
        WHERE id = ${id}::bigint`
      return { id, status: "pending", changed: true, newKey } satisfies RetryResult
    })
  )
})

// ---------------------------------------------------------------------------------------------
// Reads for status, the status page and the plan
// ---------------------------------------------------------------------------------------------

/** Rows by status. */
export const outboxCounts = Effect.gen(function* () {
  const sql = yield* SqlClient
  return yield* sql<{ status: string; n: number }>`
    SELECT status, count(*)::int AS n FROM crm_sync.outbox GROUP BY status ORDER BY status`
})

/** When the oldest row still to send (pending or in flight) was queued. */
export const oldestWaitingRow = Effect.gen(function* () {
  const sql = yield* SqlClient
  const [row] = yield* sql<{ at: Date | null }>`
    SELECT min(created_at) AS at FROM crm_sync.outbox WHERE status IN ('pending', 'in_flight')`
  return row?.at ?? null
})

/**
 * The `limit` most recently settled rows that need a person (`needs_review`, `failed`), with the
 * record each would create as a person knows it (its name or title).
 */
export const rowsNeedingAPerson = (limit: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    return yield* sql<{
      id: string
      operation: string
      record: string | null
      status: string
      error: string | null
      at: Date
    }>`
      SELECT id::text AS id, operation, status, error, updated_at AS at,
             left(COALESCE(payload ->> 'name', payload ->> 'title',
                           NULLIF(concat_ws(' ', payload ->> 'first_name', payload ->> 'last_name'), '')), 120) AS record
      FROM crm_sync.outbox WHERE status IN ('needs_review', 'failed') ORDER BY updated_at DESC LIMIT ${limit}`
  })

/** Attempts sent in the last 24 hours for `connection` (rows with none count for the first connection). */
export const attemptsLastDay = (connection: string, isFirst: boolean) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const [row] = yield* sql<{ n: number }>`
      SELECT coalesce(sum(attempts), 0)::int AS n FROM crm_sync.outbox
      WHERE updated_at > now() - interval '24 hours'
        AND (connection = ${connection} OR (connection IS NULL AND ${isFirst}))`
    return row?.n ?? 0
  })
