/**
 * Reconciliation of the resources with no listing (tasks, meetings, notes): rows the warehouse got
 * by webhook are re-read by id. Changes and deletions made while no subscription existed (so no
 * event was ever sent) are repaired and marked deleted; the single-meeting read fills
 * `event_participants`, which a later event snapshot does not erase; a small allowance covers
 * every known id over successive runs, least recently checked first.
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { Sandbox } from "@crm-sync/sandbox"
import { reconcile } from "../../src/sync/Reconciler.ts"
import { renderReports } from "../../src/sync/ReconcileReport.ts"
import { Warehouse } from "../../src/warehouse/Warehouse.ts"
import { harness, listAll } from "./harness.ts"

const options = { timeout: 120_000, excludeTestServices: true } as const

const runOnce = Effect.map(reconcile({ connection: "default" }), (reports) => reports[0]!)

/** One record as the sandbox's API serves it (read directly, not through crm-sync). */
const apiRead = Effect.fnUntraced(function* (path: string) {
  const sandbox = yield* Sandbox
  return yield* Effect.promise(() =>
    fetch(`${sandbox.baseUrl}${path}`, {
      headers: { authorization: `Bearer ${sandbox.credentials.personalAccessToken}` }
    }).then((response) => response.json() as Promise<Record<string, unknown>>)
  )
})

const notePath = (note: { readonly id: string; readonly notable_type: string; readonly notable_id: string }) =>
  `/v1/${note.notable_type.toLowerCase()}s/${note.notable_id}/notes/${note.id}`

/** What an event would have carried: a meeting's snapshot has no participants nor transcript. */
const asEventSnapshot = (meeting: Record<string, unknown>) => {
  const { event_participants: _participants, transcript: _transcript, ...rest } = meeting
  return rest
}

const read = (paths: ReadonlyArray<string>) => Effect.forEach(paths, apiRead)

interface Picked {
  readonly tasks: ReadonlyArray<string>
  readonly meetings: ReadonlyArray<string>
  readonly notes: ReadonlyArray<{ readonly id: string; readonly notable_type: string; readonly notable_id: string }>
}

/** A few tasks, meetings (with participants) and notes of the token's books, stored as events left them. */
const seedFromEvents = (count: number) =>
  Effect.gen(function* () {
    const sandbox = yield* Sandbox
    const warehouse = yield* Warehouse
    const books = new Set((yield* listAll("/v1/books")).map((book) => String(book.id)))
    const inBooks = <A extends { readonly book_id: string }>(rows: ReadonlyArray<unknown>) =>
      (rows as ReadonlyArray<A>).filter((row) => books.has(row.book_id))
    const tasks = inBooks<{ id: string; book_id: string }>(yield* sandbox.admin.records("tasks")).slice(0, count)
    const meetings = inBooks<{ id: string; book_id: string; event_participants: ReadonlyArray<unknown> }>(
      yield* sandbox.admin.records("meetings")
    )
      .filter((meeting) => meeting.event_participants.length > 0)
      .slice(0, count)
    const notes = inBooks<{ id: string; book_id: string; notable_type: string; notable_id: string }>(
      yield* sandbox.admin.records("notes")
    ).slice(0, count)
    assert.strictEqual(tasks.length + meetings.length + notes.length, 3 * count)
    yield* warehouse.upsert("tasks", yield* read(tasks.map((task) => `/v1/tasks/${task.id}`)), { source: "webhook" })
    const meetingSnapshots = yield* read(meetings.map((meeting) => `/v1/meetings/${meeting.id}`))
    yield* warehouse.upsert("meetings", meetingSnapshots.map(asEventSnapshot), { source: "webhook" })
    yield* warehouse.upsert("notes", yield* read(notes.map(notePath)), { source: "webhook" })
    return {
      tasks: tasks.map((task) => task.id),
      meetings: meetings.map((meeting) => meeting.id),
      notes
    } satisfies Picked
  })

const rowOf = (table: string, id: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const [row] = yield* sql.unsafe<{
      status?: string
      content?: string
      event_participants?: unknown
      deleted_at: Date | null
      source: string
    }>(`SELECT * FROM crm."${table}" WHERE id = $1`, [id])
    return row!
  })

layer(harness(), options)("by-id reconciliation", (it) => {
  it.effect("changes and deletions made while no subscription existed are found by reconcile", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      const warehouse = yield* Warehouse
      const picked = yield* seedFromEvents(2)
      // The meeting rows as events left them: no participants.
      assert.isNull((yield* rowOf("meetings", picked.meetings[0]!)).event_participants)

      // No subscription exists, so none of these reaches crm-sync as an event.
      const [changedTask, deletedTask] = picked.tasks
      const [keptMeeting, deletedMeeting] = picked.meetings
      const [changedNote, deletedNote] = picked.notes
      const before = yield* rowOf("tasks", changedTask!)
      const changed =
        before.status === "done"
          ? yield* sandbox.admin.actions.reopenTask(changedTask!)
          : yield* sandbox.admin.actions.completeTask(changedTask!)
      yield* sandbox.admin.actions.deleteTask(deletedTask!)
      yield* sandbox.admin.actions.deleteMeeting(deletedMeeting!)
      yield* sandbox.admin.actions.updateNote(changedNote!.id, { content: "Rewritten while nobody listened." })
      yield* sandbox.admin.actions.deleteNote(deletedNote!.id)

      const report = yield* runOnce
      assert.strictEqual(report.status, "complete")
      assert.deepInclude(report.by_id!, { known: 6, checked: 6, deleted: 3, not_reached: 0, unreadable: 0 })
      // The changed task, the changed note, and the kept meeting (its participants).
      assert.strictEqual(report.by_id!.repaired, 3)

      const task = yield* rowOf("tasks", changedTask!)
      assert.strictEqual(task.status, changed.status)
      assert.strictEqual(task.source, "reconcile")
      assert.isNotNull((yield* rowOf("tasks", deletedTask!)).deleted_at)
      assert.isNotNull((yield* rowOf("meetings", deletedMeeting!)).deleted_at)
      assert.isNotNull((yield* rowOf("notes", deletedNote!.id)).deleted_at)
      assert.strictEqual((yield* rowOf("notes", changedNote!.id)).content, "Rewritten while nobody listened.")
      const meeting = yield* apiRead(`/v1/meetings/${keptMeeting}`)
      assert.deepStrictEqual((yield* rowOf("meetings", keptMeeting!)).event_participants, meeting.event_participants)
      assert.include(renderReports([report]), "tasks, meetings, notes by id: 6 of 6 checked, 3 repaired, 3 deleted")

      // A later event's snapshot (newer, without participants) keeps them.
      yield* sandbox.admin.actions.updateMeeting(keptMeeting!, { title: "Quarterly review, moved" })
      const newer = yield* apiRead(`/v1/meetings/${keptMeeting}`)
      yield* warehouse.upsert("meetings", [asEventSnapshot(newer)], { source: "webhook" })
      const updated = yield* rowOf("meetings", keptMeeting!)
      assert.deepStrictEqual(updated.event_participants, meeting.event_participants)
      assert.strictEqual(updated.source, "webhook")

      // Deleted rows are not read again; the live ones are, and nothing differs now.
      const quiet = yield* runOnce
      assert.deepInclude(quiet.by_id!, { known: 3, checked: 3, repaired: 0, deleted: 0 })
    })
  )

  it.effect("with the CRM's clock 120 s ahead, a by-id 404 is not undone by a late copy of the last version", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      const warehouse = yield* Warehouse
      // The CRM's clock runs two minutes ahead of ours (inside the accepted webhook tolerance).
      yield* sandbox.admin.advanceClock("120 seconds")
      const books = new Set((yield* listAll("/v1/books")).map((book) => String(book.id)))
      const meeting = (yield* sandbox.admin.records("meetings"))
        .map((row) => row as { readonly id: string; readonly book_id: string })
        .filter((row) => books.has(row.book_id))
        .at(-1)!
      // Edited just before its deletion; an earlier run read that version by id.
      yield* sandbox.admin.actions.updateMeeting(meeting.id, { title: "Edited just before its deletion" })
      const read = yield* apiRead(`/v1/meetings/${meeting.id}`)
      yield* warehouse.upsert("meetings", [read], { source: "reconcile" })
      yield* sandbox.admin.actions.deleteMeeting(meeting.id)

      const report = yield* runOnce
      assert.strictEqual(report.status, "complete")
      assert.strictEqual(report.by_id!.deleted, 1)
      assert.isNotNull((yield* rowOf("meetings", meeting.id)).deleted_at)

      // The webhook of that last edit, whose first attempt failed, arrives now: an event's snapshot
      // of the same version (with the linked contacts and businesses a read does not carry).
      const late = { ...asEventSnapshot(read), contacts: [], businesses: [] }
      yield* warehouse.upsert("meetings", [late], { source: "webhook" })
      const after = yield* rowOf("meetings", meeting.id)
      assert.isNotNull(after.deleted_at, "a version from before the 404 does not bring the meeting back")
    })
  )
})

const smallAllowance = harness({ limits: { token: 40, company: 1_000_000, ip: 1_000_000, window: "4 seconds" } })

layer(smallAllowance, options)("by-id within a small allowance", (it) => {
  it.effect("each run checks what the previous ones reached least recently, until every id is covered", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      yield* seedFromEvents(2)
      // 25% of 40: an allowance of 10 requests, at most 5 for the by-id part, one of them the books listing.
      const first = yield* runOnce
      assert.strictEqual(first.allowance, 10)
      assert.deepInclude(first.by_id!, { known: 6, checked: 4, not_reached: 2, requests: 5 })
      const checkedFirst = new Set(
        (yield* sql<{ id: string }>`SELECT id FROM crm_sync.by_id_checks WHERE connection = 'default'`).map(
          (row) => row.id
        )
      )
      assert.strictEqual(checkedFirst.size, 4)

      // The next window's allowance.
      yield* Effect.sleep("5 seconds")
      const second = yield* runOnce
      assert.deepInclude(second.by_id!, { known: 6, checked: 4 })
      const rows = yield* sql<{ id: string; n: number }>`
        SELECT id, count(*)::int AS n FROM crm_sync.by_id_checks WHERE connection = 'default' GROUP BY id`
      // Every known id has now been checked: the two left over came first in the second run.
      assert.strictEqual(rows.length, 6)
    })
  )
})
