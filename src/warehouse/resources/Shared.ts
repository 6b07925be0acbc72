/**
 * What several resources declare alike: the columns of their email, phone, address, tag and
 * reference lists, the columns whose meaning is the same in every table (`book_id`, `created_at`,
 * `ordinal`), and the helpers that number list elements and turn references into sightings.
 */
import type * as Models from "../../crm/Models.ts"
import { type Column, column, type Row, type Sighting } from "./Declaration.ts"

/** Numbers the elements of a list from 0, in the order received. */
export const numbered = <A>(items: ReadonlyArray<A>, row: (item: A) => Row): ReadonlyArray<Row> =>
  items.map((item, ordinal) => ({ ...row(item), ordinal }))

/** The fields actually known, so that merging a sighting never erases what an earlier one said. */
export const known = <A extends { readonly id: string }>(value: A): Row & { readonly id: string } => {
  const out: Record<string, unknown> = {}
  for (const [key, field] of Object.entries(value)) if (field !== null && field !== undefined) out[key] = field
  return out as Row & { readonly id: string }
}

/**
 * Whether a record reference names a household. Spec §2.7 and §2.8 give the kind in lower case
 * ("household"), while the CRM's notes say `Household` (a class name): compare without case.
 */
export const isHousehold = (type: string | null | undefined): boolean => type?.toLowerCase() === "household"

export const household = (id: string | null, name: string | null = null): ReadonlyArray<Sighting> =>
  id === null || id === "" ? [] : [{ resource: "households", record: known({ id, name }) }]

/** The start of the row's current version (migration 0028: the history keeps only the ended ones). */
export const versionFrom = (table: string) => ({
  version_from: column(
    "timestamptz",
    `When the row's current version began (its valid_from in crm_history.${table}); null until the row is first updated, the version then beginning at deleted_at for a tombstone, else updated_at, else synced_at.`
  )
})

export const bookId = column("text", "The book (advisor workspace) the record belongs to: books.id.")
export const createdAt = column("timestamptz", "When the record was created, as the CRM reports it.")
export const householdId = (options: { readonly notNull?: boolean } = {}) =>
  column("text", "The household: households.id.", options)
export const businessId = (options: { readonly notNull?: boolean } = {}) =>
  column("text", "The business: businesses.id.", options)
export const userId = column("text", "The user: users.id.", { notNull: true })

/** The deleted_at of the resources whose deletions arrive as events (tasks, meetings, notes; migration 0020). */
export const eventedDeletedAt =
  "When the CRM deleted the record, in the CRM's clock: the end of the second its deletion event was signed in; or when crm-sync learned it was gone (a 404 by id); never before updated_at. Null while it exists."

export const ordinal = column(
  "integer",
  "Position of the element in its list, from 0 (the list is replaced whole with its parent).",
  { notNull: true }
)

const isPrimary = column("boolean", "Whether this is the primary one of its kind.")

export const emailColumns: Readonly<Record<string, Column>> = {
  ordinal,
  email: column("text", "Email address."),
  email_type: column("text", "Kind of email address as the CRM names it."),
  is_primary: isPrimary
}

export const phoneColumns: Readonly<Record<string, Column>> = {
  ordinal,
  phone_number: column("text", "Phone number, E.164 as the spec requires (kept as given when it is not)."),
  phone_type: column("text", "Kind of phone number as the CRM names it."),
  is_primary: isPrimary,
  extension: column("text", "Phone extension."),
  // Spec §2.1 says E.164; a number that is not is stored as received, and flagged here.
  is_e164: column(
    "boolean",
    "Whether phone_number is a valid E.164 number (spec §2.1); a value that is not is kept, flagged false.",
    { generated: true }
  )
}

export const addressColumns: Readonly<Record<string, Column>> = {
  ordinal,
  address_type: column("text", "Kind of address as the CRM names it (values not shown in the spec)."),
  is_primary: isPrimary,
  line1: column("text", "Street address, first line."),
  line2: column("text", "Street address, second line."),
  city: column("text", "City."),
  state: column("text", "State or region."),
  zip: column("text", "Postal code."),
  country_code: column("text", "Country code as given.")
}

export const tagColumns: Readonly<Record<string, Column>> = {
  ordinal,
  tag_id: column("text", "The tag's id, as the CRM gives it (tags have no endpoint of their own).", { notNull: true }),
  name: column("text", "The tag's name.")
}

export const tagRow = (tag: Models.Tag): Row => ({ tag_id: tag.id, name: tag.name })

/** The comment of a child table: `One row per element of <what>, replaced whole with its parent row in <parent>.` */
export const elementsOf = (what: string, parent: string) =>
  `One row per element of ${what}, replaced whole with its parent row in ${parent}.`
