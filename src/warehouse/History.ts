/**
 * History: the versions of schema `crm_history` (migrations 0025 and 0028, docs/history.md). One
 * view per resource of `HistoryResources`, type 2: `[valid_from, valid_to)` by the record's
 * `updated_at` (the CRM's clock), the latest `is_current`, a tombstone `deleted`. The current
 * version is the row of `crm.<table>` itself (its start in `version_from`); the versions that
 * ended are in `crm_history.<table>_ended`, written by the row's update trigger (migration 0028) in
 * the same statement as the update: when the row's content or its deletion changes, the version it
 * held ends there and the next begins, after the one before (by a microsecond where the clocks
 * say otherwise), so a chain has no gap or overlap. A replay or a re-read changes no row, and adds
 * nothing. This module writes what the trigger cannot know:
 * - `placeLate`: a snapshot the forward-only guard refused (older than the row), or written into a
 *   deleted row, is put into the middle of the chain, between the versions before and after its
 *   `updated_at`, when its content is new there. Clients have no snapshot to place:
 *   ClientHistory.ts merges their late deliveries.
 * - `writeSettings`: which resources keep their ended versions (config `history.resources`).
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

/** The columns of a version in `crm_history.<table>_ended`, as the trigger writes them. */
const endedColumns = (table: AnyTable) => {
  const { typed, lists } = versionColumns(table)
  const record = [...typed.map(([name]) => name), ...lists, "updated_at", "raw"]
  return ["id", "valid_from", "valid_to", "deleted", ...record, "content_hash", "source", "synced_at"]
    .map(quote)
    .join(", ")
}

/** The record's columns of a version, read from a row `alias` (of the input). */
const recordValues = (table: AnyTable, alias: string) => {
  const { typed, lists } = versionColumns(table)
  return [
    ...typed.map(([name]) => `${alias}.${quote(name)}`),
    ...lists.map((list) => `${alias}."raw" -> '${list}'`),
    `${alias}."updated_at"`,
    `${alias}."raw"`
  ].join(", ")
}

/**
 * `$1` a jsonb array of snapshots as `upsertRecords` takes them (`{id, updated_at, raw, typed?}`,
 * at most one per id), `$2` the source: each snapshot older than the version its row holds goes
 * between the version before its `updated_at` and the one after, unless that version starts at the
 * same time (a replay) or holds the same content. The version before (an ended one: a later one
 * exists) now ends at the snapshot's `updated_at`; the new one ends where the next begins.
 */
export const placeLate = (table: AnyTable): string => {
  const h = `crm_history.${quote(table.table)}`
  const ended = `crm_history.${quote(`${table.table}_ended`)}`
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
  UPDATE ${ended} AS v SET "valid_to" = todo."updated_at"
  FROM todo WHERE v."id" = todo."id" AND v."valid_from" = todo.p_from
  RETURNING v."id"
)
INSERT INTO ${ended} (${endedColumns(table)})
SELECT todo."id", todo."updated_at", todo.n_from, false, ${recordValues(table, "todo")}, todo.hash, $2::text::crm.sync_source, now()
FROM todo ORDER BY todo."id"`
}

/** The statements of a table, built once (the tables never change). */
const held = new Map<string, string>()
const statement = (table: AnyTable) => {
  let text = held.get(table.table)
  if (text === undefined) held.set(table.table, (text = placeLate(table)))
  return text
}

/** Whether `resource` keeps a history under the settings given. */
export const keeps = (settings: { readonly resources: ReadonlySet<Resource> }, resource: Resource): boolean =>
  settings.resources.has(resource) && isHistoryResource(resource)

/**
 * Writes which resources keep their ended versions into `crm_sync.history_settings`, which the
 * rows' update triggers read (migration 0028): the settings of the command that started last.
 */
export const writeSettings = (sql: SqlClient, settings: { readonly resources: ReadonlySet<Resource> }) =>
  sql.unsafe(
    `INSERT INTO crm_sync.history_settings (resource, kept)
SELECT * FROM unnest($1::text[], $2::boolean[])
ON CONFLICT (resource) DO UPDATE SET kept = excluded.kept WHERE crm_sync.history_settings.kept <> excluded.kept`,
    [HistoryResources as ReadonlyArray<string>, HistoryResources.map((resource) => keeps(settings, resource))]
  )

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
    yield* sql.unsafe(statement(Tables[resource] as AnyTable), [rows, source])
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
      const h = `crm_history.${quote(`${resource}_ended`)}`
      while (true) {
        const [row] = yield* sql.unsafe<{ n: number }>(
          `WITH gone AS (
  DELETE FROM ${h} WHERE ctid IN (
    SELECT ctid FROM ${h}
    WHERE coalesce("valid_to", 'infinity'::timestamptz) < now() - $1::float8 * interval '1 millisecond'
    LIMIT ${PRUNE_SLICE})
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

/** Below this many rows (PostgreSQL's estimate) a table's rows are counted exactly. */
const COUNTED_UP_TO = 100_000

/** The rows of `table`: exact up to COUNTED_UP_TO, then PostgreSQL's estimate. */
const rowsOf = Effect.fnUntraced(function* (sql: SqlClient, table: string) {
  const [row] = yield* sql.unsafe<{ estimate: number }>(
    `SELECT reltuples::float8 AS estimate FROM pg_class WHERE oid = '${table}'::regclass`
  )
  const estimate = row?.estimate ?? -1
  if (estimate > COUNTED_UP_TO) return Math.round(estimate)
  return (yield* sql.unsafe<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`))[0]?.n ?? 0
})

/**
 * Each history's versions (its ended ones and its current rows; estimates beyond COUNTED_UP_TO, so
 * that the status page stays cheap on a large history) and how many ended in the last day (by
 * `valid_to`, the CRM's clock): the history's growth (each change ends one version).
 */
export const historyStats = Effect.gen(function* () {
  const sql = yield* SqlClient
  const stats: Array<{ resource: HistoryResource; versions: number; last_day: number }> = []
  for (const resource of HistoryResources) {
    const ended = `crm_history.${quote(`${resource}_ended`)}`
    const [row] = yield* sql.unsafe<{ last_day: number }>(
      `SELECT count(*)::int AS last_day FROM ${ended}
WHERE coalesce("valid_to", 'infinity'::timestamptz) > now() - interval '1 day'`
    )
    const versions = (yield* rowsOf(sql, ended)) + (yield* rowsOf(sql, `crm.${quote(resource)}`))
    stats.push({ resource, versions, last_day: row?.last_day ?? 0 })
  }
  return stats
})
