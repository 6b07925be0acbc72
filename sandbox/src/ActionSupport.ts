/**
 * What the actions of `SandboxActions` share: the services they work through, the checks that
 * answer 422 for a bad reference and 404 for an unknown id, and the bookkeeping of a change: the
 * webhook event about it, whose subject says which record the snapshot is built from later.
 */
import { Effect } from "effect"
import type { Collection } from "./Collection.ts"
import { notFound, validationFailed } from "./errors.ts"
import type { World } from "./World.ts"
import { iso, type SandboxClock } from "./SandboxClock.ts"
import type { SandboxStore } from "./Store.ts"
import type { EventType, SandboxWebhooks, Subject } from "./Webhooks.ts"

/** The services an action reads and changes the world through. */
export interface ActionDeps {
  readonly store: SandboxStore["Service"]
  readonly clock: SandboxClock["Service"]
  readonly webhooks: SandboxWebhooks["Service"]
}

/** Sandbox time as a record timestamp (`created_at`, `updated_at`). */
export const timestampOf = (deps: ActionDeps) => Effect.map(deps.clock.now, iso)

export const bookOf = (world: World, bookId: string) => {
  const book = world.booksById.get(bookId)
  return book === undefined ? Effect.fail(validationFailed(`book_id: unknown book ${bookId}`)) : Effect.succeed(book)
}

export const find = <Row extends { readonly id: string }>(collection: Collection<Row>, id: string) => {
  const index = collection.indexOf(id)
  const row = index === undefined ? undefined : collection.get(index)
  return index === undefined || row === undefined
    ? Effect.fail(notFound(`${collection.kind} ${id} not found`))
    : Effect.succeed({ index, row })
}

export const subjectOf = (
  world: World,
  kind: Subject["kind"],
  index: number,
  row: { readonly id: string; readonly book_id: string },
  householdId?: string | null
): Subject => ({
  kind,
  index,
  id: row.id,
  book: world.booksById.get(row.book_id)!.ordinal,
  ...(householdId === undefined ? {} : { householdId })
})

/** Emits `type` about record `index` of `kind`; a note passes its household (kept on deletion, §6.3). */
export const announce = (
  deps: ActionDeps,
  world: World,
  type: EventType,
  kind: Subject["kind"],
  index: number,
  row: { readonly id: string; readonly book_id: string },
  householdId?: string | null
) => deps.webhooks.emit(type, subjectOf(world, kind, index, row, householdId))

export const checkTags = (world: World, company: number, tagIds: ReadonlyArray<string> | undefined) => {
  const unknown = (tagIds ?? []).filter((id) => !world.tags[company]!.some((tag) => tag.id === id))
  return unknown.length === 0 ? Effect.void : Effect.fail(validationFailed(`unknown tag ids: ${unknown.join(", ")}`))
}
