/** Notes (spec §2.8) under a household, contact or business, from note events and the parent-path reads. */
import * as Models from "../../crm/Models.ts"
import { column, define } from "./Declaration.ts"
import { bookId, createdAt, eventedDeletedAt, household, householdId, isHousehold } from "./Shared.ts"

export const notes = define<Models.Note>({
  table: "notes",
  comment: "Notes (spec §2.8) under a household, contact or business, from note events and the parent-path reads.",
  schema: Models.Note,
  fields: {
    book_id: bookId,
    household_id: householdId(),
    created_by_id: column("text", "The user who wrote the note: users.id."),
    notable_id: column("text", "The parent record the note hangs under."),
    notable_type: column("text", "The parent's kind: household, contact or business."),
    pinned: column("boolean", "Whether the note is pinned."),
    hidden: column("boolean", "Whether the note is hidden."),
    tag_ids: column("text[]", "Ids of the note's tags."),
    content: column("text", "The note's text."),
    // Element fields not shown (spec §2.8): kept as JSON. A reserved word: quoted in SQL.
    references: column("jsonb", "References, as the array received."),
    created_at: createdAt
  },
  common: { deleted_at: eventedDeletedAt },
  sightings: (note) => [
    ...household(note.household_id),
    ...(isHousehold(note.notable_type) ? household(note.notable_id) : [])
  ]
})
