/**
 * Notes as the CRM's users change them: create under a household, contact or business, update,
 * delete, each with its `note.*` event (§6.4). A note belongs to its parent's household, and its
 * events keep that household (and the parent ids) even after deletion (§6.3).
 */
import { Effect } from "effect"
import type { CreateNoteInput, UpdateNoteInput } from "./ActionInputs.ts"
import { type ActionDeps, announce, checkTags, find, timestampOf } from "./ActionSupport.ts"
import { notFound, validationFailed } from "./errors.ts"
import type { World } from "./World.ts"
import { notableTypeOf } from "./RecordBuilders.ts"
import { noteApi } from "./Serializers.ts"

const parentOf = (world: World, input: CreateNoteInput) =>
  input.parent_type === "household"
    ? world.households.getById(input.parent_id)
    : input.parent_type === "contact"
      ? world.contacts.getById(input.parent_id)
      : world.businesses.getById(input.parent_id)

export const createNote = Effect.fn("SandboxActions.createNote")(function* (deps: ActionDeps, input: CreateNoteInput) {
  const world = yield* deps.store.world
  const parent = parentOf(world, input)
  if (parent === undefined) return yield* notFound(`${input.parent_type} ${input.parent_id} not found`)
  const book = world.booksById.get(parent.book_id)!
  yield* checkTags(world, book.company, input.tag_ids)
  const author = input.created_by_id ?? [...book.members][0]!
  if (!book.members.has(author)) return yield* validationFailed(`created_by_id: ${author} cannot access the book`)
  const householdId =
    input.parent_type === "household"
      ? input.parent_id
      : "household_id" in parent
        ? (parent.household_id ?? null)
        : null
  const timestamp = yield* timestampOf(deps)
  const note = world.notes.insert((_, id) => ({
    id,
    book_id: book.id,
    household_id: householdId,
    created_by_id: author,
    notable_id: input.parent_id,
    notable_type: notableTypeOf(input.parent_type),
    pinned: input.pinned ?? false,
    hidden: input.hidden ?? false,
    tag_ids: input.tag_ids ?? [],
    content: input.content,
    references: [],
    created_at: timestamp,
    updated_at: timestamp
  }))
  const index = world.notes.indexOf(note.id)!
  yield* announce(deps, world, "note.created", "note", index, note, note.household_id)
  return noteApi(note)
})

export const updateNote = Effect.fn("SandboxActions.updateNote")(function* (
  deps: ActionDeps,
  id: string,
  input: UpdateNoteInput
) {
  const world = yield* deps.store.world
  const { index, row } = yield* find(world.notes, id)
  yield* checkTags(world, world.booksById.get(row.book_id)!.company, input.tag_ids)
  const timestamp = yield* timestampOf(deps)
  const next = world.notes.update(index, (note) => ({ ...note, ...input, updated_at: timestamp }))!
  yield* announce(deps, world, "note.updated", "note", index, next, next.household_id)
  return noteApi(next)
})

export const deleteNote = Effect.fn("SandboxActions.deleteNote")(function* (deps: ActionDeps, id: string) {
  const world = yield* deps.store.world
  const { index, row } = yield* find(world.notes, id)
  world.notes.remove(index)
  // parent ids are retained after deletion (§6.3)
  yield* announce(deps, world, "note.deleted", "note", index, row, row.household_id)
})
