/**
 * Reference data read whole (books, project templates): a template gone from the CRM is marked
 * deleted after the second complete refresh that misses it, never after the first; several
 * vanishing at once beyond the threshold are refused and reported.
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { Sandbox } from "@crm-sync/sandbox"
import { ReferenceSync } from "../../src/sync/ReferenceSync.ts"
import { client, harness, listAll } from "./harness.ts"

const refresh = Effect.gen(function* () {
  const sync = yield* ReferenceSync
  return yield* sync.refresh(yield* client, { source: "crawl" })
})

const deletedAt = (id: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const rows = yield* sql<{ deleted_at: Date | null }>`
      SELECT deleted_at FROM crm.project_templates WHERE id = ${id}`
    return rows[0]!.deleted_at
  })

layer(harness(), { timeout: 120_000, excludeTestServices: true })("reference data absence", (it) => {
  it.effect(
    "a template gone from the listings is deleted by the second complete refresh; a mass vanishing is refused",
    () =>
      Effect.gen(function* () {
        const sandbox = yield* Sandbox
        const sql = yield* SqlClient
        const first = yield* refresh
        assert.strictEqual(first.deleted, 0)
        const books = yield* listAll("/v1/books")
        const listed = yield* listAll("/v1/project_templates", { book_id: String(books[0]!.id) })
        const gone = String(listed[0]!.id)
        const all = first.projectTemplates

        yield* sandbox.admin.actions.deleteProjectTemplate(gone)
        const second = yield* refresh
        assert.strictEqual(second.deleted, 0, "one complete refresh without it is not enough")
        assert.isNull(yield* deletedAt(gone))
        const third = yield* refresh
        assert.strictEqual(third.deleted, 1)
        assert.isNotNull(yield* deletedAt(gone))
        assert.strictEqual(third.projectTemplates, all - 1)

        // Two more at once are more than one record and more than 10% of what is tracked: refused.
        const rest = (yield* listAll("/v1/project_templates", { book_id: String(books[0]!.id) })).map((t) =>
          String(t.id)
        )
        for (const id of rest.slice(0, 2)) yield* sandbox.admin.actions.deleteProjectTemplate(id)
        yield* refresh
        const held = yield* refresh
        assert.strictEqual(held.deleted, 0)
        for (const id of rest.slice(0, 2)) assert.isNull(yield* deletedAt(id))
        const [run] = yield* sql<{ note: string | null }>`
        SELECT note FROM crm_sync.crawl_runs WHERE resource = 'project_templates' ORDER BY id DESC LIMIT 1`
        assert.include(run!.note ?? "", "deletion refused: 2 of")
      })
  )
})
