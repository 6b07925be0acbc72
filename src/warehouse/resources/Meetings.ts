/** Meetings (spec §2.6), from meeting events and GET /v1/meetings/{id}, and whom they are about. */
import * as Models from "../../crm/Models.ts"
import { column, define, type Sighting } from "./Declaration.ts"
import {
  bookId,
  businessId,
  createdAt,
  elementsOf,
  eventedDeletedAt,
  household,
  householdId,
  known,
  numbered,
  ordinal,
  userId
} from "./Shared.ts"

export const meetings = define<Models.Meeting>({
  table: "meetings",
  comment: "Meetings (spec §2.6) from meeting events and GET /v1/meetings/{id}.",
  schema: Models.Meeting,
  fields: {
    book_id: bookId,
    title: column("text", "The meeting's title."),
    start_time: column("timestamptz", "When it starts."),
    end_time: column("timestamptz", "When it ends."),
    duration_seconds: column("integer", "Duration in seconds."),
    meeting_link: column("text", "Link to join; may be null."),
    meeting_source: column("text", "One of instant, calendar_event, imported, logged."),
    meeting_type: column("text", "Meeting type (values not shown in the spec)."),
    has_transcript: column("boolean", "Whether a transcript exists (in meeting_transcripts once read)."),
    has_recordings: column("boolean", "Whether recordings exist."),
    quick_summary: column("text", "Short summary; may be null."),
    ai_summary: column("text", "AI-written summary; may be null."),
    notepad: column("text", "The meeting notepad; may be null."),
    // Element fields not shown (spec §2.6): kept as JSON.
    event_participants: column(
      "jsonb",
      "Participants as the single-meeting read returns them (fields not shown in the spec)."
    ),
    created_at: createdAt
  },
  common: { deleted_at: eventedDeletedAt },
  // Only `GET /v1/meetings/{id}` returns participants and transcript, only events the contacts,
  // businesses and users (spec §2.6): neither kind of snapshot erases what only the other carries.
  keptWhenAbsent: ["event_participants", "transcript", "contacts", "businesses", "users"],
  children: [
    {
      table: "meeting_households",
      comment: elementsOf("the households a meeting is about (spec §2.6 `households`)", "meetings"),
      parentColumn: "meeting_id",
      list: "households",
      columns: {
        ordinal,
        household_id: householdId({ notNull: true }),
        name: column("text", "The household's name in the meeting snapshot.")
      },
      rows: (meeting) => numbered(meeting.households, (h) => ({ household_id: h.id, name: h.name }))
    },
    {
      table: "meeting_contacts",
      comment: elementsOf("the contacts a meeting is about (spec §2.6 `contacts`, webhook snapshots only)", "meetings"),
      parentColumn: "meeting_id",
      list: "contacts",
      columns: {
        ordinal,
        contact_id: column("text", "The contact: contacts.id.", { notNull: true }),
        name: column("text", "The contact's name in the meeting snapshot.")
      },
      rows: (meeting) => numbered(meeting.contacts, (c) => ({ contact_id: c.id, name: c.name }))
    },
    {
      table: "meeting_businesses",
      comment: elementsOf(
        "the businesses a meeting is about (spec §2.6 `businesses`, webhook snapshots only)",
        "meetings"
      ),
      parentColumn: "meeting_id",
      list: "businesses",
      columns: {
        ordinal,
        business_id: businessId({ notNull: true }),
        name: column("text", "The business's name in the meeting snapshot.")
      },
      rows: (meeting) => numbered(meeting.businesses, (b) => ({ business_id: b.id, name: b.name }))
    },
    {
      table: "meeting_users",
      comment: elementsOf("the users taking part in a meeting (spec §2.6 `users`)", "meetings"),
      parentColumn: "meeting_id",
      list: "users",
      columns: {
        ordinal,
        user_id: userId,
        email: column("text", "The user's email."),
        first_name: column("text", "The user's first name."),
        last_name: column("text", "The user's last name.")
      },
      rows: (meeting) =>
        numbered(meeting.users, (u) => ({
          user_id: u.id,
          email: u.email,
          first_name: u.first_name,
          last_name: u.last_name
        }))
    }
  ],
  sightings: (meeting) => [
    ...meeting.households.flatMap((h) => household(h.id, h.name)),
    ...meeting.users.map((user): Sighting => ({ resource: "users", record: known(user) }))
  ]
})
