/**
 * Row-by-row comparison of the warehouse with the sandbox's listings: every record's `raw`, every
 * typed column named after one of its scalar fields (spec §2 names), and every child table, read
 * back with SQL and checked field by field against the API's JSON. Returns the differences found
 * (empty when equal), so a failing test says which record and which column differ.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { isDeepStrictEqual } from "node:util"

type Json = Record<string, unknown>

interface ChildSpec {
  readonly table: string
  readonly parentColumn: string
  readonly list: string
  /** The expected rows of one element (without ordinal and parent). */
  readonly row: (element: Json) => Json
}

const pick =
  (...fields: ReadonlyArray<string>) =>
  (element: Json): Json =>
    Object.fromEntries(fields.map((field) => [field, element[field] ?? null]))

const addressFields = ["address_type", "is_primary", "line1", "line2", "city", "state", "zip", "country_code"]

export const childSpecs: Record<string, ReadonlyArray<ChildSpec>> = {
  businesses: [
    {
      table: "business_email_addresses",
      parentColumn: "business_id",
      list: "email_addresses",
      row: pick("email", "email_type", "is_primary")
    },
    {
      table: "business_phone_numbers",
      parentColumn: "business_id",
      list: "phone_numbers",
      row: pick("phone_number", "phone_type", "is_primary", "extension")
    },
    { table: "business_addresses", parentColumn: "business_id", list: "addresses", row: pick(...addressFields) },
    {
      table: "business_tags",
      parentColumn: "business_id",
      list: "tags",
      row: (tag) => ({ tag_id: tag.id, name: tag.name ?? null })
    }
  ],
  annuity_contracts: [
    {
      table: "annuity_contract_parties",
      parentColumn: "annuity_contract_id",
      list: "parties",
      row: pick("id", "role", "display_name", "participant_type", "participant_id")
    },
    {
      table: "annuity_contract_placements",
      parentColumn: "annuity_contract_id",
      list: "placements",
      row: pick("id", "book_id", "household_id", "business_id", "trust_id", "placement_authority")
    },
    {
      table: "annuity_contract_values",
      parentColumn: "annuity_contract_id",
      list: "values",
      row: pick("id", "kind", "amount", "as_of_date", "created_at", "updated_at", "source_kind")
    }
  ],
  project_templates: [
    {
      table: "project_template_milestones",
      parentColumn: "project_template_id",
      list: "project_milestones",
      row: pick("id", "title", "guid", "color", "sort_order", "auto_advance_trigger", "created_at", "updated_at")
    },
    {
      table: "project_template_attachments",
      parentColumn: "project_template_id",
      list: "attachments",
      row: pick("file_name", "file_type", "file_size", "source", "signed_id", "download_url", "view_url")
    }
  ],
  books: [
    { table: "book_users", parentColumn: "book_id", list: "users", row: (user) => ({ user_id: user.id }) },
    { table: "book_teams", parentColumn: "book_id", list: "teams", row: (team) => ({ team_id: team.id }) }
  ]
}

const ISO_TIMESTAMP = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}/
const ISO_DATE = /^\d{4}-\d{2}-\d{2}$/

const localDate = (date: Date) =>
  `${date.getFullYear()}-${String(date.getMonth() + 1).padStart(2, "0")}-${String(date.getDate()).padStart(2, "0")}`

/** Whether a column value read back from PostgreSQL holds the API's JSON value. */
export const sameValue = (stored: unknown, expected: unknown): boolean => {
  if (expected === null || expected === undefined) return stored === null || stored === undefined
  if (typeof expected === "string") {
    if (stored instanceof Date) {
      if (ISO_DATE.test(expected))
        return localDate(stored) === expected || stored.toISOString().slice(0, 10) === expected
      return ISO_TIMESTAMP.test(expected) && stored.getTime() === Date.parse(expected)
    }
    if (typeof stored === "string" && /^-?\d+(\.\d+)?$/.test(expected) && /^-?\d+(\.\d+)?$/.test(stored)) {
      return Number(stored) === Number(expected)
    }
    return stored === expected
  }
  if (typeof expected === "number") return stored !== null && Number(stored) === expected
  if (typeof expected === "boolean") return stored === expected
  return isDeepStrictEqual(stored, expected)
}

/**
 * Differences between `crm.<table>` and `records` (the API's listing): missing or extra rows, a
 * `raw` that differs, a typed column that does not hold its field, a child table that does not
 * hold its list. Columns are compared when the table has a column of the field's name.
 */
export const compareTable = Effect.fnUntraced(function* (
  table: string,
  records: ReadonlyArray<Json>,
  options: { readonly ignoreColumns?: ReadonlyArray<string> } = {}
) {
  const sql = yield* SqlClient
  const problems: Array<string> = []
  const rows = yield* sql.unsafe<Json>(`SELECT * FROM crm."${table}" WHERE deleted_at IS NULL`)
  const byId = new Map(rows.map((row) => [row.id as string, row]))
  if (rows.length !== records.length) problems.push(`${table}: ${rows.length} live rows, ${records.length} records`)
  for (const record of records) {
    const id = record.id as string
    const row = byId.get(id)
    if (row === undefined) {
      problems.push(`${table} ${id}: missing`)
      continue
    }
    if (!isDeepStrictEqual(row.raw, record)) problems.push(`${table} ${id}: raw differs`)
    for (const [field, value] of Object.entries(record)) {
      if (field === "id" || !(field in row) || Array.isArray(value) || options.ignoreColumns?.includes(field)) continue
      if (!sameValue(row[field], value)) {
        problems.push(
          `${table} ${id}.${field}: stored ${JSON.stringify(row[field])}, expected ${JSON.stringify(value)}`
        )
      }
    }
  }
  for (const child of childSpecs[table] ?? []) {
    const childRows = yield* sql.unsafe<Json>(
      `SELECT * FROM crm."${child.table}" ORDER BY "${child.parentColumn}", ordinal`
    )
    const byParent = new Map<string, Array<Json>>()
    for (const row of childRows) {
      const parent = row[child.parentColumn] as string
      byParent.set(parent, [...(byParent.get(parent) ?? []), row])
    }
    for (const record of records) {
      const list = (record[child.list] as ReadonlyArray<Json> | undefined) ?? []
      const stored = byParent.get(record.id as string) ?? []
      if (stored.length !== list.length) {
        problems.push(`${child.table} of ${String(record.id)}: ${stored.length} rows, ${list.length} elements`)
        continue
      }
      list.forEach((element, ordinal) => {
        const row = stored[ordinal]!
        if (row.ordinal !== ordinal) problems.push(`${child.table} of ${String(record.id)}: ordinal ${ordinal} missing`)
        for (const [field, value] of Object.entries(child.row(element))) {
          if (!sameValue(row[field], value)) {
            problems.push(
              `${child.table} of ${String(record.id)}[${ordinal}].${field}: stored ${JSON.stringify(row[field])}, expected ${JSON.stringify(value)}`
            )
          }
        }
      })
    }
  }
  return problems
})

const milestoneKey = (template: unknown, milestone: unknown) => `${String(template)}/${String(milestone)}`

/** Milestone outcomes and form fields (two levels down), against the templates' JSON. */
export const compareMilestoneChildren = Effect.fnUntraced(function* (templates: ReadonlyArray<Json>) {
  const sql = yield* SqlClient
  const problems: Array<string> = []
  const levels = [
    {
      table: "project_template_milestone_outcomes",
      list: "project_milestone_outcomes",
      row: pick("id", "label", "destination", "default_comment", "target_project_milestone_id", "sort_order")
    },
    {
      table: "project_template_milestone_form_fields",
      list: "project_milestone_form_fields",
      row: pick(
        "id",
        "label",
        "field_type",
        "guid",
        "placeholder",
        "household_record_source",
        "required",
        "sort_order",
        "select_options"
      )
    }
  ]
  for (const level of levels) {
    const rows = yield* sql.unsafe<Json>(
      `SELECT * FROM crm."${level.table}" ORDER BY project_template_id, milestone_ordinal, ordinal`
    )
    const grouped = new Map<string, Array<Json>>()
    for (const row of rows) {
      const k = milestoneKey(row.project_template_id, row.milestone_ordinal)
      grouped.set(k, [...(grouped.get(k) ?? []), row])
    }
    for (const template of templates) {
      const milestones = (template.project_milestones as ReadonlyArray<Json> | undefined) ?? []
      milestones.forEach((milestone, milestoneOrdinal) => {
        const list = (milestone[level.list] as ReadonlyArray<Json> | undefined) ?? []
        const stored = grouped.get(milestoneKey(template.id, milestoneOrdinal)) ?? []
        if (stored.length !== list.length) {
          problems.push(
            `${level.table} of ${String(template.id)}/${milestoneOrdinal}: ${stored.length} rows, ${list.length}`
          )
          return
        }
        list.forEach((element, ordinal) => {
          const row = stored[ordinal]!
          if (row.milestone_id !== milestone.id) problems.push(`${level.table}: milestone_id of ${String(element.id)}`)
          for (const [field, value] of Object.entries(level.row(element))) {
            if (!sameValue(row[field], value)) {
              problems.push(`${level.table} ${String(element.id)}.${field}: stored ${JSON.stringify(row[field])}`)
            }
          }
        })
      })
    }
  }
  return problems
})
