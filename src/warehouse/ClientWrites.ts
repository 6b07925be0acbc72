/**
 * ClientWrites: how client deliveries are written, field by field. Clients carry no `updated_at`
 * (spec §2.9) and a sender signs every attempt anew, so one whole snapshot cannot be ordered
 * against another; but a `client.updated` names the fields changed over its debounce window
 * (`changed_fields`, spec §6.3), and every change of a client sends one naming the field. So:
 * - a `client.updated` with first signed time T writes each field it names when T is not older
 *   than the time held for that field (`field_signed_at`), which then becomes T; it fills the
 *   fields the stored client never had, and leaves every other field as stored;
 * - a `client.created` stands for no time: it only fills fields the stored client never had;
 * - `updated_at` is the latest T applied (NULL while only a creation was).
 * Several deliveries of one client in a batch are folded first (`foldClients`): in signed order,
 * the creation first, into the one write that applying them one at a time would make. The batch is
 * then one statement, ids in order (two writers lock shared rows in one order); the merge runs in
 * its ON CONFLICT against the row as it is once locked, so two writers of one client compose
 * whichever commits first. Typed columns are read from the merged `raw`.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { SqlClient } from "effect/sql/SqlClient"
import * as BatchSql from "./BatchSql.ts"
import { placeLateDeliveries } from "./ClientHistory.ts"
import { type Decoded, type Rejected, rawOf } from "./Rows.ts"
import { type Source, Tables } from "./Tables.ts"
import type { UpsertResult } from "./WarehouseTypes.ts"
import { toWarehouseError } from "./WarehouseError.ts"

/** One client delivery: its record as received, with its first signed time and changed fields. */
export interface ClientDelivery {
  readonly record: unknown
  /** The first signed time of the delivery's hook-id (ISO 8601); null for a `client.created`. */
  readonly signedAt: string | null
  /** `changed_fields` of a `client.updated`; null for a `client.created`. */
  readonly changedFields: ReadonlyArray<string> | null
}

/** A delivery whose record decoded (`Warehouse.prepare`). */
export interface DecodedClient {
  readonly id: string
  readonly raw: Readonly<Record<string, unknown>>
  readonly signedAt: string | null
  readonly changedFields: ReadonlyArray<string> | null
}

/**
 * The write of one client: `raw` holds the fields to fill and those to write in their time, the
 * latter being the keys of `field_signed_at` (each with its time); `updated_at` the latest time.
 */
export interface ClientRow {
  readonly id: string
  readonly updated_at: string | null
  readonly raw: Readonly<Record<string, unknown>>
  readonly field_signed_at: Readonly<Record<string, string>> | null
}

const millis = (signedAt: string | null) => (signedAt === null ? -Infinity : Date.parse(signedAt))

/** One client's deliveries, in signed order (the creation first; sort is stable), as one write. */
const foldOne = (id: string, deliveries: ReadonlyArray<DecodedClient>): ClientRow => {
  const fills = new Map<string, unknown>()
  const timed = new Map<string, { readonly value: unknown; readonly at: string }>()
  let latest: string | null = null
  for (const delivery of deliveries.toSorted((a, b) => millis(a.signedAt) - millis(b.signedAt))) {
    const named = new Set(delivery.signedAt === null ? [] : (delivery.changedFields ?? []))
    for (const [key, value] of Object.entries(delivery.raw)) {
      // A later named write replaces an earlier one (not older, in this order); a fill after a
      // named write finds the field known, so only the first fill of a field counts.
      if (named.has(key) && key !== "id") timed.set(key, { value, at: delivery.signedAt! })
      else if (!fills.has(key)) fills.set(key, value)
    }
    if (delivery.signedAt !== null) latest = delivery.signedAt
  }
  const raw: Record<string, unknown> = {}
  for (const [key, value] of fills) if (!timed.has(key)) raw[key] = value
  const times: Record<string, string> = {}
  for (const [key, { value, at }] of timed) {
    raw[key] = value
    times[key] = at
  }
  return { id, updated_at: latest, raw, field_signed_at: timed.size === 0 ? null : times }
}

/** The deliveries of a batch as one write per client, in id order. */
export const foldClients = (deliveries: ReadonlyArray<DecodedClient>): ReadonlyArray<ClientRow> => {
  const byId = new Map<string, Array<DecodedClient>>()
  for (const delivery of deliveries) {
    const held = byId.get(delivery.id)
    if (held === undefined) byId.set(delivery.id, [delivery])
    else held.push(delivery)
  }
  return [...byId.keys()].toSorted().map((id) => foldOne(id, byId.get(id)!))
}

const quote = (identifier: string) => `"${identifier}"`

/** Whether the incoming time of field `key` is not older than the stored one (or none is stored). */
const notOlder = (key: string) =>
  `excluded."field_signed_at" ? ${key} AND (t."field_signed_at" -> ${key} IS NULL OR ` +
  `(t."field_signed_at" ->> ${key})::timestamptz <= (excluded."field_signed_at" ->> ${key})::timestamptz)`

/** The stored raw with the fields it never had filled and the named fields not older written over it. */
const mergedRaw =
  `excluded."raw" || COALESCE(t."raw", '{}'::jsonb) || COALESCE((SELECT jsonb_object_agg(e.key, e.value) ` +
  `FROM jsonb_each(excluded."raw") AS e WHERE ${notOlder("e.key")}), '{}'::jsonb)`

/** The stored field times with those of the named fields written. */
const mergedTimes =
  `CASE WHEN excluded."field_signed_at" IS NULL THEN t."field_signed_at" ELSE COALESCE(t."field_signed_at", '{}'::jsonb) || ` +
  `COALESCE((SELECT jsonb_object_agg(e.key, e.value) FROM jsonb_each(excluded."field_signed_at") AS e ` +
  `WHERE ${notOlder("e.key")}), '{}'::jsonb) END`

/**
 * `$1` a jsonb array of `ClientRow` in id order, `$2` the source. Returns `{id, outcome,
 * known_until}` per row (`known_until`: the written row's latest `updated_at` or `deleted_at`, in
 * epoch ms; null when unchanged); a write that changes nothing leaves the row untouched
 * (`synced_at` included).
 */
const writeClientsSql = (() => {
  const typed = Object.entries(Tables.clients.columns)
  const typedRecord = `AS x(${typed.map(([name, type]) => `${quote(name)} ${type}`).join(", ")})`
  const typedNames = typed.map(([name]) => quote(name)).join(", ")
  const typedValues = typed.map(([name]) => `x.${quote(name)}`).join(", ")
  return `WITH input AS (
  SELECT r."id", r."updated_at", r."raw", r."field_signed_at"
  FROM jsonb_to_recordset($1::jsonb) AS r("id" text, "updated_at" timestamptz, "raw" jsonb, "field_signed_at" jsonb)
),
written AS (
  INSERT INTO crm."clients" AS t ("id", "updated_at", "raw", "field_signed_at", ${typedNames}, "source", "synced_at")
  SELECT i."id", i."updated_at", i."raw", i."field_signed_at", ${typedValues}, $2::text, now()
  FROM input AS i, jsonb_to_record(i."raw") ${typedRecord}
  ON CONFLICT ("id") DO UPDATE SET
    ("raw", "field_signed_at", ${typedNames}) = (
      SELECT m."raw", m."field_signed_at", ${typedValues}
      FROM (SELECT ${mergedRaw} AS "raw", ${mergedTimes} AS "field_signed_at") AS m, jsonb_to_record(m."raw") ${typedRecord}
    ),
    "updated_at" = GREATEST(t."updated_at", excluded."updated_at"),
    "source" = excluded."source",
    "synced_at" = excluded."synced_at"
  WHERE t."raw" IS DISTINCT FROM ${mergedRaw}
    OR t."field_signed_at" IS DISTINCT FROM ${mergedTimes}
    OR t."updated_at" IS DISTINCT FROM GREATEST(t."updated_at", excluded."updated_at")
  RETURNING t."id", (t.xmax = 0) AS inserted, GREATEST(t."updated_at", t."deleted_at") AS known_until
)
SELECT i."id" AS id, CASE WHEN w."id" IS NULL THEN 'unchanged' WHEN w.inserted THEN 'inserted' ELSE 'updated' END AS outcome,
  (extract(epoch FROM w.known_until) * 1000)::float8 AS known_until
FROM input AS i LEFT JOIN written AS w ON w."id" = i."id"`
})()

/** `effect` in a transaction: the caller's, when one is open (no savepoint), or its own. */
const inTransaction = <A, E, R>(sql: SqlClient, effect: Effect.Effect<A, E, R>) =>
  Effect.flatMap(Effect.serviceOption(sql.transactionService), (open) =>
    Option.isSome(open) ? effect : sql.withTransaction(effect)
  )

/** A decoded delivery's client, for `foldClients`. */
export const decodedClient = (item: Decoded, delivery: ClientDelivery): DecodedClient => ({
  id: item.id,
  raw: rawOf(item) as Readonly<Record<string, unknown>>,
  signedAt: delivery.signedAt,
  changedFields: delivery.changedFields
})

/**
 * Writes a batch of client deliveries (decoded by the caller) in one statement; the rejected ones
 * are stored in `crm_sync.undecodable_records`. Deliveries folded into another of their client
 * count as skipped.
 */
export const writeClients = (sql: SqlClient, keepHistory: boolean) =>
  Effect.fn("Warehouse.writeClients")(
    function* (decoded: ReadonlyArray<DecodedClient>, rejected: ReadonlyArray<Rejected>, source: Source) {
      if (rejected.length > 0) {
        const rows = rejected.map((r) => ({ resource: r.resource, record_id: r.recordId, raw: r.raw, error: r.error }))
        yield* sql.unsafe(BatchSql.storeUndecodable, [JSON.stringify(rows), source])
      }
      const rows = foldClients(decoded)
      const counts = { inserted: 0, updated: 0, unchanged: 0, skipped: decoded.length - rows.length }
      if (rows.length > 0) {
        const write = sql.unsafe<{
          id: string
          outcome: "inserted" | "updated" | "unchanged"
          known_until: number | null
        }>(writeClientsSql, [JSON.stringify(rows), source])
        // The row's update trigger ended the version it replaced; late deliveries go into the
        // middle of the chain (ClientHistory.ts), in the same transaction as the write.
        const outcomes = yield* keepHistory
          ? inTransaction(
              sql,
              Effect.tap(write, (outcomes) => placeLateDeliveries(sql, decoded, outcomes, source))
            )
          : write
        for (const { outcome } of outcomes) counts[outcome] += 1
      }
      return { ...counts, rejected: rejected.length } satisfies UpsertResult
    },
    Effect.mapError(toWarehouseError("writeClients", "clients"))
  )
