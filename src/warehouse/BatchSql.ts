/**
 * The SQL text of the warehouse's batch writes, generated once per table from its descriptor
 * (`Tables.ts`). Every statement takes a whole batch as one `jsonb` array parameter and unpacks it
 * with `jsonb_to_recordset`, so a batch of any size is one round trip and one cached prepared
 * statement per table. Identifiers come from the descriptors (constants), never from input, and
 * are quoted (`references` is a reserved word).
 *
 * The forward-only rule (docs/architecture.md, rule 3) for `record` tables:
 * - an incoming snapshot is written when the stored `updated_at` is NULL or not newer than the
 *   incoming one, and the snapshot differs (different `updated_at`, or the same `updated_at` with
 *   a different `raw`): an older snapshot never overwrites a newer one, and an equal, identical one
 *   is a no-op (the row, `synced_at` included, is untouched);
 * - a stored row whose `updated_at` is set is never replaced by a snapshot without one;
 * - a deleted row (`deleted_at` set) stays deleted unless the snapshot's `updated_at` is after
 *   `deleted_at`: a late snapshot never resurrects a record; a newer one means it came back.
 */
import type { ChildTable, PgType, TableDescriptor } from "./Tables.ts"

const quote = (identifier: string) => `"${identifier}"`

type ColumnList = ReadonlyArray<readonly [string, PgType]>

const recordset = (columns: ColumnList) =>
  `jsonb_to_recordset($1::jsonb) AS r(${columns.map(([name, type]) => `${quote(name)} ${type}`).join(", ")})`

const names = (columns: ColumnList) => columns.map(([name]) => quote(name)).join(", ")

/** A string constant from a descriptor (never input), as an SQL literal. */
const literal = (value: string) => `'${value.replaceAll("'", "''")}'`

/** The outcome of one record of a batch, as the upsert statements report it. */
export type WriteOutcome = "inserted" | "updated" | "unchanged" | "skipped"

/**
 * The rows of a `record` batch: `$1` a jsonb array of `{id, updated_at, raw, typed?}`. The typed
 * columns are read from `raw` itself, with `typed` laid over it: `typed` holds only the columns
 * whose decoded value is not the received one (a list given as null, a computed column), so the
 * record is sent and parsed once instead of twice. `jsonb_to_record` converts each value exactly
 * as `jsonb_to_recordset` would have from a row of its own.
 */
export const recordInput = (typed: ColumnList): string => {
  const base = `jsonb_to_recordset($1::jsonb) AS r("id" text, "updated_at" timestamptz, "raw" jsonb, "typed" jsonb)`
  if (typed.length === 0) return `SELECT r."id", r."updated_at", r."raw" FROM ${base}`
  const merged = `CASE WHEN r."typed" IS NULL THEN r."raw" ELSE r."raw" || r."typed" END`
  const record = `jsonb_to_record(${merged}) AS x(${typed.map(([name, type]) => `${quote(name)} ${type}`).join(", ")})`
  return `SELECT r."id", r."updated_at", r."raw", ${typed.map(([name]) => `x.${quote(name)}`).join(", ")}
  FROM ${base}, ${record}`
}

/**
 * The stored `raw` of an upsert: the received object, with the kept-when-absent keys it lacks
 * taken from the stored one (so the next full read of the same version is identical, unchanged).
 */
const keptRaw = (kept: ReadonlyArray<string>): string =>
  kept.reduce(
    (raw, key) =>
      `CASE WHEN excluded."raw" ? ${literal(key)} OR NOT COALESCE(t."raw" ? ${literal(key)}, false) THEN ${raw} ` +
      `ELSE ${raw} || jsonb_build_object(${literal(key)}, t."raw" -> ${literal(key)}) END`,
    `excluded."raw"`
  )

/** The forward-only INSERT … ON CONFLICT of a `record` table, reading CTE `input`, returning what it wrote. */
const writeRecords = (table: TableDescriptor<unknown>): string => {
  const typed: ColumnList = Object.entries(table.columns)
  const columns: ColumnList = [["id", "text"], ["updated_at", "timestamptz"], ["raw", "jsonb"], ...typed]
  const assignments = columns
    .filter(([name]) => name !== "id")
    .map(([name]) =>
      name === "raw"
        ? `"raw" = ${keptRaw(table.keptWhenAbsent)}`
        : table.keptWhenAbsent.includes(name)
          ? `${quote(name)} = CASE WHEN excluded."raw" ? ${literal(name)} THEN excluded.${quote(name)} ELSE t.${quote(name)} END`
          : `${quote(name)} = excluded.${quote(name)}`
    )
  return `INSERT INTO crm.${quote(table.table)} AS t (${names(columns)}, "source", "synced_at")
  SELECT ${names(columns)}, $2::text, now() FROM input
  ON CONFLICT ("id") DO UPDATE SET
    ${assignments.join(",\n    ")},
    "source" = excluded."source",
    "synced_at" = excluded."synced_at",
    "deleted_at" = CASE
      WHEN t."deleted_at" IS NOT NULL AND (excluded."updated_at" IS NULL OR excluded."updated_at" <= t."deleted_at")
      THEN t."deleted_at"
    END
  WHERE (t."updated_at" IS NULL OR t."updated_at" <= excluded."updated_at")
    AND (t."updated_at" IS DISTINCT FROM excluded."updated_at" OR t."raw" IS DISTINCT FROM ${keptRaw(table.keptWhenAbsent)})
  RETURNING t."id", (t.xmax = 0) AS inserted, t."deleted_at" IS NOT NULL AS deleted`
}

/**
 * `$1` a jsonb array of `{id, updated_at, raw, typed?}` (see `recordInput`), `$2` the source.
 * Returns one row per input row: `{id, outcome, changed_lists}`. The final SELECT's join `p` reads
 * the rows as they were before the INSERT (every part of one statement sees the same snapshot),
 * which tells "older, skipped" from "identical, unchanged", and which of the child lists
 * (`raw -> list`) differ from the stored ones: only those child tables need rewriting.
 */
export const upsertRecords = (table: TableDescriptor<unknown>): string => {
  const lists = [...new Set(table.children.map((child) => child.list))]
  const changedLists =
    lists.length === 0
      ? `ARRAY[]::text[]`
      : `array_remove(ARRAY[${lists
          .map(
            (list) =>
              `CASE WHEN p."raw" IS NULL OR p."raw" -> ${literal(list)} IS DISTINCT FROM i."raw" -> ${literal(list)} THEN ${literal(list)} END`
          )
          .join(", ")}], NULL)`
  return `WITH input AS (${recordInput(Object.entries(table.columns))}),
written AS (
  ${writeRecords(table)}
)
SELECT i."id" AS id,
  CASE
    WHEN w."id" IS NOT NULL THEN CASE WHEN w.inserted THEN 'inserted' ELSE 'updated' END
    WHEN p."updated_at" IS NOT NULL AND (i."updated_at" IS NULL OR p."updated_at" > i."updated_at") THEN 'skipped'
    ELSE 'unchanged'
  END AS outcome,
  ${changedLists} AS changed_lists,
  COALESCE(w.deleted, false) AS deleted
FROM input AS i
LEFT JOIN written AS w ON w."id" = i."id"
LEFT JOIN crm.${quote(table.table)} AS p ON p."id" = i."id"`
}

/**
 * The write of `upsertRecords` alone, for tables without child lists: it returns only the rows it
 * wrote (`{id, inserted, deleted}`: `deleted`, written into a row that stays deleted) instead of reading every stored row again to classify the others; the
 * caller asks `classifyUnwritten` about those when there are any (a first crawl has none). About
 * a sixth of the cost of a batch of new records.
 */
export const insertRecords = (table: TableDescriptor<unknown>): string =>
  `WITH input AS (${recordInput(Object.entries(table.columns))})
${writeRecords(table)}`

/**
 * `$1` a jsonb array of `{id, updated_at}`, records the upsert just run did not write: the ids whose
 * stored row is newer (skipped); the others were identical (unchanged).
 */
export const classifyUnwritten = (table: TableDescriptor<unknown>): string =>
  `SELECT i."id" AS id FROM jsonb_to_recordset($1::jsonb) AS i("id" text, "updated_at" timestamptz)
JOIN crm.${quote(table.table)} AS p ON p."id" = i."id"
WHERE p."updated_at" IS NOT NULL AND (i."updated_at" IS NULL OR p."updated_at" > i."updated_at")`

/**
 * `$1` ids (text[]): locks the stored rows of a batch, in one order, before `upsertRecords` runs.
 * The upsert compares each incoming list with the stored one as its statement's snapshot shows
 * it; without the lock a concurrent writer could commit another version in between, and a list
 * judged unchanged would leave that writer's child rows under this writer's record.
 */
export const lockRecords = (table: TableDescriptor<unknown>): string =>
  `SELECT t."id" FROM crm.${quote(table.table)} AS t
JOIN (SELECT DISTINCT unnest($1::text[]) AS "id") AS d ON d."id" = t."id"
ORDER BY t."id"
FOR UPDATE OF t`

/**
 * For `reference` tables (users, teams, households): there is no `updated_at` to order sightings
 * by, and each sighting may know different fields (a book lists a user's id and name, a meeting
 * its email), so a sighting merges: `raw` becomes the stored object with the sighting's keys laid
 * over it, and each typed column keeps its value unless the sighting gives a new one. A sighting
 * that adds nothing leaves the row untouched. `$1` rows of `{id, raw, ...typed}`, `$2` the source.
 */
export const mergeReferences = (table: TableDescriptor<unknown>): string => {
  const typed: ColumnList = Object.entries(table.columns)
  const columns: ColumnList = [["id", "text"], ["raw", "jsonb"], ...typed]
  const t = `crm.${quote(table.table)}`
  const merged = `COALESCE(t."raw", '{}'::jsonb) || COALESCE(excluded."raw", '{}'::jsonb)`
  return `WITH input AS (SELECT * FROM ${recordset(columns)}),
written AS (
  INSERT INTO ${t} AS t (${names(columns)}, "source", "synced_at")
  SELECT ${names(columns)}, $2::text, now() FROM input
  ON CONFLICT ("id") DO UPDATE SET
    ${typed.map(([name]) => `${quote(name)} = COALESCE(excluded.${quote(name)}, t.${quote(name)})`).join(",\n    ")}${typed.length > 0 ? "," : ""}
    "raw" = ${merged},
    "source" = excluded."source",
    "synced_at" = excluded."synced_at"
  WHERE t."raw" IS DISTINCT FROM ${merged}
  RETURNING t."id", (t.xmax = 0) AS inserted
)
SELECT i."id" AS id,
  CASE WHEN w."id" IS NULL THEN 'unchanged' WHEN w.inserted THEN 'inserted' ELSE 'updated' END AS outcome
FROM input AS i
LEFT JOIN written AS w ON w."id" = i."id"`
}

/**
 * `$1` the parent ids (text[]) whose child rows are replaced. A join rather than `= ANY($1)`: in a
 * cached generic plan PostgreSQL cannot hash a parameter array, and a sequential scan testing each
 * row against a thousand ids is quadratic.
 */
export const deleteChildren = (child: ChildTable<unknown>): string =>
  `DELETE FROM crm.${quote(child.table)} AS c USING (SELECT DISTINCT unnest($1::text[]) AS "id") AS d
WHERE c.${quote(child.parentColumn)} = d."id"`

/** `$1` a jsonb array of child rows, each with the parent column. */
export const insertChildren = (child: ChildTable<unknown>): string => {
  const columns: ColumnList = [[child.parentColumn, "text"], ...Object.entries(child.columns)]
  return `INSERT INTO crm.${quote(child.table)} (${names(columns)}) SELECT ${names(columns)} FROM ${recordset(columns)}`
}

/**
 * `$1` ids (text[]), `$2` when the CRM deleted them, `$3` the source. A known row gets
 * `deleted_at` (its data stays); an unknown id gets a tombstone (a row with only `id`,
 * `deleted_at`, `source`), so a snapshot arriving late still finds it deleted. A row already
 * deleted keeps its first `deleted_at`: a repeated delete changes nothing.
 *
 * A record is deleted after every version it had, so `deleted_at` is never before the stored
 * `updated_at` (the CRM's clock): a late copy of a version already stored cannot undo the deletion
 * however far the CRM's clock runs ahead of the time given (a by-id 404 has only ours).
 */
export const markDeleted = (table: TableDescriptor<unknown>): string => {
  const t = `crm.${quote(table.table)}`
  return `WITH input AS (SELECT DISTINCT unnest($1::text[]) AS "id"),
written AS (
  INSERT INTO ${t} AS t ("id", "deleted_at", "source", "synced_at")
  SELECT "id", $2::timestamptz, $3::text, now() FROM input
  ON CONFLICT ("id") DO UPDATE SET
    "deleted_at" = GREATEST(excluded."deleted_at", t."updated_at"),
    "source" = excluded."source",
    "synced_at" = excluded."synced_at"
  WHERE t."deleted_at" IS NULL
  RETURNING (t.xmax = 0) AS inserted
)
SELECT (count(*) FILTER (WHERE inserted))::int AS tombstoned, (count(*) FILTER (WHERE NOT inserted))::int AS deleted
FROM written`
}

/** `$1` ids (text[]), `$2` the source: clears `deleted_at` (a crawl saw the record again). */
export const undelete = (table: TableDescriptor<unknown>): string =>
  `UPDATE crm.${quote(table.table)} AS t SET "deleted_at" = NULL, "source" = $2::text, "synced_at" = now()
FROM (SELECT DISTINCT unnest($1::text[]) AS "id") AS d
WHERE t."id" = d."id" AND t."deleted_at" IS NOT NULL
RETURNING t."id"`

/**
 * `$1` a jsonb array of `{resource, record_id, raw, error}`, `$2` the source. The same record seen
 * again (same resource, same canonical jsonb) counts another occurrence instead of another row;
 * DISTINCT ON keeps two copies in one batch from hitting the same row twice.
 */
export const storeUndecodable = `INSERT INTO crm_sync.undecodable_records AS u (resource, record_id, raw, error, source)
SELECT DISTINCT ON (r.resource, md5(COALESCE(r.raw, 'null'::jsonb)::text))
  r.resource, r.record_id, COALESCE(r.raw, 'null'::jsonb), r.error, $2::text
FROM jsonb_to_recordset($1::jsonb) AS r(resource text, record_id text, raw jsonb, error text)
ON CONFLICT (resource, fingerprint) DO UPDATE SET
  occurrences = u.occurrences + 1,
  last_seen_at = now(),
  record_id = excluded.record_id,
  error = excluded.error,
  source = excluded.source`
