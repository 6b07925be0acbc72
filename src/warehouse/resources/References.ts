/**
 * Users, teams and households: records that only ever arrive as references inside others (the
 * books listing, meeting and task snapshots, placements, accounts). Their tables merge what each
 * sighting adds.
 */
import * as Models from "../../crm/Models.ts"
import { column, define } from "./Declaration.ts"
import { versionFrom } from "./Shared.ts"

export const users = define<Models.User>({
  table: "users",
  comment: "Users seen in the books listing, meeting snapshots and task assignments; raw merges every sighting.",
  kind: "reference",
  schema: Models.User,
  fields: {
    name: column("text", "The user's name."),
    email: column("text", "The user's email."),
    first_name: column("text", "The user's first name."),
    last_name: column("text", "The user's last name.")
  }
})

export const teams = define<Models.Team>({
  table: "teams",
  comment: "Teams seen in the books listing and task assignments; raw merges every sighting.",
  kind: "reference",
  schema: Models.Team,
  fields: { name: column("text", "The team's name.") }
})

export const households = define<Models.Household>({
  table: "households",
  comment:
    "Households whose ids were seen in events, meetings, notes, tasks, placements and accounts (no household endpoint exists).",
  kind: "reference",
  schema: Models.Household,
  fields: { name: column("text", "The household's name, when a sighting carried one.") },
  other: versionFrom("households")
})
