/** Tasks (spec §2.7), from task events and GET /v1/tasks/{id}, and their tags. */
import * as Models from "../../crm/Models.ts"
import { column, define } from "./Declaration.ts"
import {
  bookId,
  createdAt,
  elementsOf,
  eventedDeletedAt,
  household,
  isHousehold,
  known,
  numbered,
  tagColumns,
  tagRow
} from "./Shared.ts"

export const tasks = define<Models.Task>({
  table: "tasks",
  comment: "Tasks (spec §2.7) from task events and GET /v1/tasks/{id}.",
  schema: Models.Task,
  fields: {
    book_id: bookId,
    title: column("text", "The task's title."),
    description: column("text", "Description."),
    deadline_at: column("timestamptz", "Deadline; may be null."),
    completed_at: column("timestamptz", "When it was completed; null while open."),
    all_day: column("boolean", "Whether the deadline is a whole day."),
    is_private: column("boolean", "Whether the task is private."),
    status: column("text", "todo or done."),
    priority: column("text", "Priority, a value of the form <level>_priority."),
    assigned_to: column("jsonb", "The assigned user as received ({id, name, email}); null when none."),
    assigned_team: column("jsonb", "The assigned team as received; null when none."),
    record: column("jsonb", "The related record as received ({id, type, name})."),
    created_at: createdAt
  },
  // assigned_to.id and assigned_team.id, under the names the API's write side uses (spec §2.7).
  derived: {
    assigned_to_id: [
      column("text", "The assigned user: users.id (exclusive with assigned_team_id)."),
      (task) => task.assigned_to?.id ?? null
    ],
    assigned_team_id: [
      column("text", "The assigned team: teams.id (exclusive with assigned_to_id)."),
      (task) => task.assigned_team?.id ?? null
    ],
    record_id: [column("text", "The related record's id."), (task) => task.record?.id ?? null],
    record_type: [column("text", "The related record's kind, e.g. household."), (task) => task.record?.type ?? null],
    record_name: [column("text", "The related record's name."), (task) => task.record?.name ?? null]
  },
  common: { deleted_at: eventedDeletedAt },
  children: [
    {
      table: "task_tags",
      comment: elementsOf("the tags of a task (spec §2.7 `tags`)", "tasks"),
      parentColumn: "task_id",
      list: "tags",
      columns: tagColumns,
      rows: (task) => numbered(task.tags, tagRow)
    }
  ],
  sightings: (task) => [
    ...(task.assigned_to === null ? [] : [{ resource: "users", record: known(task.assigned_to) } as const]),
    ...(task.assigned_team === null ? [] : [{ resource: "teams", record: known(task.assigned_team) } as const]),
    ...(isHousehold(task.record?.type) ? household(task.record!.id, task.record!.name) : [])
  ]
})
