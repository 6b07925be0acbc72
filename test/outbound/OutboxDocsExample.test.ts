/**
 * The outbox example of the README and docs/operations.md, as a reader copies it into psql against
 * `npm start`'s sandbox: the book it names must be one the sandbox has, or the row only ever goes
 * to `needs_review` ("book_id: unknown book").
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { readFileSync } from "node:fs"
import { Sandbox } from "@crm-sync/sandbox"

const read = (path: string) => readFileSync(new URL(`../../${path}`, import.meta.url), "utf8")

/** The book ids the outbox examples of a page name. */
const exampleBooks = (text: string) =>
  [...text.matchAll(/INSERT INTO crm_sync\.outbox[\s\S]*?;/g)].flatMap((statement) =>
    [...statement[0].matchAll(/"book_id": "([^"]+)"/g)].map((match) => match[1]!)
  )

layer(Sandbox.layer({ records: 50 }), { excludeTestServices: true })("the outbox example", (it) => {
  it.effect("names a book the sandbox has", () =>
    Effect.gen(function* () {
      const books = new Set((yield* (yield* Sandbox).admin.state).books.map((book) => book.id))
      for (const page of ["README.md", "docs/operations.md"]) {
        const named = exampleBooks(read(page))
        assert.isNotEmpty(named, `${page} has an outbox example`)
        for (const book of named) assert.isTrue(books.has(book), `${page}: ${book} is not a sandbox book`)
      }
    })
  )
})
