/**
 * WebhookInbox: the SQL of `crm_sync.webhook_inbox`, one row per accepted delivery keyed by its
 * hook-id (migrations/0002_sync_state.sql). The intake writes rows (`insert`, many per statement);
 * the processor leases them (`claim`, FOR UPDATE SKIP LOCKED with `locked_by`/`locked_at`, after
 * graphile-worker), settles them in the same transaction as its warehouse writes (`settle`), puts
 * failures back with a backoff (`retryLater`), and an operator can `replay` dead rows. Times are
 * PostgreSQL's `now()`, so every replica on the database agrees on leases and due times.
 */
import * as PgTypes from "@effect/sql-pg/PgTypes"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Result from "effect/Result"
import { SqlClient } from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql/SqlError"

/** The NOTIFY channel the insert trigger signals (0002_sync_state.sql). */
export const INBOX_CHANNEL = "crm_sync_webhook_inbox"

/**
 * Row lifecycle: `pending` → (claimed) → `processed` | `unhandled` (no handler for its event type)
 * | `failed` (will be retried at `next_attempt_at`) → … → `dead` after `max_attempts`, or at once
 * when retrying cannot help (the body is not JSON or does not decode). Claimed rows keep their
 * status and carry a lease; `reap` frees leases whose holder died.
 */
export type InboxStatus = "pending" | "processed" | "failed" | "dead" | "unhandled"

/** A verified delivery as the intake stores it. */
export interface InboxRow {
  readonly hookId: string
  readonly endpoint: string
  readonly eventType: string | null
  /** The body exactly as received and signed. */
  readonly body: Uint8Array
  /** The signed `hook-timestamp`, epoch milliseconds. */
  readonly signedAt: number
  /** `pending`, or `dead` for a signed body that is not JSON (a retry cannot fix it). */
  readonly status: "pending" | "dead"
  readonly error: string | null
}

/** A row leased to one processor. */
export interface ClaimedRow {
  readonly hookId: string
  readonly endpoint: string
  readonly eventType: string | null
  readonly body: Uint8Array
  /** Claims so far, this one included. */
  readonly attempts: number
  readonly receivedAt: Date
  /**
   * When the sender signed it (its hook-timestamp): the earliest of the copies stored under its
   * hook-id, since a retry is signed anew. Null for rows stored before that was kept.
   */
  readonly signedAt: Date | null
}

/** How a claimed row ends: for good (`processed`, `unhandled`, `dead`) in the apply transaction. */
export interface Settlement {
  readonly hookId: string
  readonly status: "processed" | "unhandled" | "dead"
  readonly error: string | null
}

/** A claimed row that failed and may be tried again. */
export interface Failure {
  readonly hookId: string
  readonly attempts: number
  readonly error: string
}

/** Which rows `replay` puts back to `pending`. */
export type ReplaySelection = { readonly _tag: "Dead" } | { readonly _tag: "One"; readonly hookId: string }

export interface ReplayOutcome {
  readonly replayed: number
  /** Selected dead rows left dead: they have no event type to be decoded by. */
  readonly leftDead: number
}

export interface InboxCounts {
  readonly backlog: number
  readonly dead: number
}

/**
 * Delay before the next try after `attempts` failed claims: 5 s doubling to at most one hour.
 * With the default of 10 attempts a row is retried for roughly 40 minutes before it is dead.
 */
export const retryDelay = (attempts: number): Duration.Duration =>
  Duration.millis(Math.min(5_000 * 2 ** Math.max(0, attempts - 1), 3_600_000))

/**
 * Typed array parameters. The driver infers an array's type from its elements, which fails for an
 * array of nulls only (a batch in which no row has an error) or numbers that are partly integral;
 * naming the element type avoids both. Neither can fail for these element types.
 */
const textArray = (values: ReadonlyArray<string | null>) => Result.getOrThrow(PgTypes.array(values, PgTypes.OID.text))
const byteaArray = (values: ReadonlyArray<Uint8Array>) => Result.getOrThrow(PgTypes.array(values, PgTypes.OID.bytea))
const float8Array = (values: ReadonlyArray<number>) => Result.getOrThrow(PgTypes.array(values, PgTypes.OID.float8))

/**
 * One row per hook id, preferring a copy that knows its event type (see `insert`), with the
 * earliest signed time of the copies (each attempt is signed anew).
 */
const oneCopyPerHook = (rows: ReadonlyArray<InboxRow>): ReadonlyArray<InboxRow> => {
  const byHook = new Map<string, InboxRow>()
  for (const row of rows) {
    const kept = byHook.get(row.hookId)
    if (kept === undefined) {
      byHook.set(row.hookId, row)
      continue
    }
    const typed = kept.eventType === null && row.eventType !== null ? row : kept
    byHook.set(row.hookId, { ...typed, signedAt: Math.min(kept.signedAt, row.signedAt) })
  }
  return byHook.size === rows.length ? rows : [...byHook.values()]
}

const rowsAffected = (rows: ReadonlyArray<{ readonly n: number | bigint }>) => Number(rows[0]?.n ?? 0)

// ---------------------------------------------------------------------------------------------
// Storing and claiming
// ---------------------------------------------------------------------------------------------

// One statement whatever the batch size (unnest of arrays rather than multi-row VALUES),
// so PostgreSQL plans it once.
//
// A sender delivers one message, under one hook id, to every endpoint whose selection
// matches (spec §6.1). An event without `event_type` (client.created, client.updated,
// prospect.created; §6.3) can be understood only on its own fixed-type endpoint; if its copy
// on an all-types endpoint came first, it was stored with no type and set aside. So a typed
// copy completes an untyped row it finds — type, endpoint, body, back to pending — unless
// that row was already applied; every other repeat is left alone. The batch keeps one copy
// per hook id, the typed one where there is one (an upsert may touch a row only once).
//
// A row keeps the first signed time seen for its hook id: a sender signs every attempt with
// the time of that attempt, so a completing copy that was retried carries a later time than
// the message has (its clients are ordered by it, EventWrites.ts).
const insert = (sql: SqlClient) =>
  Effect.fnUntraced(function* (rows: ReadonlyArray<InboxRow>) {
    if (rows.length === 0) return new Set<string>()
    const batch = oneCopyPerHook(rows)
    const inserted = yield* sql<{ hook_id: string; completed: boolean }>`
      INSERT INTO crm_sync.webhook_inbox AS inbox
        (hook_id, endpoint, event_type, body, status, last_error, processed_at, signed_at)
      SELECT r.hook_id, r.endpoint, r.event_type, r.body, r.status, r.last_error,
             CASE WHEN r.status = 'dead' THEN now() END, to_timestamp(r.signed_ms / 1000)
      FROM unnest(
        ${textArray(batch.map((row) => row.hookId))},
        ${textArray(batch.map((row) => row.endpoint))},
        ${textArray(batch.map((row) => row.eventType))},
        ${byteaArray(batch.map((row) => row.body))},
        ${textArray(batch.map((row) => row.status))},
        ${textArray(batch.map((row) => row.error))},
        ${float8Array(batch.map((row) => row.signedAt))}
      ) AS r(hook_id, endpoint, event_type, body, status, last_error, signed_ms)
      ON CONFLICT (hook_id) DO UPDATE
        SET endpoint = excluded.endpoint, event_type = excluded.event_type, body = excluded.body,
            signed_at = LEAST(inbox.signed_at, excluded.signed_at),
            status = excluded.status, last_error = excluded.last_error, attempts = 0,
            next_attempt_at = now(), processed_at = excluded.processed_at, locked_by = NULL, locked_at = NULL
        WHERE inbox.event_type IS NULL AND excluded.event_type IS NOT NULL AND inbox.status <> 'processed'
      RETURNING hook_id, xmax <> 0 AS completed`
    // The insert trigger wakes the processors for new rows only; a completed row needs its own.
    // So does a repeat: its ON CONFLICT locked the stored row until this commit, and a processor
    // woken by the first copy's commit meanwhile skipped it (SKIP LOCKED) and went back to sleep.
    if (inserted.some((row) => row.completed) || inserted.length < batch.length) {
      yield* sql`SELECT pg_notify(${INBOX_CHANNEL}, '')`
    }
    return new Set(inserted.map((row) => row.hook_id))
  })

const claim = (sql: SqlClient) =>
  Effect.fnUntraced(function* (worker: string, limit: number) {
    const rows = yield* sql<{
      hook_id: string
      endpoint: string
      event_type: string | null
      body: Uint8Array
      attempts: number
      received_at: Date
      signed_at: Date | null
    }>`
      UPDATE crm_sync.webhook_inbox AS inbox
      SET locked_by = ${worker}, locked_at = now(), attempts = inbox.attempts + 1
      FROM (
        SELECT hook_id FROM crm_sync.webhook_inbox
        WHERE status IN ('pending', 'failed') AND next_attempt_at <= now() AND locked_by IS NULL
        ORDER BY next_attempt_at
        LIMIT ${limit}
        FOR UPDATE SKIP LOCKED
      ) AS due
      WHERE inbox.hook_id = due.hook_id
      RETURNING inbox.hook_id, inbox.endpoint, inbox.event_type, inbox.body, inbox.attempts, inbox.received_at,
                inbox.signed_at`
    return rows
      .map((row): ClaimedRow => ({
        hookId: row.hook_id,
        endpoint: row.endpoint,
        eventType: row.event_type,
        body: row.body,
        attempts: row.attempts,
        receivedAt: row.received_at,
        signedAt: row.signed_at
      }))
      .toSorted((a, b) => a.receivedAt.getTime() - b.receivedAt.getTime())
  })

// ---------------------------------------------------------------------------------------------
// Settling claimed rows
// ---------------------------------------------------------------------------------------------

// `locked_by = worker`: a row whose lease was reaped and taken by another processor is that
// processor's to settle. Applying it twice meanwhile is harmless (writes are idempotent).
const settle = (sql: SqlClient) =>
  Effect.fnUntraced(function* (worker: string, settlements: ReadonlyArray<Settlement>) {
    if (settlements.length === 0) return
    yield* sql`
      UPDATE crm_sync.webhook_inbox AS inbox
      SET status = s.status, last_error = s.error, processed_at = now(), locked_by = NULL, locked_at = NULL
      FROM unnest(
        ${textArray(settlements.map((s) => s.hookId))},
        ${textArray(settlements.map((s) => s.status))},
        ${textArray(settlements.map((s) => s.error))}
      ) AS s(hook_id, status, error)
      WHERE inbox.hook_id = s.hook_id AND inbox.locked_by = ${worker}`
  })

const retryLater = (sql: SqlClient) =>
  Effect.fnUntraced(function* (worker: string, failures: ReadonlyArray<Failure>, maxAttempts: number) {
    if (failures.length === 0) return { dead: [] }
    const rows = yield* sql<{ hook_id: string; status: string }>`
      UPDATE crm_sync.webhook_inbox AS inbox
      SET status = CASE WHEN inbox.attempts >= ${maxAttempts} THEN 'dead' ELSE 'failed' END,
          last_error = f.error,
          next_attempt_at = now() + f.delay_ms * interval '1 millisecond',
          processed_at = CASE WHEN inbox.attempts >= ${maxAttempts} THEN now() END,
          locked_by = NULL, locked_at = NULL
      FROM unnest(
        ${textArray(failures.map((f) => f.hookId))},
        ${textArray(failures.map((f) => f.error))},
        ${float8Array(failures.map((f) => Duration.toMillis(retryDelay(f.attempts))))}
      ) AS f(hook_id, error, delay_ms)
      WHERE inbox.hook_id = f.hook_id AND inbox.locked_by = ${worker}
      RETURNING inbox.hook_id, inbox.status`
    return { dead: rows.filter((row) => row.status === "dead").map((row) => row.hook_id) }
  })

// ---------------------------------------------------------------------------------------------
// Leases and retention: the reaper and pruning
// ---------------------------------------------------------------------------------------------

const reap = (sql: SqlClient) =>
  Effect.fnUntraced(function* (leaseTimeout: Duration.Duration) {
    const rows = yield* sql<{ n: number }>`
      WITH freed AS (
        UPDATE crm_sync.webhook_inbox SET locked_by = NULL, locked_at = NULL
        WHERE locked_by IS NOT NULL
          AND locked_at < now() - ${Duration.toMillis(leaseTimeout)}::float8 * interval '1 millisecond'
        RETURNING 1
      )
      SELECT count(*)::int AS n FROM freed`
    return rowsAffected(rows)
  })

// In slices, so a large backlog of old rows never holds one long delete.
const pruneSlice = (sql: SqlClient, retentionMs: number) =>
  sql<{ n: number }>`
    WITH gone AS (
      DELETE FROM crm_sync.webhook_inbox
      WHERE hook_id IN (
        SELECT hook_id FROM crm_sync.webhook_inbox
        WHERE status IN ('processed', 'unhandled')
          AND processed_at < now() - ${retentionMs}::float8 * interval '1 millisecond'
        LIMIT 5000
      )
      RETURNING 1
    )
    SELECT count(*)::int AS n FROM gone`.pipe(Effect.map(rowsAffected))

const prune = (sql: SqlClient) =>
  Effect.fnUntraced(function* (retention: Duration.Duration) {
    const retentionMs = Duration.toMillis(retention)
    let total = 0
    while (true) {
      const deleted = yield* pruneSlice(sql, retentionMs)
      total += deleted
      if (deleted < 5000) return total
    }
  })

// ---------------------------------------------------------------------------------------------
// The operator's replay, and the backlog
// ---------------------------------------------------------------------------------------------

// A dead row with no event type (an event of spec §6.3 that reached an endpoint with no fixed
// type, or a body that is not JSON) would go straight back to dead: it is left as it is and
// counted. Only its copy on the typed endpoint can complete it (`insert`), once that endpoint's
// secret is right and the CRM retries.
const replay = (sql: SqlClient) =>
  Effect.fnUntraced(function* (selection: ReplaySelection) {
    const filter =
      selection._tag === "Dead" ? sql`status = 'dead'` : sql`hook_id = ${selection.hookId} AND locked_by IS NULL`
    const rows = yield* sql<{ n: number; left_dead: number }>`
      WITH replayed AS (
        UPDATE crm_sync.webhook_inbox
        SET status = 'pending', attempts = 0, last_error = NULL, next_attempt_at = now(), processed_at = NULL
        WHERE ${filter} AND event_type IS NOT NULL
        RETURNING 1
      )
      SELECT (SELECT count(*) FROM replayed)::int AS n,
             (SELECT count(*) FROM crm_sync.webhook_inbox WHERE ${filter} AND status = 'dead'
                AND event_type IS NULL)::int AS left_dead`
    const replayed = rows[0]?.n ?? 0
    if (replayed > 0) yield* sql`SELECT pg_notify(${INBOX_CHANNEL}, '')`
    return { replayed, leftDead: rows[0]?.left_dead ?? 0 }
  })

// Two subqueries so each uses its partial index instead of scanning every kept row.
const counts = (sql: SqlClient) =>
  sql<{ backlog: number; dead: number }>`
    SELECT (SELECT count(*) FROM crm_sync.webhook_inbox WHERE status IN ('pending', 'failed'))::int AS backlog,
           (SELECT count(*) FROM crm_sync.webhook_inbox WHERE status = 'dead')::int AS dead`.pipe(
    Effect.map((rows) => ({ backlog: rows[0]?.backlog ?? 0, dead: rows[0]?.dead ?? 0 }))
  )

// ---------------------------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------------------------

export class WebhookInbox extends Context.Service<
  WebhookInbox,
  {
    /**
     * Inserts rows; ids already present are left alone, except that a copy with an event type
     * completes a stored copy without one that was never applied. Returns the ids inserted or completed.
     */
    readonly insert: (rows: ReadonlyArray<InboxRow>) => Effect.Effect<ReadonlySet<string>, SqlError>
    /** Leases up to `limit` due rows to `worker`, oldest due first, counting one attempt each. */
    readonly claim: (worker: string, limit: number) => Effect.Effect<ReadonlyArray<ClaimedRow>, SqlError>
    /** Ends claimed rows and releases their lease; meant to run inside the apply transaction. */
    readonly settle: (worker: string, settlements: ReadonlyArray<Settlement>) => Effect.Effect<void, SqlError>
    /** Marks claimed rows `failed` with a backoff, or `dead` once `maxAttempts` is reached. */
    readonly retryLater: (
      worker: string,
      failures: ReadonlyArray<Failure>,
      maxAttempts: number
    ) => Effect.Effect<{ readonly dead: ReadonlyArray<string> }, SqlError>
    /** Frees leases older than `leaseTimeout` (their holder died); returns how many. */
    readonly reap: (leaseTimeout: Duration.Duration) => Effect.Effect<number, SqlError>
    /** Deletes processed and unhandled rows finished longer ago than `retention`; returns how many. */
    readonly prune: (retention: Duration.Duration) => Effect.Effect<number, SqlError>
    /**
     * Puts the selected rows back to `pending`, attempts reset, and wakes the processors; dead rows
     * with no event type stay dead (they would be again at once) and are counted in `leftDead`.
     */
    readonly replay: (selection: ReplaySelection) => Effect.Effect<ReplayOutcome, SqlError>
    readonly counts: Effect.Effect<InboxCounts, SqlError>
  }
>()("crm-sync/webhooks/WebhookInbox") {
  static readonly layer = Layer.effect(
    WebhookInbox,
    Effect.gen(function* () {
      const sql = yield* SqlClient
      return WebhookInbox.of({
        insert: insert(sql),
        claim: claim(sql),
        settle: settle(sql),
        retryLater: retryLater(sql),
        reap: reap(sql),
        prune: prune(sql),
        replay: replay(sql),
        counts: counts(sql)
      })
    })
  )
}

// ---------------------------------------------------------------------------------------------
// Reads for status, the status page, lag metrics and the plan
// ---------------------------------------------------------------------------------------------

/** Deliveries by status. */
export const inboxCounts = Effect.gen(function* () {
  const sql = yield* SqlClient
  return yield* sql<{ status: string; n: number }>`
    SELECT status, count(*)::int AS n FROM crm_sync.webhook_inbox GROUP BY status ORDER BY status`
})

/** When the oldest delivery still waiting (pending, or failed awaiting a retry) arrived. */
export const oldestWaitingDelivery = Effect.gen(function* () {
  const sql = yield* SqlClient
  const [row] = yield* sql<{ at: Date | null }>`
    SELECT min(received_at) AS at FROM crm_sync.webhook_inbox WHERE status IN ('pending', 'failed')`
  return row?.at ?? null
})

/** The `limit` newest dead deliveries with their reasons. */
export const deadDeliveries = (limit: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    return yield* sql<{ hook_id: string; endpoint: string; event_type: string | null; error: string | null; at: Date }>`
      SELECT hook_id, endpoint, event_type, last_error AS error, received_at AS at
      FROM crm_sync.webhook_inbox WHERE status = 'dead' ORDER BY received_at DESC LIMIT ${limit}`
  })

/** When each endpoint last received a delivery (unix seconds; null: never). */
export const lastDeliveries = (endpoints: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    if (endpoints.length === 0) return []
    const sql = yield* SqlClient
    return yield* sql<{ endpoint: string; last_delivery: number | null }>`
      SELECT e.endpoint,
             (SELECT extract(epoch FROM max(i.received_at))::float8 FROM crm_sync.webhook_inbox i
              WHERE i.endpoint = e.endpoint) AS last_delivery
      FROM unnest(${endpoints}::text[]) AS e(endpoint)`
  })

/** Deliveries of `eventType` received in the last 24 hours. */
export const receivedLastDay = (eventType: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const [row] = yield* sql<{ n: number }>`
      SELECT count(*)::int AS n FROM crm_sync.webhook_inbox
      WHERE event_type = ${eventType} AND received_at > now() - interval '24 hours'`
    return row?.n ?? 0
  })

/**
 * Per minute since `since` (ISO): deliveries received, deliveries applied (processed, or set aside
 * as an event crm-sync does not handle) and the longest time from receipt to applied of those.
 * Every delivery received since then is either done since then (the `processed_at` index) or
 * still waiting or dead (small, indexed sets), so the inbox's history is not scanned.
 */
export const eventsPerMinute = (since: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    return yield* sql<{ minute: Date; received: number; applied: number; max_lag: number | null }>`
      WITH recent AS (
        SELECT received_at, processed_at FROM crm_sync.webhook_inbox
        WHERE status IN ('processed', 'unhandled') AND processed_at >= ${since}::timestamptz
        UNION ALL
        SELECT received_at, NULL FROM crm_sync.webhook_inbox
        WHERE status IN ('pending', 'failed') AND received_at >= ${since}::timestamptz
        UNION ALL
        SELECT received_at, NULL FROM crm_sync.webhook_inbox
        WHERE status = 'dead' AND received_at >= ${since}::timestamptz
      ),
      received AS (
        SELECT date_trunc('minute', received_at) AS minute, count(*)::int AS n FROM recent
        WHERE received_at >= ${since}::timestamptz GROUP BY 1
      ),
      applied AS (
        SELECT date_trunc('minute', processed_at) AS minute, count(*)::int AS n,
               max(extract(epoch FROM processed_at - received_at))::float8 AS max_lag
        FROM recent WHERE processed_at IS NOT NULL GROUP BY 1
      )
      SELECT minute, COALESCE(r.n, 0)::int AS received, COALESCE(a.n, 0)::int AS applied, a.max_lag
      FROM received r FULL JOIN applied a USING (minute) ORDER BY minute`
  })
