/**
 * TranscriptWrites: how meeting transcripts are written, ordered and retired. A transcript
 * response carries no `updated_at` (spec §2.6), and two reads of one meeting's transcript can
 * commit in either order (two batches at once, replicas), so each read is stamped with the
 * database's clock when it starts (`readStarted`, one clock for every process) and that stamp is
 * the row's `updated_at`: the forward-only guard (BatchSql.ts) then keeps the read that started
 * last, whichever commits last. A read that answers no transcript (null: none, or hidden), or a
 * 404, retires the stored one; so does the deletion of its meeting (`markDeleted("meetings")`
 * cascades here). A retired transcript is marked deleted with its text removed: `raw` is emptied
 * and its segments deleted, since a transcript holds what a client said. A meeting with no stored
 * transcript gets a tombstone, so a read started before the retirement cannot bring one back.
 */
import * as Effect from "effect/Effect"
import type { SqlClient } from "effect/sql/SqlClient"
import { isObject } from "./Rows.ts"
import type { Source } from "./Tables.ts"
import type { TranscriptRead, UpsertResult } from "./WarehouseTypes.ts"
import { toWarehouseError, type WarehouseError } from "./WarehouseError.ts"

/**
 * `$1` a jsonb array of `{id, at}` (`at` null: the statement's own clock), `$2` the source. A live
 * row not stamped later than `at` becomes a retired one stamped `at` (a repeat changes nothing); an
 * unknown id gets a tombstone; the segments of the retired rows are deleted. Ids in one order, so
 * two writers cannot deadlock.
 */
const retire = `WITH input AS (
  SELECT DISTINCT ON (r."id") r."id", COALESCE(r."at", clock_timestamp()) AS "at"
  FROM jsonb_to_recordset($1::jsonb) AS r("id" text, "at" timestamptz)
  ORDER BY r."id", r."at" DESC NULLS FIRST
),
retired AS (
  INSERT INTO crm."meeting_transcripts" AS t ("id", "has_transcript", "updated_at", "deleted_at", "source", "synced_at")
  SELECT "id", false, "at", "at", $2::text, now() FROM input ORDER BY "id"
  ON CONFLICT ("id") DO UPDATE SET
    "has_transcript" = false,
    "raw" = NULL,
    "updated_at" = excluded."updated_at",
    "deleted_at" = excluded."deleted_at",
    "source" = excluded."source",
    "synced_at" = excluded."synced_at"
  WHERE t."deleted_at" IS NULL AND (t."updated_at" IS NULL OR t."updated_at" <= excluded."updated_at")
  RETURNING t."id", (t.xmax = 0) AS inserted
),
segments AS (
  DELETE FROM crm."meeting_transcript_segments" AS s USING retired AS r WHERE s."meeting_id" = r."id"
)
SELECT (count(*) FILTER (WHERE NOT inserted))::int AS retired FROM retired`

/** `$1` a jsonb array of `{id, raw}`: how many are stored live with the same response (jsonb equality). */
const sameAsStored = `SELECT count(*)::int AS n FROM jsonb_to_recordset($1::jsonb) AS r("id" text, "raw" jsonb)
JOIN crm."meeting_transcripts" AS t ON t."id" = r."id"
WHERE t."deleted_at" IS NULL AND t."raw" = r."raw"`

/** The database's clock, ISO 8601 with microseconds (UTC). */
export const readStarted = (sql: SqlClient) =>
  sql<{ at: string }>`
    SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at`.pipe(
    Effect.map((rows) => rows[0]!.at),
    Effect.mapError(toWarehouseError("readStarted", "meeting_transcripts"))
  )

/** Retires the transcripts of `meetings` at `at` (null: now, by the database's clock); returns how many were live. */
export const retireTranscripts = (sql: SqlClient) =>
  Effect.fn("Warehouse.retireTranscripts")(
    function* (meetings: ReadonlyArray<{ readonly id: string; readonly at: string | null }>, source: Source) {
      if (meetings.length === 0) return 0
      const [row] = yield* sql.unsafe<{ retired: number }>(retire, [JSON.stringify(meetings), source])
      return row?.retired ?? 0
    },
    Effect.mapError(toWarehouseError("retireTranscripts", "meeting_transcripts"))
  )

/**
 * A deletion of meetings, and the retirement of their transcripts (at the database's clock: after
 * any read already started), in one transaction: a deleted meeting never keeps a live transcript.
 */
export const withTranscriptsRetired = <A>(
  sql: SqlClient,
  retireAll: ReturnType<typeof retireTranscripts>,
  deletion: Effect.Effect<A, WarehouseError>,
  meetingIds: ReadonlyArray<string>,
  source: Source
): Effect.Effect<A, WarehouseError> =>
  sql
    .withTransaction(
      Effect.tap(deletion, () =>
        retireAll(
          meetingIds.map((id) => ({ id, at: null })),
          source
        )
      )
    )
    .pipe(Effect.catchTag("SqlError", (error) => Effect.fail(toWarehouseError("markDeleted", "meetings")(error))))

/** Whether a read found no transcript to keep: a 404 (no response), or a response whose `transcript` is null. */
const foundNone = (read: TranscriptRead) =>
  read.raw === undefined || (isObject(read.raw) && read.raw.transcript === null)

/**
 * Writes transcript reads: those with a transcript are upserted, ordered by the time their read
 * started; those without retire the stored one, in the same order. Returns the transcripts whose
 * text changed (`written`; a read identical to the stored one still moves its stamp on) and
 * those retired.
 */
export const writeTranscripts =
  (
    sql: SqlClient,
    upsert: (
      records: ReadonlyArray<unknown>,
      orderedAt: ReadonlyArray<string>,
      source: Source
    ) => Effect.Effect<UpsertResult, WarehouseError>,
    retireAll: ReturnType<typeof retireTranscripts>
  ) =>
  (reads: ReadonlyArray<TranscriptRead>, source: Source) =>
    Effect.gen(function* () {
      const present = reads.filter((read) => !foundNone(read))
      const absent = reads.filter(foundNone)
      let written = 0
      if (present.length > 0) {
        const [same] = yield* sql
          .unsafe<{ n: number }>(sameAsStored, [
            JSON.stringify(present.map((read) => ({ id: read.meetingId, raw: read.raw })))
          ])
          .pipe(Effect.mapError(toWarehouseError("writeTranscripts", "meeting_transcripts")))
        const counts = yield* upsert(
          present.map((read) => read.raw),
          present.map((read) => read.readAt),
          source
        )
        written = Math.max(0, counts.inserted + counts.updated - (same?.n ?? 0))
      }
      const retired = yield* retireAll(
        absent.map((read) => ({ id: read.meetingId, at: read.readAt })),
        source
      )
      return { written, retired }
    })
