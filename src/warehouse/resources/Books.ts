/** Books (advisor workspaces), from GET /v1/books: the listing is where users and teams come from. */
import * as Models from "../../crm/Models.ts"
import { column, define, type Sighting } from "./Declaration.ts"
import { known, numbered, ordinal, userId } from "./Shared.ts"

const ofBook = (what: string) =>
  `One row per element of the ${what} of a book, from the books listing, replaced whole with its parent row in books.`

export const books = define<Models.Book>({
  table: "books",
  comment: "Books (advisor workspaces) from GET /v1/books (spec §1, §4).",
  schema: Models.Book,
  fields: { name: column("text", "The book's name.") },
  children: [
    {
      table: "book_users",
      comment: ofBook("users"),
      parentColumn: "book_id",
      list: "users",
      columns: { ordinal, user_id: userId },
      rows: (book) => numbered(book.users, (user) => ({ user_id: user.id }))
    },
    {
      table: "book_teams",
      comment: ofBook("teams"),
      parentColumn: "book_id",
      list: "teams",
      columns: { ordinal, team_id: column("text", "The team: teams.id.", { notNull: true }) },
      rows: (book) => numbered(book.teams, (team) => ({ team_id: team.id }))
    }
  ],
  // The books listing is where users and teams come from (spec §4: each book has users[].id, teams[].id).
  sightings: (book) => [
    ...book.users.map((user): Sighting => ({ resource: "users", record: known(user) })),
    ...book.teams.map((team): Sighting => ({ resource: "teams", record: known(team) }))
  ]
})
