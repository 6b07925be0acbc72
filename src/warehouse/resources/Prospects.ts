/** Prospects (spec §4, §6.4): only their id, book and names are shown; the rest lives in raw. */
import * as Models from "../../crm/Models.ts"
import { column, define } from "./Declaration.ts"
import { bookId } from "./Shared.ts"

export const prospects = define<Models.Prospect>({
  table: "prospects",
  comment: "Prospects (spec §4, §6.4): fields beyond id, book_id and names are not shown and live in raw.",
  schema: Models.Prospect,
  fields: {
    book_id: bookId,
    first_name: column("text", "First name."),
    last_name: column("text", "Last name.")
  }
})
