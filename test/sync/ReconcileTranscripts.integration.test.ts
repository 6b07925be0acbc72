/**
 * The by-id reconciliation and transcripts: a transcript that became hidden sends no event
 * (spec §6.4), so a run re-reads the transcript of every meeting that has a stored, live one; a
 * null answer retires it, and a meeting found gone (404) takes its transcript with it. Meetings
 * without a stored transcript cost no transcript read.
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { Sandbox } from "@crm-sync/sandbox"
import { reconcile } from "../../src/sync/Reconciler.ts"
import { Warehouse } from "../../src/warehouse/Warehouse.ts"
import { harness, lastSeq, listAll, requestsSince } from "./harness.ts"

const options = { timeout: 120_000, excludeTestServices: true } as const

/** One record as the sandbox's API serves it (read directly, not through crm-sync). */
const apiRead = Effect.fnUntraced(function* (path: string) {
  const sandbox = yield* Sandbox
  return yield* Effect.promise(() =>
    fetch(`${sandbox.baseUrl}${path}`, {
      headers: { authorization: `Bearer ${sandbox.credentials.personalAccessToken}` }
    }).then((response) => response.json() as Promise<Record<string, unknown>>)
  )
})

/** What an analyst sees of a meeting's transcript: the live row, and how many segments it has. */
const visible = (meetingId: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const [row] = yield* sql<{ live: number; segments: number }>`
      SELECT (SELECT count(*)::int FROM crm.current_meeting_transcripts WHERE id = ${meetingId}) AS live,
             (SELECT count(*)::int FROM crm.meeting_transcript_segments WHERE meeting_id = ${meetingId}) AS segments`
    return row!
  })

const segment = (text: string) => ({
  text,
  participant: { name: "Jordan Lee" },
  start_timestamp: "00:00:01",
  end_timestamp: "00:00:02"
})

layer(harness(), options)("by-id reconciliation of transcripts", (it) => {
  it.effect("a transcript hidden since, or whose meeting is gone, leaves the current view; others stay", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      const warehouse = yield* Warehouse
      const books = new Set((yield* listAll("/v1/books")).map((book) => String(book.id)))
      const meetings = ((yield* sandbox.admin.records("meetings")) as ReadonlyArray<{ id: string; book_id: string }>)
        .filter((meeting) => books.has(meeting.book_id))
        .slice(0, 4)
        .map((meeting) => meeting.id)
      const [hidden, deleted, kept, without] = meetings
      assert.strictEqual(meetings.length, 4)
      // Three meetings with a visible transcript, stored as their transcript_ready left them.
      for (const id of [hidden!, deleted!, kept!]) {
        yield* sandbox.admin.actions.setTranscript(id, { segments: [segment(`said in ${id}`)], visible: true })
      }
      yield* sandbox.admin.actions.setTranscript(without!, { segments: null })
      const snapshots = yield* Effect.forEach(meetings, (id) => apiRead(`/v1/meetings/${id}`))
      yield* warehouse.upsert("meetings", snapshots, { source: "webhook" })
      const transcripts = yield* Effect.forEach([hidden!, deleted!, kept!], (id) =>
        apiRead(`/v1/meetings/${id}/transcript`)
      )
      yield* warehouse.upsert("meeting_transcripts", transcripts, { source: "webhook" })
      for (const id of [hidden!, deleted!, kept!]) assert.deepStrictEqual(yield* visible(id), { live: 1, segments: 1 })

      // Neither change sends an event (spec §6.4: hidden transcripts never trigger one).
      yield* sandbox.admin.actions.setTranscript(hidden!, { visible: false })
      yield* sandbox.admin.actions.deleteMeeting(deleted!)

      const since = yield* lastSeq
      const [report] = yield* reconcile({ connection: "default" })
      assert.strictEqual(report!.status, "complete")
      assert.deepStrictEqual(yield* visible(hidden!), { live: 0, segments: 0 })
      assert.deepStrictEqual(yield* visible(deleted!), { live: 0, segments: 0 })
      assert.deepStrictEqual(yield* visible(kept!), { live: 1, segments: 1 })

      // Transcript reads only for the meetings with a stored, live transcript that still exist.
      const transcriptReads = (yield* requestsSince(since))
        .filter((entry) => entry.path.endsWith("/transcript"))
        .map((entry) => entry.path)
        .toSorted()
      assert.deepStrictEqual(
        transcriptReads,
        [`/v1/meetings/${hidden}/transcript`, `/v1/meetings/${kept}/transcript`].toSorted()
      )

      // Nothing changed since: the next run reads the kept transcript again and repairs nothing.
      const quietSince = yield* lastSeq
      const [quiet] = yield* reconcile({ connection: "default" })
      assert.deepInclude(quiet!.by_id!, { checked: 3, repaired: 0, deleted: 0 })
      assert.deepStrictEqual(
        (yield* requestsSince(quietSince)).filter((entry) => entry.path.endsWith("/transcript")).map((e) => e.path),
        [`/v1/meetings/${kept}/transcript`]
      )
      assert.deepStrictEqual(yield* visible(kept!), { live: 1, segments: 1 })
    })
  )
})
