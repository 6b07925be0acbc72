/**
 * History: the versions of schema `crm_history` (migration 0025, docs/history.md), written by the
 * warehouse's own writes in the same transaction as `crm.<table>`. One table per resource of
 * `HistoryResources`, type 2: `[valid_from, valid_to)` by the record's `updated_at` (the CRM's
 * clock), the latest `is_current`, a tombstone `deleted`. A version is added only when the
 * record's content (`content_hash`, md5 of `raw`) or its deletion changed, so a replay or a re-read
 * adds nothing. Two statements, each for a whole batch:
 * - `follow`: after a write of `crm.<table>`, for the ids written, makes the current version the
 *   row as it now stands (a new version, a tombstone, an undeletion). A version always starts after
 *   the one before (by a microsecond where the clocks say otherwise), so the chain has no gap or
 *   overlap whatever the order of the CRM's times and ours.
 * - `placeLate`: a snapshot the forward-only guard refused (older than the row) is put into the
 *   middle of the chain, between the versions before and after its `updated_at`, when its content
 *   is new there. Clients have no snapshot to place: ClientHistory.ts merges their late deliveries.
 */
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { SqlClient } from "effect/sql/SqlClient"
import { AppConfig } from "../config/AppConfig.ts"
import { recordInput } from "./BatchSql.ts"
import type { AnyTable, Decoded } from "./Rows.ts"
import { type PgType, type Resource, type Source, Tables } from "./Tables.ts"

/** The resources that have a history table (migration 0025). */
export const HistoryResources = [
  "annuity_contracts",
  "businesses",
  "clients",
  "financial_accounts",
  "households"
] as const satisfies ReadonlyArray<Resource>
export type HistoryResource = (typeof HistoryResources)[number]

export const isHistoryResource = (resource: string): resource is HistoryResource =>
  (HistoryResources as ReadonlyArray<string>).includes(resource)

/** Which resources keep a history (config `history.resources`; all of `HistoryResources` by default). */
export const HistorySettings = Context.Reference<{ readonly resources: ReadonlySet<Resource> }>(
  "crm-sync/warehouse/HistorySettings",
  { defaultValue: () => ({ resources: new Set<Resource>(HistoryResources) }) }
)

/** The settings from the config's `history.resources`. */
export const historyFromConfig = Layer.effect(
  HistorySettings,
  Effect.map(AppConfig, (config) => ({ resources: new Set<Resource>(config.history.resources) }))
)

const quote = (identifier: string) => `"${identifier}"`

type ColumnList = ReadonlyArray<readonly [string, PgType]>

/** The columns a version copies from its record: typed ones, then each child list as jsonb. */
const versionColumns = (table: AnyTable) => {
  const typed: ColumnList = Object.entries(table.columns)
  const lists = [...new Set(table.children.map((child) => child.list))]
  return { typed, lists }
}

const insertColumns = (table: AnyTable) => {
  const { typed, lists } = versionColumns(table)
  return [
    "id",
    "valid_from",
    "valid_to",
    "is_current",
    "deleted",
    ...typed.map(([name]) => name),
    ...lists,
    "updated_at",
    "raw",
    "content_hash",
    "source",
    "synced_at"
  ]
    .map(quote)
    .join(", ")
}

/** The record's columns of a version, read from a row `alias` (of crm.<table> or the input). */
const recordValues = (table: AnyTable, alias: string) => {
  const { typed, lists } = versionColumns(table)
  return [
    ...typed.map(([name]) => `${alias}.${quote(name)}`),
    ...lists.map((list) => `${alias}."raw" -> '${list}'`),
    `${alias}."updated_at"`,
    `${alias}."raw"`
  ].join(", ")
}

/** Columns a version of `table` copies from its row beyond the record's: a client's field times. */
const rowExtras = (table: AnyTable): ReadonlyArray<string> => (table.table === "clients" ? ["field_signed_at"] : [])
const extraColumns = (table: AnyTable) =>
  rowExtras(table)
    .map((column) => `, ${quote(column)}`)
    .join("")
const extraValues = (table: AnyTable, alias: string) =>
  rowExtras(table)
    .map((column) => `, ${alias}.${quote(column)}`)
    .join("")

/**
 * `$1` ids (text[]) just written in crm.<table>, `$2` the source. For each, compares the row with
 * its latest version and, when they differ, closes that version and opens one holding the row:
 * from the row's `updated_at` (a tombstone from `deleted_at`; an undeletion that no newer
 * snapshot brought, from now), and never before the version it follows. Returns the ids whose
 * row is deleted while its current version is a tombstone already: a snapshot written into a
 * deleted row (no newer than the deletion) belongs before the tombstone (`placeLate`).
 */
export const follow = (table: AnyTable): string => {
  const h = `crm_history.${quote(table.table)}`
  return `WITH r AS (
  SELECT t.*, md5(t."raw"::text) AS hash
  FROM crm.${quote(table.table)} AS t JOIN (SELECT DISTINCT unnest($1::text[]) AS "id") AS d ON d."id" = t."id"
),
c AS (
  SELECT r."id", r."deleted_at", r."updated_at", r.hash, p."valid_from" AS c_from, p."content_hash" AS c_hash,
    p."deleted" AS c_deleted,
    CASE
      WHEN r."deleted_at" IS NOT NULL THEN r."deleted_at"
      WHEN p."deleted" AND (r."updated_at" IS NULL OR r."updated_at" <= p."valid_from") THEN now()
      ELSE COALESCE(r."updated_at", now())
    END AS wanted
  FROM r LEFT JOIN LATERAL (
    SELECT v."valid_from", v."content_hash", v."deleted" FROM ${h} AS v
    WHERE v."id" = r."id" ORDER BY v."valid_from" DESC LIMIT 1
  ) AS p ON true
),
todo AS (
  SELECT c."id", c.c_from,
    CASE WHEN c.c_from IS NULL THEN c.wanted ELSE GREATEST(c.wanted, c.c_from + interval '1 microsecond') END AS new_from
  FROM c
  WHERE c.c_from IS NULL
     OR (c."deleted_at" IS NOT NULL) IS DISTINCT FROM c.c_deleted
     OR (c."deleted_at" IS NULL AND c.c_hash IS DISTINCT FROM c.hash)
),
closed AS (
  UPDATE ${h} AS v SET "valid_to" = todo.new_from, "is_current" = false
  FROM todo WHERE v."id" = todo."id" AND v."valid_from" = todo.c_from
  RETURNING v."id"
),
opened AS (
  INSERT INTO ${h} (${insertColumns(table)}${extraColumns(table)})
  SELECT r."id", todo.new_from, NULL, true, r."deleted_at" IS NOT NULL, ${recordValues(table, "r")}, r.hash, $2::text::crm.sync_source, now()${extraValues(table, "r")}
  FROM todo JOIN r ON r."id" = todo."id"
  ORDER BY r."id"
  RETURNING "id"
)
SELECT c."id" FROM c WHERE c."deleted_at" IS NOT NULL AND c.c_deleted`
}

/**
 * `$1` a jsonb array of snapshots as `upsertRecords` takes them (`{id, updated_at, raw, typed?}`,
 * at most one per id), `$2` the source: each snapshot older than its row goes between the version
 * before its `updated_at` and the one after, unless that version starts at the same time (a
 * replay) or holds the same content. The version before is closed at its `updated_at`; the new
 * one ends where the next begins.
 */
export const placeLate = (table: AnyTable): string => {
  const h = `crm_history.${quote(table.table)}`
  return `WITH s AS (
  SELECT i.*, md5(i."raw"::text) AS hash FROM (${recordInput(Object.entries(table.columns))}) AS i
  WHERE i."updated_at" IS NOT NULL
),
todo AS (
  SELECT s.*, p."valid_from" AS p_from, n."valid_from" AS n_from
  FROM s
  LEFT JOIN LATERAL (
    SELECT v."valid_from", v."content_hash", v."deleted" FROM ${h} AS v
    WHERE v."id" = s."id" AND v."valid_from" <= s."updated_at" ORDER BY v."valid_from" DESC LIMIT 1
  ) AS p ON true
  JOIN LATERAL (
    SELECT v."valid_from" FROM ${h} AS v
    WHERE v."id" = s."id" AND v."valid_from" > s."updated_at" ORDER BY v."valid_from" LIMIT 1
  ) AS n ON true
  WHERE p."valid_from" IS NULL
     OR (p."valid_from" < s."updated_at" AND (p."deleted" OR p."content_hash" IS DISTINCT FROM s.hash))
),
closed AS (
  UPDATE ${h} AS v SET "valid_to" = todo."updated_at"
  FROM todo WHERE v."id" = todo."id" AND v."valid_from" = todo.p_from
  RETURNING v."id"
)
INSERT INTO ${h} (${insertColumns(table)})
SELECT todo."id", todo."updated_at", todo.n_from, false, false, ${recordValues(table, "todo")}, todo.hash, $2::text::crm.sync_source, now()
FROM todo ORDER BY todo."id"`
}

/** The statements of a table, built once (the tables never change). */
const held = new Map<string, string>()
const statement = (kind: "follow" | "placeLate", table: AnyTable) => {
  const key = `${kind}:${table.table}`
  let text = held.get(key)
  if (text === undefined) held.set(key, (text = kind === "follow" ? follow(table) : placeLate(table)))
  return text
}

/** Whether `resource` keeps a history under the settings given. */
export const keeps = (settings: { readonly resources: ReadonlySet<Resource> }, resource: Resource): boolean =>
  settings.resources.has(resource) && isHistoryResource(resource)

/** `follow` for the ids written; returns the ids written into a deleted row (see `follow`). */
export const followRows = Effect.fnUntraced(function* (
  sql: SqlClient,
  resource: HistoryResource,
  ids: ReadonlyArray<string>,
  source: Source
) {
  if (ids.length === 0) return [] as ReadonlyArray<string>
  const rows = yield* sql.unsafe<{ id: string }>(statement("follow", Tables[resource] as AnyTable), [ids, source])
  return rows.map((row) => row.id)
})

/**
 * `placeLate` for snapshots the current table refused: in rounds of one snapshot per id (several
 * of one id in a batch), oldest first.
 */
export const placeLateSnapshots = Effect.fnUntraced(function* (
  sql: SqlClient,
  resource: HistoryResource,
  items: ReadonlyArray<Decoded>,
  source: Source
) {
  const rounds: Array<Array<Decoded>> = []
  const seen = new Map<string, number>()
  for (const item of items) {
    const round = seen.get(item.id) ?? 0
    seen.set(item.id, round + 1)
    ;(rounds[round] ??= []).push(item)
  }
  for (const round of rounds) {
    const rows = `[${round
      .toSorted((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
      .map((item) => item.json)
      .join(",")}]`
    yield* sql.unsafe(statement("placeLate", Tables[resource] as AnyTable), [rows, source])
  }
})

/** Versions deleted by one statement of `prune`: a large backlog never holds one long delete. */
const PRUNE_SLICE = 5000

/**
 * Deletes the versions that ended (`valid_to`) longer than `retention` ago, every history table,
 * a slice at a time (as the job history is pruned). The chains stay whole: what remains of one
 * starts with the version that was valid at the cut.
 */
export const prune = (sql: SqlClient) =>
  Effect.fn("Warehouse.pruneHistory")(function* (retention: Duration.Duration) {
    let total = 0
    for (const resource of HistoryResources) {
      const h = `crm_history.${quote(resource)}`
      while (true) {
        const [row] = yield* sql.unsafe<{ n: number }>(
          `WITH gone AS (
  DELETE FROM ${h} WHERE ctid IN (
    SELECT ctid FROM ${h}
    WHERE "valid_to" IS NOT NULL AND "valid_to" < now() - $1::float8 * interval '1 millisecond'
    ORDER BY "valid_to" LIMIT ${PRUNE_SLICE})
  RETURNING 1)
SELECT count(*)::int AS n FROM gone`,
          [Duration.toMillis(retention)]
        )
        const deleted = row?.n ?? 0
        total += deleted
        if (deleted < PRUNE_SLICE) break
      }
    }
    return total
  })

/** Below this many versions (PostgreSQL's estimate) a table's versions are counted exactly. */
const COUNTED_UP_TO = 100_000

/**
 * Each history table's versions (exact up to COUNTED_UP_TO, then PostgreSQL's estimate, so that
 * the status page stays cheap on a large history) and how many were written in the last day.
 */
export const historyStats = Effect.gen(function* () {
  const sql = yield* SqlClient
  const stats: Array<{ resource: HistoryResource; versions: number; last_day: number }> = []
  for (const resource of HistoryResources) {
    const h = `crm_history.${quote(resource)}`
    const [row] = yield* sql.unsafe<{ estimate: number; last_day: number }>(
      `SELECT (SELECT reltuples FROM pg_class WHERE oid = '${h}'::regclass)::float8 AS estimate,
  (SELECT count(*)::int FROM ${h} WHERE "synced_at" > now() - interval '1 day') AS last_day`
    )
    const estimate = row?.estimate ?? -1
    const versions =
      estimate >= 0 && estimate > COUNTED_UP_TO
        ? Math.round(estimate)
        : ((yield* sql.unsafe<{ n: number }>(`SELECT count(*)::int AS n FROM ${h}`))[0]?.n ?? 0)
    stats.push({ resource, versions, last_day: row?.last_day ?? 0 })
  }
  return stats
})
