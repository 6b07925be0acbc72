/**
 * The `crm_sync.outbox` table as the writer sees it: claim due rows under a lease, and record each
 * row's outcome. A firm inserts `(operation, payload)`; everything else on the row is crm-sync's.
 *
 * Claims are `FOR UPDATE SKIP LOCKED`, so several replicas share the work without coordination.
 * A row left `in_flight` by a process that died is claimed again once its lease is stale; it
 * carries the same `idempotency_key`, so the CRM answers the retry with the first response
 * instead of creating a second record (spec §4 rule 6).
 */
import { Effect, Schema } from "effect"
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
}

export class OutboxRowNotFound extends Schema.TaggedError<OutboxRowNotFound>()("OutboxRowNotFound", {
  id: Schema.String
}) {
  override get message() {
    return `no outbox row ${this.id}`
  }
}

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
              o.attempts, o.created_at, o.first_attempt_at`
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
    WHERE id = ${row.id}::bigint AND status = 'in_flight'`
})

/** Back to `pending`, due again after `delayMs` (a transient failure). */
export const reschedule = Effect.fn("Outbox.reschedule")(function* (row: OutboxRow, error: string, delayMs: number) {
  const sql = yield* SqlClient
  yield* sql`
    UPDATE crm_sync.outbox
    SET status = 'pending', error = ${error}, next_attempt_at = now() + ${delayMs} * interval '1 millisecond',
        locked_by = NULL, locked_at = NULL, updated_at = now()
    WHERE id = ${row.id}::bigint AND status = 'in_flight'`
})

/** A final outcome other than success: `failed` (gave up) or `needs_review` (a person must look). */
export const settle = Effect.fn("Outbox.settle")(function* (
  row: OutboxRow,
  status: "failed" | "needs_review",
  error: string,
  response?: unknown
) {
  const sql = yield* SqlClient
  yield* sql`
    UPDATE crm_sync.outbox
    SET status = ${status}, error = ${error},
        response = ${response === undefined ? null : JSON.stringify(response)}::jsonb,
        locked_by = NULL, locked_at = NULL, updated_at = now(), completed_at = now()
    WHERE id = ${row.id}::bigint AND status = 'in_flight'`
})

/**
 * `crm-sync outbox retry ID`: a `failed` or `needs_review` row goes back to `pending`, due now.
 * A row the CRM rejected created nothing, so it gets a fresh idempotency key: its payload has
 * usually been corrected, and the CRM refuses a key reused with another body. A row that failed
 * for any other reason keeps its key, in case an earlier attempt did create the record.
 */
export const retry = Effect.fn("Outbox.retry")(function* (id: string) {
  const sql = yield* SqlClient
  const rows = yield* sql<{ id: string; status: OutboxStatus }>`
    UPDATE crm_sync.outbox
    SET status = 'pending', next_attempt_at = now(), attempts = 0, error = NULL, locked_by = NULL,
        locked_at = NULL, updated_at = now(), completed_at = NULL,
        idempotency_key = CASE WHEN status = 'needs_review' AND record_id IS NULL THEN gen_random_uuid() ELSE idempotency_key END,
        first_attempt_at = CASE WHEN status = 'needs_review' AND record_id IS NULL THEN NULL ELSE first_attempt_at END
    WHERE id = ${id}::bigint AND status IN ('failed', 'needs_review', 'pending')
    RETURNING id::text AS id, status`
  if (rows.length === 0) {
    const exists = yield* sql<{ status: string }>`SELECT status FROM crm_sync.outbox WHERE id = ${id}::bigint`
    if (exists.length === 0) return yield* new OutboxRowNotFound({ id })
    return { id, status: exists[0]!.status, changed: false }
  }
  return { id, status: "pending", changed: true }
})
