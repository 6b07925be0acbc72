/**
 * Meeting transcripts (spec §2.6), one row per meeting, read by id when a meeting says it has one;
 * retired (deleted_at set, text removed) when the meeting is deleted or a read answers none.
 */
import * as Models from "../../crm/Models.ts"
import { column, define } from "./Declaration.ts"
import { elementsOf, numbered, ordinal } from "./Shared.ts"

export const meetingTranscripts = define<Models.MeetingTranscript>({
  table: "meeting_transcripts",
  comment: "Meeting transcripts (spec §2.6), one row per meeting; segments in meeting_transcript_segments.",
  schema: Models.MeetingTranscript,
  // The transcript response has no id of its own: it is the meeting's (spec §2.6).
  idKey: "meeting_id",
  id: (transcript) => transcript.meeting_id,
  updatedAt: () => null,
  fields: {},
  derived: {
    has_transcript: [
      column("boolean", "False when the CRM answered that the meeting has no transcript (transcript null).", {
        notNull: true
      }),
      (transcript) => transcript.transcript !== null
    ]
  },
  other: {
    meeting_id: column("text", "The meeting: meetings.id (the same as id, for joins by name).", { generated: true })
  },
  common: {
    id: "The meeting's id: one transcript row per meeting (meetings.id).",
    updated_at:
      "When crm-sync started the read that wrote the row (the database's clock): of two reads of one transcript, the one started later is kept. Not a time the CRM reports.",
    deleted_at:
      "When the transcript was retired: its meeting was deleted, or a read answered no transcript (none, or hidden). Its text (raw, segments) is removed then. Null while live.",
    raw: "The transcript response exactly as last received; null once retired."
  },
  children: [
    {
      table: "meeting_transcript_segments",
      comment: elementsOf(
        "the segments of a meeting's transcript, in order (spec §2.6 transcript response)",
        "meeting_transcripts"
      ),
      parentColumn: "meeting_id",
      parentComment: "The parent row: meeting_transcripts.id (the meeting's id).",
      list: "transcript",
      columns: {
        ordinal,
        text: column("text", "What was said."),
        participant_name: column("text", "Who said it (participant.name)."),
        participant: column("jsonb", "The participant object as received."),
        // Format not shown (spec §2.6): the JSON value as received (a string or a number).
        start_timestamp: column("jsonb", "When the segment starts, as received (format not shown in the spec)."),
        end_timestamp: column("jsonb", "When the segment ends, as received (format not shown in the spec).")
      },
      rows: (transcript) =>
        numbered(transcript.transcript ?? [], (segment) => ({
          text: segment.text,
          participant_name: segment.participant?.name ?? null,
          participant: segment.participant,
          start_timestamp: segment.start_timestamp,
          end_timestamp: segment.end_timestamp
        }))
    }
  ]
})
