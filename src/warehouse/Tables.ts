// Long by design: one declarative entry per warehouse table.
/**
 * What the warehouse stores for each resource: one descriptor per table of schema `crm` (see
 * migrations/0001_crm_schema.sql) naming its model, its typed columns, its child tables and the
 * reference records it reveals. `BatchSql.ts` turns a descriptor into batch SQL, so adding a
 * resource is a migration plus one entry here (docs/warehouse.md, "How to add a resource").
 *
 * Column names are the spec's own (§2). The common columns (`id`, `updated_at`, `deleted_at`,
 * `synced_at`, `source`, `raw`) are not listed: every table has them and the SQL sets them.
 */
import type { Schema } from "effect"
import * as Models from "../crm/Models.ts"

/** The PostgreSQL types a typed column can have. */
export type PgType = "text" | "text[]" | "integer" | "bigint" | "numeric" | "boolean" | "date" | "timestamptz" | "jsonb"

/** A row as sent to PostgreSQL: column name to JSON value (absent keys become NULL). */
export type Row = Readonly<Record<string, unknown>>

/** The tables holding records that only ever arrive as references (`{id, name}`) inside others. */
export type ReferenceResource = "users" | "teams" | "households"

/**
 * A child table `<parent>_<list>`: its rows are derived from the parent record and replaced, all of
 * them, whenever the parent is written. `list` is the parent's key holding the list: when the
 * received object lacks that key (a meeting read has no `contacts`, spec §2.6), the stored child
 * rows are left as they were; when it is present, even empty, they are replaced.
 */
export interface ChildTable<R> {
  readonly table: string
  /** The column holding the parent's id (`<parent>_id`). */
  readonly parentColumn: string
  readonly list: string
  readonly columns: Readonly<Record<string, PgType>>
  /** The rows for one parent, without the parent column, each with its `ordinal`. */
  readonly rows: (record: R) => ReadonlyArray<Row>
}

/** A reference record seen inside another (a meeting's household, a book's user). */
export interface Sighting {
  readonly resource: ReferenceResource
  /** `{id, ...fields}` with only the fields actually known (no nulls): the merge keeps the rest. */
  readonly record: Row & { readonly id: string }
}

export interface TableDescriptor<R> {
  readonly table: string
  /**
   * `record` tables follow their record's `updated_at` (forward-only, older snapshots skipped);
   * `reference` tables merge what each sighting adds (there is no `updated_at` to order them by).
   */
  readonly kind: "record" | "reference"
  readonly schema: Schema.Decoder<R>
  /** The key of the received object holding the id (for records that fail to decode). */
  readonly idKey: string
  readonly id: (record: R) => string
  /** The record's own `updated_at`, or null where the API gives none. */
  readonly updatedAt: (record: R) => string | null
  readonly columns: Readonly<Record<string, PgType>>
  readonly row: (record: R) => Row
  readonly children: ReadonlyArray<ChildTable<R>>
  readonly sightings: (record: R) => ReadonlyArray<Sighting>
  /**
   * Columns that only some reads return (a meeting's `event_participants`: the single-meeting read
   * has them, event snapshots do not): a snapshot without the key keeps the stored value.
   */
  readonly keptWhenAbsent: ReadonlyArray<string>
}

interface Definition<R> {
  readonly table: string
  readonly kind?: "record" | "reference"
  readonly schema: Schema.Decoder<R>
  readonly idKey?: string
  readonly id?: (record: R) => string
  readonly updatedAt?: (record: R) => string | null
  /** Typed columns read straight from the record's field of the same name. */
  readonly fields: { readonly [K in keyof R & string]?: PgType }
  /** Typed columns computed from the record (a nested object's id, a flag). */
  readonly derived?: Readonly<Record<string, readonly [PgType, (record: R) => unknown]>>
  readonly children?: ReadonlyArray<ChildTable<R>>
  readonly sightings?: (record: R) => ReadonlyArray<Sighting>
  readonly keptWhenAbsent?: ReadonlyArray<keyof R & string>
}

const define = <R>(definition: Definition<R>): TableDescriptor<R> => {
  const fieldNames = Object.keys(definition.fields) as unknown as ReadonlyArray<keyof R & string>
  const derived = Object.entries(definition.derived ?? {})
  const columns: Record<string, PgType> = {}
  for (const name of fieldNames) columns[name] = definition.fields[name]!
  for (const [name, [type]] of derived) columns[name] = type
  return {
    table: definition.table,
    kind: definition.kind ?? "record",
    schema: definition.schema,
    idKey: definition.idKey ?? "id",
    id: definition.id ?? ((record) => (record as { readonly id: string }).id),
    updatedAt:
      definition.updatedAt ?? ((record) => (record as { readonly updated_at?: string | null }).updated_at ?? null),
    columns,
    row: (record) => {
      const row: Record<string, unknown> = {}
      for (const name of fieldNames) row[name] = record[name]
      for (const [name, [, get]] of derived) row[name] = get(record)
      return row
    },
    children: definition.children ?? [],
    sightings: definition.sightings ?? (() => []),
    keptWhenAbsent: definition.keptWhenAbsent ?? []
  }
}

/** Numbers the elements of a list from 0, in the order received. */
const numbered = <A>(items: ReadonlyArray<A>, row: (item: A) => Row): ReadonlyArray<Row> =>
  items.map((item, ordinal) => ({ ...row(item), ordinal }))

/** The fields actually known, so that merging a sighting never erases what an earlier one said. */
const known = <A extends { readonly id: string }>(value: A): Row & { readonly id: string } => {
  const out: Record<string, unknown> = {}
  for (const [key, field] of Object.entries(value)) if (field !== null && field !== undefined) out[key] = field
  return out as Row & { readonly id: string }
}

/**
 * Whether a record reference names a household. Spec §2.7 and §2.8 give the kind in lower case
 * ("household"), while the CRM's notes say `Household` (a class name): compare without case.
 */
const isHousehold = (type: string | null | undefined): boolean => type?.toLowerCase() === "household"

const household = (id: string | null, name: string | null = null): ReadonlyArray<Sighting> =>
  id === null || id === "" ? [] : [{ resource: "households", record: known({ id, name }) }]

const emailColumns = { ordinal: "integer", email: "text", email_type: "text", is_primary: "boolean" } as const
const phoneColumns = {
  ordinal: "integer",
  phone_number: "text",
  phone_type: "text",
  is_primary: "boolean",
  extension: "text"
} as const
const addressColumns = {
  ordinal: "integer",
  address_type: "text",
  is_primary: "boolean",
  line1: "text",
  line2: "text",
  city: "text",
  state: "text",
  zip: "text",
  country_code: "text"
} as const
const tagColumns = { ordinal: "integer", tag_id: "text", name: "text" } as const
const referenceColumns = (idColumn: string) => ({ ordinal: "integer", [idColumn]: "text", name: "text" }) as const

const tagRow = (tag: Models.Tag): Row => ({ tag_id: tag.id, name: tag.name })

// ---------------------------------------------------------------------------------------------

const books = define<Models.Book>({
  table: "books",
  schema: Models.Book,
  fields: { name: "text" },
  children: [
    {
      table: "book_users",
      parentColumn: "book_id",
      list: "users",
      columns: { ordinal: "integer", user_id: "text" },
      rows: (book) => numbered(book.users, (user) => ({ user_id: user.id }))
    },
    {
      table: "book_teams",
      parentColumn: "book_id",
      list: "teams",
      columns: { ordinal: "integer", team_id: "text" },
      rows: (book) => numbered(book.teams, (team) => ({ team_id: team.id }))
    }
  ],
  // The books listing is where users and teams come from (spec §4: each book has users[].id, teams[].id).
  sightings: (book) => [
    ...book.users.map((user): Sighting => ({ resource: "users", record: known(user) })),
    ...book.teams.map((team): Sighting => ({ resource: "teams", record: known(team) }))
  ]
})

const users = define<Models.User>({
  table: "users",
  kind: "reference",
  schema: Models.User,
  fields: { name: "text", email: "text", first_name: "text", last_name: "text" }
})

const teams = define<Models.Team>({
  table: "teams",
  kind: "reference",
  schema: Models.Team,
  fields: { name: "text" }
})

const households = define<Models.Household>({
  table: "households",
  kind: "reference",
  schema: Models.Household,
  fields: { name: "text" }
})

const businesses = define<Models.Business>({
  table: "businesses",
  schema: Models.Business,
  fields: {
    book_id: "text",
    name: "text",
    industry: "text",
    website_url: "text",
    tax_id: "text",
    additional_info: "text",
    created_at: "timestamptz"
  },
  children: [
    {
      table: "business_email_addresses",
      parentColumn: "business_id",
      list: "email_addresses",
      columns: emailColumns,
      rows: (business) => numbered(business.email_addresses, (email) => email)
    },
    {
      table: "business_phone_numbers",
      parentColumn: "business_id",
      list: "phone_numbers",
      columns: phoneColumns,
      rows: (business) => numbered(business.phone_numbers, (phone) => phone)
    },
    {
      table: "business_addresses",
      parentColumn: "business_id",
      list: "addresses",
      columns: addressColumns,
      rows: (business) => numbered(business.addresses, (address) => address)
    },
    {
      table: "business_tags",
      parentColumn: "business_id",
      list: "tags",
      columns: tagColumns,
      rows: (business) => numbered(business.tags, tagRow)
    }
  ]
})

const contacts = define<Models.Contact>({
  table: "contacts",
  schema: Models.Contact,
  fields: {
    book_id: "text",
    first_name: "text",
    last_name: "text",
    middle_name: "text",
    preferred_name: "text",
    salutation: "text",
    suffix: "text",
    gender: "text",
    designations: "text",
    custom_fields: "jsonb",
    created_at: "timestamptz"
  },
  children: [
    {
      table: "contact_email_addresses",
      parentColumn: "contact_id",
      list: "email_addresses",
      columns: emailColumns,
      rows: (contact) => numbered(contact.email_addresses, (email) => email)
    },
    {
      table: "contact_phone_numbers",
      parentColumn: "contact_id",
      list: "phone_numbers",
      columns: phoneColumns,
      rows: (contact) => numbered(contact.phone_numbers, (phone) => phone)
    },
    {
      table: "contact_addresses",
      parentColumn: "contact_id",
      list: "addresses",
      columns: addressColumns,
      rows: (contact) => numbered(contact.addresses, (address) => address)
    }
  ]
})

const prospects = define<Models.Prospect>({
  table: "prospects",
  schema: Models.Prospect,
  fields: { book_id: "text", first_name: "text", last_name: "text" }
})

// Client events write field by field (ClientWrites.ts: `changed_fields`, `field_signed_at`), not
// through the snapshot upsert of BatchSql.ts; the descriptor gives their model and typed columns.
const clients = define<Models.Client>({
  table: "clients",
  schema: Models.Client,
  fields: {
    book_id: "text",
    name: "text",
    status: "text",
    tier: "text",
    aum: "numeric",
    became_client_at: "timestamptz",
    type: "text"
  }
})

const meetings = define<Models.Meeting>({
  table: "meetings",
  schema: Models.Meeting,
  fields: {
    book_id: "text",
    title: "text",
    start_time: "timestamptz",
    end_time: "timestamptz",
    duration_seconds: "integer",
    meeting_link: "text",
    meeting_source: "text",
    meeting_type: "text",
    has_transcript: "boolean",
    has_recordings: "boolean",
    quick_summary: "text",
    ai_summary: "text",
    notepad: "text",
    event_participants: "jsonb",
    created_at: "timestamptz"
  },
  // Only `GET /v1/meetings/{id}` returns participants and transcript, only events the contacts,
  // businesses and users (spec §2.6): neither kind of snapshot erases what only the other carries.
  keptWhenAbsent: ["event_participants", "transcript", "contacts", "businesses", "users"],
  children: [
    {
      table: "meeting_households",
      parentColumn: "meeting_id",
      list: "households",
      columns: referenceColumns("household_id"),
      rows: (meeting) => numbered(meeting.households, (h) => ({ household_id: h.id, name: h.name }))
    },
    {
      table: "meeting_contacts",
      parentColumn: "meeting_id",
      list: "contacts",
      columns: referenceColumns("contact_id"),
      rows: (meeting) => numbered(meeting.contacts, (c) => ({ contact_id: c.id, name: c.name }))
    },
    {
      table: "meeting_businesses",
      parentColumn: "meeting_id",
      list: "businesses",
      columns: referenceColumns("business_id"),
      rows: (meeting) => numbered(meeting.businesses, (b) => ({ business_id: b.id, name: b.name }))
    },
    {
      table: "meeting_users",
      parentColumn: "meeting_id",
      list: "users",
      columns: { ordinal: "integer", user_id: "text", email: "text", first_name: "text", last_name: "text" },
      rows: (meeting) =>
        numbered(meeting.users, (u) => ({
          user_id: u.id,
          email: u.email,
          first_name: u.first_name,
          last_name: u.last_name
        }))
    }
  ],
  sightings: (meeting) => [
    ...meeting.households.flatMap((h) => household(h.id, h.name)),
    ...meeting.users.map((user): Sighting => ({ resource: "users", record: known(user) }))
  ]
})

const meetingTranscripts = define<Models.MeetingTranscript>({
  table: "meeting_transcripts",
  schema: Models.MeetingTranscript,
  // The transcript response has no id of its own: it is the meeting's (spec §2.6).
  idKey: "meeting_id",
  id: (transcript) => transcript.meeting_id,
  updatedAt: () => null,
  fields: {},
  derived: { has_transcript: ["boolean", (transcript) => transcript.transcript !== null] },
  children: [
    {
      table: "meeting_transcript_segments",
      parentColumn: "meeting_id",
      list: "transcript",
      columns: {
        ordinal: "integer",
        text: "text",
        participant_name: "text",
        participant: "jsonb",
        start_timestamp: "jsonb",
        end_timestamp: "jsonb"
      },
      rows: (transcript) =>
        numbered(transcript.transcript ?? [], (segment) => ({
          text: segment.text,
          participant_name: segment.participant?.name ?? null,
          participant: segment.participant,
          start_timestamp: segment.start_timestamp,
          end_timestamp: segment.end_timestamp
        }))
    }
  ]
})

const tasks = define<Models.Task>({
  table: "tasks",
  schema: Models.Task,
  fields: {
    book_id: "text",
    title: "text",
    description: "text",
    deadline_at: "timestamptz",
    completed_at: "timestamptz",
    all_day: "boolean",
    is_private: "boolean",
    status: "text",
    priority: "text",
    assigned_to: "jsonb",
    assigned_team: "jsonb",
    record: "jsonb",
    created_at: "timestamptz"
  },
  derived: {
    assigned_to_id: ["text", (task) => task.assigned_to?.id ?? null],
    assigned_team_id: ["text", (task) => task.assigned_team?.id ?? null],
    record_id: ["text", (task) => task.record?.id ?? null],
    record_type: ["text", (task) => task.record?.type ?? null],
    record_name: ["text", (task) => task.record?.name ?? null]
  },
  children: [
    {
      table: "task_tags",
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

const notes = define<Models.Note>({
  table: "notes",
  schema: Models.Note,
  fields: {
    book_id: "text",
    household_id: "text",
    created_by_id: "text",
    notable_id: "text",
    notable_type: "text",
    pinned: "boolean",
    hidden: "boolean",
    tag_ids: "text[]",
    content: "text",
    references: "jsonb",
    created_at: "timestamptz"
  },
  sightings: (note) => [
    ...household(note.household_id),
    ...(isHousehold(note.notable_type) ? household(note.notable_id) : [])
  ]
})

const projectTemplates = define<Models.ProjectTemplate>({
  table: "project_templates",
  schema: Models.ProjectTemplate,
  fields: {
    guid: "text",
    title: "text",
    description: "text",
    projectable_kind: "text",
    enable_kanban_view: "boolean",
    book_id: "text",
    book_name: "text",
    book_initials: "text",
    order_index: "integer",
    created_at: "timestamptz"
  },
  children: [
    {
      table: "project_template_milestones",
      parentColumn: "project_template_id",
      list: "project_milestones",
      columns: {
        ordinal: "integer",
        id: "text",
        title: "text",
        guid: "text",
        color: "text",
        sort_order: "integer",
        auto_advance_trigger: "text",
        created_at: "timestamptz",
        updated_at: "timestamptz"
      },
      rows: (template) =>
        numbered(template.project_milestones, (m) => ({
          id: m.id,
          title: m.title,
          guid: m.guid,
          color: m.color,
          sort_order: m.sort_order,
          auto_advance_trigger: m.auto_advance_trigger,
          created_at: m.created_at,
          updated_at: m.updated_at
        }))
    },
    {
      table: "project_template_milestone_outcomes",
      parentColumn: "project_template_id",
      list: "project_milestones",
      columns: {
        milestone_ordinal: "integer",
        ordinal: "integer",
        milestone_id: "text",
        id: "text",
        label: "text",
        destination: "text",
        default_comment: "text",
        target_project_milestone_id: "text",
        sort_order: "integer"
      },
      rows: (template) =>
        template.project_milestones.flatMap((milestone, milestoneOrdinal) =>
          numbered(milestone.project_milestone_outcomes, (outcome) => ({
            ...outcome,
            milestone_ordinal: milestoneOrdinal,
            milestone_id: milestone.id
          }))
        )
    },
    {
      table: "project_template_milestone_form_fields",
      parentColumn: "project_template_id",
      list: "project_milestones",
      columns: {
        milestone_ordinal: "integer",
        ordinal: "integer",
        milestone_id: "text",
        id: "text",
        label: "text",
        field_type: "text",
        guid: "text",
        placeholder: "text",
        household_record_source: "text",
        required: "boolean",
        sort_order: "integer",
        select_options: "text[]"
      },
      rows: (template) =>
        template.project_milestones.flatMap((milestone, milestoneOrdinal) =>
          numbered(milestone.project_milestone_form_fields, (field) => ({
            ...field,
            milestone_ordinal: milestoneOrdinal,
            milestone_id: milestone.id
          }))
        )
    },
    {
      table: "project_template_attachments",
      parentColumn: "project_template_id",
      list: "attachments",
      columns: {
        ordinal: "integer",
        file_name: "text",
        file_type: "text",
        file_size: "bigint",
        source: "text",
        signed_id: "text",
        download_url: "text",
        view_url: "text"
      },
      rows: (template) => numbered(template.attachments, (attachment) => attachment)
    }
  ]
})

const annuityContracts = define<Models.AnnuityContract>({
  table: "annuity_contracts",
  schema: Models.AnnuityContract,
  fields: {
    carrier_key: "text",
    carrier_name: "text",
    contract_number: "text",
    product_code: "text",
    product_name: "text",
    status: "text",
    tax_status: "text",
    registration_type: "text",
    data_provider: "text",
    notes: "text",
    contract_type: "text",
    established_on: "date",
    issued_on: "date",
    anniversary_on: "date",
    matures_on: "date",
    last_synced_at: "timestamptz",
    term_authority: "text",
    current_values: "jsonb",
    created_at: "timestamptz"
  },
  children: [
    {
      table: "annuity_contract_parties",
      parentColumn: "annuity_contract_id",
      list: "parties",
      columns: {
        ordinal: "integer",
        id: "text",
        role: "text",
        display_name: "text",
        participant_type: "text",
        participant_id: "text"
      },
      rows: (contract) => numbered(contract.parties, (party) => party)
    },
    {
      table: "annuity_contract_placements",
      parentColumn: "annuity_contract_id",
      list: "placements",
      columns: {
        ordinal: "integer",
        id: "text",
        book_id: "text",
        household_id: "text",
        business_id: "text",
        trust_id: "text",
        placement_authority: "text"
      },
      rows: (contract) => numbered(contract.placements, (placement) => placement)
    },
    {
      table: "annuity_contract_values",
      parentColumn: "annuity_contract_id",
      list: "values",
      columns: {
        ordinal: "integer",
        id: "text",
        kind: "text",
        amount: "numeric",
        as_of_date: "date",
        created_at: "timestamptz",
        updated_at: "timestamptz",
        source_kind: "text"
      },
      // The element's annuity_contract_id is the parent column (it is the parent's id).
      rows: (contract) =>
        numbered(contract.values, (value) => ({
          id: value.id,
          kind: value.kind,
          amount: value.amount,
          as_of_date: value.as_of_date,
          created_at: value.created_at,
          updated_at: value.updated_at,
          source_kind: value.source_kind
        }))
    }
  ],
  sightings: (contract) => contract.placements.flatMap((placement) => household(placement.household_id))
})

const financialAccounts = define<Models.FinancialAccount>({
  table: "financial_accounts",
  schema: Models.FinancialAccount,
  fields: {
    name: "text",
    institution_name: "text",
    account_number: "text",
    notes: "text",
    other_tax_advantaged_type_label: "text",
    book_id: "text",
    household_id: "text",
    account_type: "text",
    tax_advantaged_type: "text",
    balance_in_cents: "bigint",
    balance_as_of: "timestamptz",
    owner_ids: "text[]",
    custom_fields: "jsonb",
    created_at: "timestamptz"
  },
  sightings: (account) => household(account.household_id)
})

/** Every table of schema `crm` that holds a resource, by its name (the contract's table names). */
export const Tables = {
  books,
  users,
  teams,
  households,
  businesses,
  contacts,
  prospects,
  clients,
  meetings,
  meeting_transcripts: meetingTranscripts,
  tasks,
  notes,
  project_templates: projectTemplates,
  annuity_contracts: annuityContracts,
  financial_accounts: financialAccounts
} as const

/** A resource of the warehouse: the name of its table in schema `crm`. */
export type Resource = keyof typeof Tables

export const Resources = Object.keys(Tables) as ReadonlyArray<Resource>

/** The decoded record type of a resource. */
export type ResourceRecord<R extends Resource> = (typeof Tables)[R] extends TableDescriptor<infer A> ? A : never

/** Where a write came from (the contract's `source` values). */
export const Sources = ["poll", "crawl", "webhook", "write", "backfill", "reconcile"] as const
export type Source = (typeof Sources)[number]

export const isResource = (value: string): value is Resource => Object.hasOwn(Tables, value)
