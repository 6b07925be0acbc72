/**
 * Tasks as the CRM's users change them (spec §2.7, §3): create, update, complete, reopen, delete,
 * each with the events of §6.4. A scheduled or unapproved task emits nothing until it goes live,
 * and then it is announced as created.
 */
import { Effect } from "effect"
import type { CreateTaskInput, UpdateTaskInput } from "./ActionInputs.ts"
import { type ActionDeps, bookOf, checkTags, find, subjectOf, timestampOf } from "./ActionSupport.ts"
import { validationFailed } from "./errors.ts"
import type { World } from "./World.ts"
import type { RecordRef, TaskRow } from "./Records.ts"
import { taskApi } from "./Serializers.ts"
import type { EventType } from "./Webhooks.ts"

const eligible = (task: TaskRow) => !task.scheduled && task.approved

/** Spec §2.7: users from the book's users, teams from its teams; one or the other. */
const checkAssignment = (
  world: World,
  bookId: string,
  userId: string | null | undefined,
  teamId: string | null | undefined
) => {
  const book = world.booksById.get(bookId)!
  if (userId != null && teamId != null) {
    return Effect.fail(validationFailed("assigned_to_id and assigned_team_id are mutually exclusive"))
  }
  if (userId != null && !book.members.has(userId)) {
    return Effect.fail(validationFailed(`assigned_to_id: ${userId} is not one of the book's users`))
  }
  if (teamId != null && !book.teams.includes(teamId)) {
    return Effect.fail(validationFailed(`assigned_team_id: ${teamId} is not one of the book's teams`))
  }
  return Effect.void
}

/** The task's related record: the one named, in the task's book, or the book's first household. */
const recordRef = (world: World, bookId: string, ref: CreateTaskInput["record"]) => {
  const book = world.booksById.get(bookId)!
  if (ref === undefined) {
    const index = world.households.nthInBook(book.ordinal, 0)
    return index === undefined
      ? Effect.fail(validationFailed("the book has no household to attach the task to"))
      : Effect.succeed<RecordRef>({
          id: world.households.idOf(index),
          type: "household",
          name: world.households.get(index)!.name
        })
  }
  const found =
    ref.type === "household"
      ? world.households.getById(ref.id)
      : ref.type === "contact"
        ? world.contacts.getById(ref.id)
        : world.businesses.getById(ref.id)
  if (found === undefined || found.book_id !== bookId) {
    return Effect.fail(validationFailed(`record: ${ref.type} ${ref.id} not found in book ${bookId}`))
  }
  const name = "name" in found ? found.name : [found.first_name, found.last_name].filter((p) => p !== null).join(" ")
  return Effect.succeed<RecordRef>({ id: ref.id, type: ref.type, name })
}

const newTask = (input: CreateTaskInput, id: string, record: RecordRef, timestamp: string): TaskRow => ({
  id,
  book_id: input.book_id,
  title: input.title,
  description: input.description ?? "",
  deadline_at: input.deadline_at ?? null,
  completed_at: null,
  all_day: input.all_day ?? false,
  is_private: input.is_private ?? false,
  status: "todo",
  priority: input.priority ?? "medium_priority",
  created_at: timestamp,
  updated_at: timestamp,
  assigned_to_id: input.assigned_to_id ?? null,
  assigned_team_id: input.assigned_team_id ?? null,
  record,
  tag_ids: input.tag_ids ?? [],
  scheduled: input.scheduled ?? false,
  approved: input.approved ?? true
})

/** The task's events, in order; none while it is scheduled or unapproved (§6.4). */
const emitTask = Effect.fnUntraced(function* (
  deps: ActionDeps,
  world: World,
  index: number,
  task: TaskRow,
  types: ReadonlyArray<EventType>
) {
  if (!eligible(task)) return
  const subject = subjectOf(world, "task", index, task)
  for (const type of types) yield* deps.webhooks.emit(type, subject)
})

export const createTask = Effect.fn("SandboxActions.createTask")(function* (deps: ActionDeps, input: CreateTaskInput) {
  const world = yield* deps.store.world
  const book = yield* bookOf(world, input.book_id)
  yield* checkAssignment(world, book.id, input.assigned_to_id, input.assigned_team_id)
  yield* checkTags(world, book.company, input.tag_ids)
  const record = yield* recordRef(world, book.id, input.record)
  const timestamp = yield* timestampOf(deps)
  const task = world.tasks.insert((_, id) => newTask(input, id, record, timestamp))
  // initial rich text and tags do not also emit task.updated (§6.4)
  yield* emitTask(deps, world, world.tasks.indexOf(task.id)!, task, ["task.created"])
  return taskApi(world, task)
})

export const updateTask = Effect.fn("SandboxActions.updateTask")(function* (
  deps: ActionDeps,
  id: string,
  input: UpdateTaskInput
) {
  const world = yield* deps.store.world
  const { index, row } = yield* find(world.tasks, id)
  const book = world.booksById.get(row.book_id)!
  yield* checkAssignment(world, row.book_id, input.assigned_to_id, input.assigned_team_id)
  yield* checkTags(world, book.company, input.tag_ids)
  const timestamp = yield* timestampOf(deps)
  const wasEligible = eligible(row)
  const next = world.tasks.update(index, (task) => ({
    ...task,
    ...input,
    // setting one assignee clears the other (§2.7)
    ...(input.assigned_to_id != null ? { assigned_team_id: null } : {}),
    ...(input.assigned_team_id != null ? { assigned_to_id: null } : {}),
    updated_at: timestamp
  }))!
  // a scheduled or unapproved task that becomes live is announced as created
  yield* emitTask(deps, world, index, next, wasEligible ? ["task.updated"] : ["task.created"])
  return taskApi(world, next)
})

export const completeTask = Effect.fn("SandboxActions.completeTask")(function* (deps: ActionDeps, id: string) {
  const world = yield* deps.store.world
  const { index, row } = yield* find(world.tasks, id)
  if (row.status === "done") return taskApi(world, row)
  const timestamp = yield* timestampOf(deps)
  const next = world.tasks.update(index, (task) => ({
    ...task,
    status: "done",
    completed_at: timestamp,
    updated_at: timestamp
  }))!
  yield* emitTask(deps, world, index, next, ["task.completed", "task.updated"])
  return taskApi(world, next)
})

export const reopenTask = Effect.fn("SandboxActions.reopenTask")(function* (deps: ActionDeps, id: string) {
  const world = yield* deps.store.world
  const { index, row } = yield* find(world.tasks, id)
  // only done -> todo reopens (§3); an incomplete task never emits task.reopened
  if (row.status !== "done") return taskApi(world, row)
  const timestamp = yield* timestampOf(deps)
  const next = world.tasks.update(index, (task) => ({
    ...task,
    status: "todo",
    completed_at: null,
    updated_at: timestamp
  }))!
  yield* emitTask(deps, world, index, next, ["task.reopened", "task.updated"])
  return taskApi(world, next)
})

export const deleteTask = Effect.fn("SandboxActions.deleteTask")(function* (deps: ActionDeps, id: string) {
  const world = yield* deps.store.world
  const { index, row } = yield* find(world.tasks, id)
  world.tasks.remove(index)
  yield* emitTask(deps, world, index, row, ["task.deleted"])
})
