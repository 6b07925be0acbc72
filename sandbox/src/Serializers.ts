/**
 * Stored rows → the API's shapes (spec §2): references resolved to `{id, name}` objects, internal
 * fields dropped. Used by the API handlers (reads, writes) and by webhook snapshots (§6.3), which
 * use the same shapes minus the transcript text.
 */
import type { World } from "./World.ts"
import type {
  BookRow,
  ClientRow,
  MeetingRow,
  NoteRow,
  ProjectTemplateRow,
  ProspectRow,
  TaskRow,
  UserRow
} from "./Records.ts"
import { userName } from "./Store.ts"

/** Spec §2.11 / §2.6 `users[]` element. */
export const userRef = (user: UserRow) => ({
  id: user.id,
  email: user.email,
  first_name: user.first_name,
  last_name: user.last_name
})

/** Spec §4 books listing: each book with `users[]` and `teams[]`. */
export const bookApi = (world: World, book: BookRow) => ({
  id: book.id,
  name: book.name,
  initials: book.initials,
  company_id: world.companies[book.company]!.id,
  users: [...book.members]
    .toSorted()
    .map((id) => world.usersById.get(id))
    .filter((user): user is UserRow => user !== undefined)
    .map((user) => ({ ...userRef(user), name: userName(user) })),
  teams: book.teams.map((id) => ({ id, name: world.teamsById.get(id)?.name ?? "" })),
  created_at: book.created_at,
  updated_at: book.updated_at
})

export const templateApi = (template: ProjectTemplateRow) => {
  const { company: _company, ...api } = template
  return api
}

/** Spec §2.9: exactly the client record fields, `type` carrying the record kind. */
export const clientApi = (client: ClientRow) => ({
  id: client.id,
  name: client.name,
  status: client.status,
  tier: client.tier,
  aum: client.aum,
  became_client_at: client.became_client_at,
  type: "client" as const
})

export const prospectApi = (prospect: ProspectRow) => prospect

const named = (ids: ReadonlyArray<string>, lookup: (id: string) => { readonly name: string } | undefined) =>
  ids.map((id) => ({ id, name: lookup(id)?.name ?? "" }))

const contactDisplayName = (world: World, id: string) => {
  const contact = world.contacts.getById(id)
  return contact === undefined
    ? undefined
    : { name: [contact.first_name, contact.last_name].filter((part) => part !== null).join(" ") }
}

export const hasVisibleTranscript = (meeting: MeetingRow): boolean =>
  meeting.transcript !== null && meeting.transcript.length > 0 && meeting.transcript_visible

/** The meeting fields shared by the read and the webhook snapshot. */
const meetingBase = (world: World, meeting: MeetingRow) => ({
  id: meeting.id,
  book_id: meeting.book_id,
  title: meeting.title,
  start_time: meeting.start_time,
  end_time: meeting.end_time,
  duration_seconds: meeting.duration_seconds,
  meeting_link: meeting.meeting_link,
  meeting_source: meeting.meeting_source,
  meeting_type: meeting.meeting_type,
  households: named(meeting.household_ids, (id) => world.households.getById(id)),
  users: meeting.user_ids
    .map((id) => world.usersById.get(id))
    .filter((user): user is UserRow => user !== undefined)
    .map(userRef),
  has_transcript: hasVisibleTranscript(meeting),
  has_recordings: meeting.has_recordings,
  quick_summary: meeting.quick_summary,
  ai_summary: meeting.ai_summary,
  notepad: meeting.notepad,
  created_at: meeting.created_at,
  updated_at: meeting.updated_at
})

/** `GET /v1/meetings/{id}`: with `transcript` and `event_participants`. */
export const meetingApi = (world: World, meeting: MeetingRow) => ({
  ...meetingBase(world, meeting),
  transcript: hasVisibleTranscript(meeting) ? meeting.transcript : [],
  event_participants: meeting.event_participants
})

/** Webhook snapshot (§6.3): with linked contacts and businesses, without transcript text. */
export const meetingSnapshot = (world: World, meeting: MeetingRow) => ({
  ...meetingBase(world, meeting),
  contacts: named(meeting.contact_ids, (id) => contactDisplayName(world, id)),
  businesses: named(meeting.business_ids, (id) => world.businesses.getById(id))
})

/** `GET /v1/meetings/{meeting_id}/transcript`: null when there is no visible transcript. */
export const transcriptApi = (meeting: MeetingRow) => ({
  meeting_id: meeting.id,
  transcript: hasVisibleTranscript(meeting) ? meeting.transcript : null
})

/** Spec §2.7. */
export const taskApi = (world: World, task: TaskRow) => {
  const user = task.assigned_to_id === null ? undefined : world.usersById.get(task.assigned_to_id)
  const team = task.assigned_team_id === null ? undefined : world.teamsById.get(task.assigned_team_id)
  return {
    id: task.id,
    book_id: task.book_id,
    title: task.title,
    description: task.description,
    deadline_at: task.deadline_at,
    completed_at: task.completed_at,
    all_day: task.all_day,
    is_private: task.is_private,
    status: task.status,
    priority: task.priority,
    created_at: task.created_at,
    updated_at: task.updated_at,
    assigned_to: user === undefined ? null : { id: user.id, name: userName(user), email: user.email },
    assigned_team: team === undefined ? null : { id: team.id, name: team.name },
    record: task.record,
    tags: task.tag_ids.map((id) => ({ id, name: world.tagsById.get(id)?.name ?? "" }))
  }
}

/** Spec §2.8. */
export const noteApi = (note: NoteRow) => note
