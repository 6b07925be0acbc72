/**
 * The migration that brings transcripts stored before retirement existed in line: the transcript of
 * a meeting already deleted, and one stored from a read that answered null, leave
 * `crm.current_meeting_transcripts` with their text; a live meeting's transcript stays as it was.
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { migrateUpTo } from "../support/MigrationSteps.ts"
import { EmptyTestDatabase } from "../support/TestDatabase.ts"

layer(EmptyTestDatabase, { timeout: 60_000 })("the transcripts migration", (it) => {
  it.effect("retires the transcripts of deleted meetings and of null reads, text included", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const migration = yield* migrateUpTo("_transcripts_retired.sql")

      yield* sql`
        INSERT INTO crm.meetings (id, deleted_at, source, raw) VALUES
          ('mtg_gone', now(), 'webhook', '{}'), ('mtg_live', NULL, 'webhook', '{}'), ('mtg_none', NULL, 'webhook', '{}')`
      yield* sql`
        INSERT INTO crm.meeting_transcripts (id, has_transcript, source, raw) VALUES
          ('mtg_gone', true, 'webhook', '{"meeting_id": "mtg_gone", "transcript": [{"text": "said"}]}'),
          ('mtg_live', true, 'webhook', '{"meeting_id": "mtg_live", "transcript": [{"text": "said"}]}'),
          ('mtg_none', false, 'webhook', '{"meeting_id": "mtg_none", "transcript": null}')`
      yield* sql`
        INSERT INTO crm.meeting_transcript_segments (meeting_id, ordinal, text) VALUES
          ('mtg_gone', 0, 'said'), ('mtg_live', 0, 'said')`

      yield* migration.applyIt

      const live = yield* sql<{ id: string }>`SELECT id FROM crm.current_meeting_transcripts ORDER BY id`
      assert.deepStrictEqual(
        live.map((row) => row.id),
        ["mtg_live"]
      )
      const segments = yield* sql<{ meeting_id: string }>`
        SELECT meeting_id FROM crm.meeting_transcript_segments ORDER BY meeting_id`
      assert.deepStrictEqual(
        segments.map((row) => row.meeting_id),
        ["mtg_live"]
      )
      const retired = yield* sql<{ id: string; raw: unknown; has_transcript: boolean }>`
        SELECT id, raw, has_transcript FROM crm.meeting_transcripts WHERE deleted_at IS NOT NULL ORDER BY id`
      assert.deepStrictEqual(retired, [
        { id: "mtg_gone", raw: null, has_transcript: false },
        { id: "mtg_none", raw: null, has_transcript: false }
      ])
    })
  )
})
