/**
 * Meetings as the CRM's users change them: create, update, set the transcript, delete, with the
 * events of §6.4. `meeting.transcript_ready` goes out only for a visible, non-empty transcript
 * that is new or changed; links to households, contacts, businesses and users stay in the book.
 */
import { Effect } from "effect"
import type { CreateMeetingInput, TranscriptInput, UpdateMeetingInput } from "./ActionInputs.ts"
import { type ActionDeps, announce, bookOf, find, timestampOf } from "./ActionSupport.ts"
import { validationFailed } from "./errors.ts"
import type { World } from "./World.ts"
import type { MeetingRow, TranscriptSegment } from "./Records.ts"
import { iso } from "./SandboxClock.ts"
import { hasVisibleTranscript, meetingApi } from "./Serializers.ts"

const checkLinks = (world: World, bookId: string, input: UpdateMeetingInput) => {
  const book = world.booksById.get(bookId)!
  const bad: Array<string> = []
  for (const id of input.household_ids ?? []) if (world.households.getById(id)?.book_id !== bookId) bad.push(id)
  for (const id of input.contact_ids ?? []) if (world.contacts.getById(id)?.book_id !== bookId) bad.push(id)
  for (const id of input.business_ids ?? []) if (world.businesses.getById(id)?.book_id !== bookId) bad.push(id)
  for (const id of input.user_ids ?? []) if (!book.members.has(id)) bad.push(id)
  return bad.length === 0
    ? Effect.void
    : Effect.fail(validationFailed(`linked records not found in book ${bookId}: ${bad.join(", ")}`))
}

const meetingTimes = (start: string, duration: number) => ({
  start_time: start,
  end_time: iso(Date.parse(start) + duration * 1000),
  duration_seconds: duration
})

const newMeeting = (input: CreateMeetingInput, id: string, timestamp: string): MeetingRow => ({
  id,
  book_id: input.book_id,
  title: input.title ?? "Meeting",
  ...meetingTimes(input.start_time ?? timestamp, input.duration_seconds ?? 1800),
  meeting_link: input.meeting_link ?? null,
  meeting_source: input.meeting_source ?? "instant",
  meeting_type: input.meeting_type ?? "client_review",
  household_ids: input.household_ids ?? [],
  contact_ids: input.contact_ids ?? [],
  business_ids: input.business_ids ?? [],
  user_ids: input.user_ids ?? [],
  has_recordings: false,
  quick_summary: input.quick_summary ?? null,
  ai_summary: input.ai_summary ?? null,
  notepad: input.notepad ?? null,
  transcript: input.transcript?.segments ?? null,
  transcript_visible: input.transcript?.visible ?? true,
  event_participants: [],
  created_at: timestamp,
  updated_at: timestamp
})

export const createMeeting = Effect.fn("SandboxActions.createMeeting")(function* (
  deps: ActionDeps,
  input: CreateMeetingInput
) {
  const world = yield* deps.store.world
  const book = yield* bookOf(world, input.book_id)
  yield* checkLinks(world, book.id, input)
  const timestamp = yield* timestampOf(deps)
  const meeting = world.meetings.insert((_, id) => newMeeting(input, id, timestamp))
  const index = world.meetings.indexOf(meeting.id)!
  // initial notes and links do not also emit meeting.updated (§6.4)
  yield* announce(deps, world, "meeting.created", "meeting", index, meeting)
  if (hasVisibleTranscript(meeting)) yield* announce(deps, world, "meeting.transcript_ready", "meeting", index, meeting)
  return meetingApi(world, meeting)
})

export const updateMeeting = Effect.fn("SandboxActions.updateMeeting")(function* (
  deps: ActionDeps,
  id: string,
  input: UpdateMeetingInput
) {
  const world = yield* deps.store.world
  const { index, row } = yield* find(world.meetings, id)
  yield* checkLinks(world, row.book_id, input)
  const timestamp = yield* timestampOf(deps)
  const next = world.meetings.update(index, (meeting) => ({
    ...meeting,
    ...input,
    ...meetingTimes(input.start_time ?? meeting.start_time, input.duration_seconds ?? meeting.duration_seconds),
    updated_at: timestamp
  }))!
  yield* announce(deps, world, "meeting.updated", "meeting", index, next)
  return meetingApi(world, next)
})

export const setTranscript = Effect.fn("SandboxActions.setTranscript")(function* (
  deps: ActionDeps,
  id: string,
  input: TranscriptInput
) {
  const world = yield* deps.store.world
  const { index, row } = yield* find(world.meetings, id)
  const timestamp = yield* timestampOf(deps)
  const segments: ReadonlyArray<TranscriptSegment> | null =
    input.segments === undefined ? row.transcript : input.segments
  const next = world.meetings.update(index, (meeting) => ({
    ...meeting,
    transcript: segments,
    transcript_visible: input.visible ?? meeting.transcript_visible,
    updated_at: timestamp
  }))!
  const changed = JSON.stringify(row.transcript) !== JSON.stringify(next.transcript)
  const becameVisible = !hasVisibleTranscript(row) && hasVisibleTranscript(next)
  // empty or hidden transcripts never trigger it (§6.4)
  if (hasVisibleTranscript(next) && (changed || becameVisible)) {
    yield* announce(deps, world, "meeting.transcript_ready", "meeting", index, next)
  }
  return meetingApi(world, next)
})

export const deleteMeeting = Effect.fn("SandboxActions.deleteMeeting")(function* (deps: ActionDeps, id: string) {
  const world = yield* deps.store.world
  const { index, row } = yield* find(world.meetings, id)
  world.meetings.remove(index)
  yield* announce(deps, world, "meeting.deleted", "meeting", index, row)
})
