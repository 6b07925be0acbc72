/**
 * WarehouseReads: what the warehouse answers about its rows — how listed records compare with
 * them, which were last written before a moment, the live records of some books, counts, one row
 * with its record decoded, and the records set aside as undecodable. Read-only.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import type { SqlClient } from "effect/sql/SqlClient"
import { type AnyTable, decoderOf } from "./Rows.ts"
import { type Resource, type ResourceRecord, type Row, type Source, Tables } from "./Tables.ts"
import type { KnownRecord, ListedState, StoredRecord, UndecodableRecord } from "./WarehouseTypes.ts"
import { toWarehouseError } from "./WarehouseError.ts"

export const compareListed = (sql: SqlClient) =>
  Effect.fn("Warehouse.compareListed")(
    function* (resource: Resource, listed: ReadonlyArray<{ readonly id: string; readonly updatedAt: string | null }>) {
      if (listed.length === 0) return []
      const table = sql.literal(`crm."${Tables[resource].table}"`)
      // The statement's own literals and columns: its rows have this shape.
      return yield* sql<{ id: string; state: ListedState }>`
      SELECT v.id, CASE
        WHEN w.id IS NULL THEN 'absent'
        WHEN w.deleted_at IS NOT NULL THEN 'deleted'
        WHEN v.updated_at IS NOT NULL
          AND (w.updated_at IS NULL OR w.updated_at < v.updated_at::timestamptz) THEN 'stale'
        ELSE 'current' END AS state
      FROM unnest(${listed.map((item) => item.id)}::text[], ${listed.map((item) => item.updatedAt)}::text[])
        AS v(id, updated_at)
      LEFT JOIN ${table} w ON w.id = v.id`
    },
    (effect, resource) => Effect.mapError(effect, toWarehouseError("compareListed", resource))
  )

export const liveWrittenBefore = (sql: SqlClient) =>
  Effect.fn("Warehouse.liveWrittenBefore")(
    function* (
      resource: Resource,
      before: Date,
      options?: { readonly ids?: ReadonlyArray<string>; readonly lock?: boolean }
    ) {
      const table = sql.literal(`crm."${Tables[resource].table}"`)
      const rows =
        options?.ids === undefined
          ? yield* sql<{ id: string }>`SELECT id FROM ${table} WHERE deleted_at IS NULL AND synced_at < ${before}`
          : yield* sql<{ id: string }>`
            SELECT id FROM ${table}
            WHERE id = ANY(${options.ids}::text[]) AND deleted_at IS NULL AND synced_at < ${before}
            ${options.lock === true ? sql.literal("FOR UPDATE") : sql.literal("")}`
      return rows.map((row) => row.id)
    },
    (effect, resource) => Effect.mapError(effect, toWarehouseError("liveWrittenBefore", resource))
  )

export const knownInBooks = (sql: SqlClient) =>
  Effect.fn("Warehouse.knownInBooks")(
    function* (books: ReadonlyArray<string>) {
      return yield* sql<KnownRecord>`
      SELECT 'tasks'::text AS resource, id, NULL::text AS notable_type, NULL::text AS notable_id,
             NULL::text AS household_id, (extract(epoch FROM synced_at) * 1000)::float8 AS synced_ms,
             false AS live_transcript
        FROM crm."tasks" WHERE deleted_at IS NULL AND book_id = ANY(${books}::text[])
      UNION ALL
      SELECT 'meetings', m.id, NULL, NULL, NULL, (extract(epoch FROM m.synced_at) * 1000)::float8,
             EXISTS (SELECT 1 FROM crm."meeting_transcripts" t
                     WHERE t.id = m.id AND t.deleted_at IS NULL AND t.has_transcript)
        FROM crm."meetings" m WHERE m.deleted_at IS NULL AND m.book_id = ANY(${books}::text[])
      UNION ALL
      SELECT 'notes', id, notable_type, notable_id, household_id, (extract(epoch FROM synced_at) * 1000)::float8, false
        FROM crm."notes" WHERE deleted_at IS NULL AND book_id = ANY(${books}::text[])`
    },
    Effect.mapError(toWarehouseError("knownInBooks", "tasks"))
  )

export const count = (sql: SqlClient) =>
  Effect.fn("Warehouse.count")(
    function* (resource: Resource, options?: { readonly includeDeleted?: boolean }) {
      const table = `crm."${Tables[resource].table}"`
      const where = options?.includeDeleted === true ? "" : ` WHERE "deleted_at" IS NULL`
      const [row] = yield* sql.unsafe<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}${where}`)
      return row?.n ?? 0
    },
    (effect, resource) => Effect.mapError(effect, toWarehouseError("count", resource))
  )

export const row = (sql: SqlClient) =>
  Effect.fn("Warehouse.row")(
    function* (resource: Resource, id: string) {
      const rows = yield* sql.unsafe<Row>(`SELECT * FROM crm."${Tables[resource].table}" WHERE "id" = $1`, [id])
      return Option.fromNullishOr(rows[0])
    },
    (effect, resource) => Effect.mapError(effect, toWarehouseError("row", resource))
  )

/** `row`, with its record decoded from `raw` (null for a tombstone or a record that no longer decodes). */
export const findById =
  (readRow: ReturnType<typeof row>) =>
  <R extends Resource>(resource: R, id: string) =>
    readRow(resource, id).pipe(
      Effect.map(
        Option.map((stored): StoredRecord<R> => {
          const decoded =
            stored.raw === null || stored.raw === undefined
              ? undefined
              : decoderOf(Tables[resource] as AnyTable)(stored.raw)
          return {
            id: stored.id as string,
            updatedAt: (stored.updated_at as Date | null) ?? null,
            deletedAt: (stored.deleted_at as Date | null) ?? null,
            syncedAt: stored.synced_at as Date,
            source: stored.source as Source,
            raw: stored.raw ?? null,
            record: decoded !== undefined && Result.isSuccess(decoded) ? (decoded.success as ResourceRecord<R>) : null
          }
        })
      )
    )

export const undecodable = (sql: SqlClient) =>
  Effect.fn("Warehouse.undecodable")(
    function* (resource?: Resource) {
      const rows = yield* sql<{
        resource: string
        record_id: string | null
        raw: unknown
        error: string
        source: Source
        occurrences: number
        first_seen_at: Date
        last_seen_at: Date
      }>`
      SELECT resource, record_id, raw, error, source, occurrences, first_seen_at, last_seen_at
      FROM crm_sync.undecodable_records
      WHERE ${resource === undefined ? sql`TRUE` : sql`resource = ${resource}`}
      ORDER BY last_seen_at DESC, id DESC`
      return rows.map((r): UndecodableRecord => ({
        resource: r.resource,
        recordId: r.record_id,
        raw: r.raw,
        error: r.error,
        source: r.source,
        occurrences: r.occurrences,
        firstSeenAt: r.first_seen_at,
        lastSeenAt: r.last_seen_at
      }))
    },
    Effect.mapError(toWarehouseError("undecodable", "undecodable_records"))
  )
