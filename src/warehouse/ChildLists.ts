/**
 * ChildLists: the child-table rows of parents just written (a book's users, a business's
 * addresses), rewritten in the parents' transaction. Only lists that were received and differ from
 * the stored ones are touched, so a write that changes no list writes no child row.
 */
import * as Effect from "effect/Effect"
import type { SqlClient } from "effect/sql/SqlClient"
import * as BatchSql from "./BatchSql.ts"
import { type AnyTable, type Decoded, partsOf } from "./Rows.ts"

/** A record the parent statement wrote, and which of its lists differ from the stored ones. */
export interface Written {
  readonly item: Decoded
  readonly inserted: boolean
  readonly changedLists: ReadonlySet<string>
}

/**
 * Rewrites the child tables of the parents just written. A list absent from the received object
 * leaves its rows alone (Tables.ts); a list equal to the stored one (same JSON) has the same rows
 * already, so only changed lists are rewritten; a new parent has no rows to delete (children
 * cascade with their parent, so none can be left from an earlier one).
 */
export const replaceChildren = Effect.fnUntraced(function* (
  sql: SqlClient,
  table: AnyTable,
  written: ReadonlyArray<Written>
) {
  for (const child of table.children) {
    const parents = written.filter(
      (w) => Object.hasOwn(partsOf(w.item).raw, child.list) && w.changedLists.has(child.list)
    )
    if (parents.length === 0) continue
    const replaced = parents.filter((w) => !w.inserted).map((w) => w.item.id)
    if (replaced.length > 0) yield* sql.unsafe(BatchSql.deleteChildren(child), [replaced])
    const rows = parents.flatMap((w) =>
      child.rows(partsOf(w.item).record).map((row) => ({ ...row, [child.parentColumn]: w.item.id }))
    )
    if (rows.length > 0) yield* sql.unsafe(BatchSql.insertChildren(child), [JSON.stringify(rows)])
  }
})
