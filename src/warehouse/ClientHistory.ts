/**
 * ClientHistory: a late client delivery placed in the middle of `crm_history.clients`
 * (docs/history.md). A client has no snapshot to place (ClientWrites.ts merges it field by field),
 * so a `client.updated` signed at T before the client's latest version began is merged into the
 * chain as the row merges it, as though it had come in order:
 * - a version at T: the version valid at T with the delivery merged in (its fields never had
 *   filled, each named field written when T is not older than the version's time for it);
 * - every version after T gets the same merge by its own field times (`field_signed_at`, kept per
 *   version; the current one by its row's), so a field a later delivery named keeps its value;
 * - a version that now repeats the one before it is merged into that one (so the version the
 *   row's update trigger began for the delivery, the row, goes into the one it followed: that one
 *   leaves `crm_history.clients_ended` and the row's `version_from` moves back to its start).
 * The current version is the row, which the write already merged; only the ended versions are
 * rewritten. It runs after the batch's write (ClientWrites.writeClients), in its transaction, which
 * holds the clients' rows: no other writer moves their chains meanwhile. A delivery older than
 * every version, or signed while the client was deleted, is not placed (the row took it).
 */
import * as Effect from "effect/Effect"
import type { SqlClient } from "effect/sql/SqlClient"
import { Tables, type Source } from "./Tables.ts"

/** A decoded client delivery (ClientWrites.DecodedClient). */
export interface ClientDeliveryRow {
  readonly id: string
  readonly raw: Readonly<Record<string, unknown>>
  readonly signedAt: string | null
  readonly changedFields: ReadonlyArray<string> | null
}

const quote = (identifier: string) => `"${identifier}"`

/** Every version (the view); the ended ones (a table) and the current one (the row) are written apart. */
const h = `crm_history."clients"`
const ended = `crm_history."clients_ended"`

/** The latest version of `d."id"`, as `c`. */
const latestVersion = `LATERAL (SELECT v."valid_from" FROM ${h} AS v WHERE v."id" = d."id" ORDER BY v."valid_from" DESC LIMIT 1) AS c`

const typed = Object.entries(Tables.clients.columns)
const typedNames = typed.map(([name]) => quote(name)).join(", ")
/** The typed columns of a client read from its `raw`, as `x`. */
const typedRecord = (raw: string) =>
  `jsonb_to_record(${raw}) AS x(${typed.map(([name, type]) => `${quote(name)} ${type}`).join(", ")})`

/** `a` and `b` (field times, jsonb objects), each field with the later of its two times. */
const laterTimes = (a: string, b: string) =>
  `(SELECT jsonb_object_agg(g.key, g.value) FROM (SELECT DISTINCT ON (u.key) u.key, u.value FROM (` +
  `SELECT e.key, e.value FROM jsonb_each(COALESCE(${a}, '{}'::jsonb)) AS e UNION ALL ` +
  `SELECT e.key, e.value FROM jsonb_each(COALESCE(${b}, '{}'::jsonb)) AS e) AS u ` +
  `ORDER BY u.key, (u.value #>> '{}')::timestamptz DESC) AS g)`

/** The named fields of delivery `l` that version `m` takes: those it holds from no later than T. */
const takenFields = (value: string) =>
  `(SELECT jsonb_object_agg(e.key, ${value}) FROM jsonb_each(l."named") AS e WHERE ` +
  `m.held -> e.key IS NULL OR (m.held ->> e.key)::timestamptz <= l.t)`

/**
 * `$1` a jsonb array of `{id, signed_at, raw, named}` (at most one per id; `named` the fields the
 * delivery names, with their values), `$2` the source. Places each delivery that is late (signed
 * before its client's latest version began, after a version that is no tombstone): see the module
 * comment. Versions are rewritten only where they change.
 */
export const placeLateClients = `WITH d AS (
  SELECT x."id", x."signed_at", x."signed_at"::timestamptz AS t, x."raw", x."named"
  FROM jsonb_to_recordset($1::jsonb) AS x("id" text, "signed_at" text, "raw" jsonb, "named" jsonb)
),
l AS (
  SELECT d.*, p."valid_from" AS p_from
  FROM d
  JOIN ${latestVersion} ON c."valid_from" > d.t
  JOIN LATERAL (
    SELECT v."valid_from", v."deleted" FROM ${h} AS v
    WHERE v."id" = d."id" AND v."valid_from" <= d.t ORDER BY v."valid_from" DESC LIMIT 1
  ) AS p ON NOT p."deleted"
),
-- The version valid at T and those after it, and a new one at T (from it) unless one starts at T;
-- "held": the field times a version is merged by (the current one's with its row's).
chain AS (
  SELECT v."id", v."valid_from", true AS stored, v."valid_from" >= l.t AS merged, v."deleted", v."raw",
    v."content_hash", v."field_signed_at", v."updated_at", v."valid_to", v."is_current",
    CASE WHEN v."is_current" THEN ${laterTimes(`v."field_signed_at"`, `r."field_signed_at"`)} ELSE v."field_signed_at" END AS held
  FROM l JOIN ${h} AS v ON v."id" = l."id" AND v."valid_from" >= l.p_from
  LEFT JOIN crm."clients" AS r ON r."id" = v."id" AND v."is_current"
  UNION ALL
  SELECT v."id", l.t, false, true, false, v."raw", NULL, v."field_signed_at", v."updated_at", NULL, false,
    v."field_signed_at"
  FROM l JOIN ${h} AS v ON v."id" = l."id" AND v."valid_from" = l.p_from
  WHERE l.p_from < l.t
),
result AS (
  SELECT m."id", m."valid_from", m.stored, m."deleted", m."content_hash" AS old_hash, m."valid_to" AS old_to,
    m."is_current" AS old_current, m."field_signed_at" AS old_times,
    CASE WHEN m.merged THEN l."raw" || m."raw" || COALESCE(${takenFields("e.value")}, '{}'::jsonb) ELSE m."raw" END AS "raw",
    CASE WHEN m.merged THEN COALESCE(m.held, '{}'::jsonb) || COALESCE(${takenFields(`to_jsonb(l."signed_at")`)}, '{}'::jsonb)
      ELSE m."field_signed_at" END AS "field_signed_at",
    CASE WHEN m.merged THEN GREATEST(m."updated_at", l.t) ELSE m."updated_at" END AS "updated_at"
  FROM chain AS m JOIN l ON l."id" = m."id"
),
hashed AS (
  SELECT result.*, md5(result."raw"::text) AS hash FROM result
),
-- A version repeating the one before it (content and deletion) is merged into that one.
ranked AS (
  SELECT hashed.*, lag(hash) OVER w AS previous_hash, lag("deleted") OVER w AS previous_deleted
  FROM hashed WINDOW w AS (PARTITION BY "id" ORDER BY "valid_from")
),
kept AS (
  SELECT ranked.*, lead("valid_from") OVER (PARTITION BY "id" ORDER BY "valid_from") AS new_to
  FROM ranked WHERE previous_hash IS NULL OR previous_hash <> hash OR previous_deleted <> "deleted"
),
dropped AS (
  DELETE FROM ${ended} AS v USING ranked
  WHERE ranked.stored AND NOT ranked.old_current AND v."id" = ranked."id" AND v."valid_from" = ranked."valid_from"
    AND ranked.previous_hash = ranked.hash AND ranked.previous_deleted = ranked."deleted"
  RETURNING v."id"
),
rewritten AS (
  UPDATE ${ended} AS v SET
    ("raw", "content_hash", ${typedNames}) = (SELECT k."raw", k.hash, x.* FROM ${typedRecord(`k."raw"`)}),
    "field_signed_at" = k."field_signed_at",
    "updated_at" = k."updated_at",
    "valid_to" = k.new_to,
    "synced_at" = CASE WHEN k.hash IS DISTINCT FROM k.old_hash THEN now() ELSE v."synced_at" END
  FROM kept AS k
  WHERE k.stored AND NOT k.old_current AND k.new_to IS NOT NULL AND v."id" = k."id" AND v."valid_from" = k."valid_from"
    AND (k.hash IS DISTINCT FROM k.old_hash OR k."field_signed_at" IS DISTINCT FROM k.old_times
      OR k.new_to IS DISTINCT FROM k.old_to)
  RETURNING v."id"
),
-- The row became a repeat of the version before it: that version is the row's now (it leaves the
-- ended ones, and the row's version begins where it began).
promoted AS (
  DELETE FROM ${ended} AS v USING kept AS k
  WHERE k.stored AND NOT k.old_current AND k.new_to IS NULL AND v."id" = k."id" AND v."valid_from" = k."valid_from"
  RETURNING v."id"
),
moved AS (
  UPDATE crm."clients" AS r SET "version_from" = k."valid_from"
  FROM kept AS k
  WHERE k.new_to IS NULL AND NOT k.old_current AND r."id" = k."id"
  RETURNING r."id"
)
INSERT INTO ${ended} ("id", "valid_from", "valid_to", "deleted", ${typedNames}, "updated_at", "raw",
  "content_hash", "field_signed_at", "source", "synced_at")
SELECT k."id", k."valid_from", k.new_to, false, x.*, k."updated_at", k."raw", k.hash,
  k."field_signed_at", $2::text::crm.sync_source, now()
FROM kept AS k, ${typedRecord(`k."raw"`)}
WHERE NOT k.stored AND k.new_to IS NOT NULL
ORDER BY k."id"`

/** The fields a delivery names that its record carries (never `id`), with their values. */
const namedFields = (delivery: ClientDeliveryRow) => {
  const named: Record<string, unknown> = {}
  for (const field of delivery.changedFields ?? []) {
    if (field !== "id" && Object.hasOwn(delivery.raw, field)) named[field] = delivery.raw[field]
  }
  return named
}

/**
 * Places the late `client.updated` deliveries of a batch (see the module comment), after its write.
 * `written` is the write's outcome per client: a delivery is a candidate when its
 * client's row stands for a later time (`known_until`) or did not change (a replay, or a delivery
 * all of whose fields were named later); the statement runs only when there is one. Several late
 * deliveries of one client go in rounds, oldest first.
 */
export const placeLateDeliveries = Effect.fnUntraced(function* (
  sql: SqlClient,
  deliveries: ReadonlyArray<ClientDeliveryRow>,
  written: ReadonlyArray<{ readonly id: string; readonly known_until: number | null }>,
  source: Source
) {
  const knownUntil = new Map(written.map(({ id, known_until }) => [id, known_until]))
  const late = deliveries.flatMap((delivery) => {
    if (delivery.signedAt === null) return []
    const known = knownUntil.get(delivery.id)
    if (known !== null && known !== undefined && Date.parse(delivery.signedAt) >= known) return []
    const named = namedFields(delivery)
    return Object.keys(named).length === 0 ? [] : [{ delivery, signedAt: delivery.signedAt, named }]
  })
  const rounds: Array<Array<(typeof late)[number]>> = []
  const seen = new Map<string, number>()
  for (const item of late.toSorted((a, b) => Date.parse(a.signedAt) - Date.parse(b.signedAt))) {
    const round = seen.get(item.delivery.id) ?? 0
    seen.set(item.delivery.id, round + 1)
    ;(rounds[round] ??= []).push(item)
  }
  for (const round of rounds) {
    const rows = round
      .toSorted((a, b) => (a.delivery.id < b.delivery.id ? -1 : a.delivery.id > b.delivery.id ? 1 : 0))
      .map(({ delivery, signedAt, named }) => ({ id: delivery.id, signed_at: signedAt, raw: delivery.raw, named }))
    yield* sql.unsafe(placeLateClients, [JSON.stringify(rows), source])
  }
})
