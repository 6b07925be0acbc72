/**
 * The CRM's resources as a client reads them (spec §2), as `Schema`s: one per resource, its nested
 * elements, the list envelope, and the request bodies crm-sync sends.
 *
 * Reading is tolerant (see `Fields.ts`): unknown keys are ignored by the schema (the warehouse keeps
 * the whole object in `raw`), enumerations are open, and apart from `id` and, where the spec gives
 * one, `updated_at` (the forward-only guard needs it), an absent or null field decodes as null and
 * an absent nested list as `[]`. A present value of the wrong type fails the record.
 */
import * as Schema from "effect/Schema"
import {
  CalendarDate,
  Cents,
  DecimalAmount,
  Dollars,
  E164,
  Id,
  Int32,
  Int64,
  JsonObject,
  List,
  MaskedNumber,
  Nullable,
  OpenEnum,
  PhoneNumber,
  Timestamp
} from "./Fields.ts"

const NullableString = Nullable(Schema.String)
const NullableBoolean = Nullable(Schema.Boolean)
const NullableTimestamp = Nullable(Timestamp)

// ---------------------------------------------------------------------------------------------
// Shared elements
// ---------------------------------------------------------------------------------------------

/** `{email, email_type, is_primary}` (spec §2.2, §2.3). */
export const EmailAddress = Schema.Struct({
  email: NullableString,
  email_type: NullableString,
  is_primary: NullableBoolean
})
export type EmailAddress = typeof EmailAddress.Type

/** `{phone_number, phone_type, is_primary, extension}` (spec §2.2; `extension` on businesses, §2.3). */
export const PhoneNumberEntry = Schema.Struct({
  phone_number: Nullable(PhoneNumber),
  phone_type: NullableString,
  is_primary: NullableBoolean,
  extension: NullableString
})
export type PhoneNumberEntry = typeof PhoneNumberEntry.Type

/** `{line1, line2, city, state, zip, country_code, address_type, is_primary}` (spec §2.2, §2.3). */
export const Address = Schema.Struct({
  address_type: NullableString,
  is_primary: NullableBoolean,
  line1: NullableString,
  line2: NullableString,
  city: NullableString,
  state: NullableString,
  zip: NullableString,
  country_code: NullableString
})
export type Address = typeof Address.Type

/** A tag: only `id` and `name` are shown (spec §2.1). */
export const Tag = Schema.Struct({ id: Id, name: NullableString })
export type Tag = typeof Tag.Type

/** A reference to another record in the "household pattern" `{id, name}` (spec §2.6). */
export const NamedReference = Schema.Struct({ id: Id, name: NullableString })
export type NamedReference = typeof NamedReference.Type

// ---------------------------------------------------------------------------------------------
// Books, users, teams, households (spec §2.1: fields beyond id and name not shown)
// ---------------------------------------------------------------------------------------------

/**
 * A user: `id` and `name` per §2.1; meeting snapshots (§2.6) and `/v1/me` (§2.11) also show
 * `email`, `first_name` and `last_name`, and a task's `assigned_to` (§2.7) shows `email`.
 */
export const User = Schema.Struct({
  id: Id,
  name: NullableString,
  email: NullableString,
  first_name: NullableString,
  last_name: NullableString
})
export type User = typeof User.Type

export const Team = Schema.Struct({ id: Id, name: NullableString })
export type Team = typeof Team.Type

export const Household = Schema.Struct({ id: Id, name: NullableString })
export type Household = typeof Household.Type

/** A book from `GET /v1/books`: each carries `users[].id` and `teams[].id` (spec §4, §2.7). */
export const Book = Schema.Struct({
  id: Id,
  name: NullableString,
  users: List(User),
  teams: List(Team)
})
export type Book = typeof Book.Type

// ---------------------------------------------------------------------------------------------
// Contacts, prospects, clients
// ---------------------------------------------------------------------------------------------

export const Gender = OpenEnum(["female", "male", "nonbinary", "other", "prefer_not_to_say"])

/** A contact as returned (spec §2.2 response fields, plus the request fields it echoes). */
export const Contact = Schema.Struct({
  id: Id,
  book_id: NullableString,
  first_name: NullableString,
  last_name: NullableString,
  middle_name: NullableString,
  preferred_name: NullableString,
  salutation: NullableString,
  suffix: NullableString,
  gender: Nullable(Gender),
  designations: NullableString,
  email_addresses: List(EmailAddress),
  phone_numbers: List(PhoneNumberEntry),
  addresses: List(Address),
  custom_fields: Nullable(JsonObject),
  created_at: NullableTimestamp,
  updated_at: Timestamp
})
export type Contact = typeof Contact.Type

/**
 * The body of `POST /v1/contacts` (spec §2.2). Strict where the API is: phone numbers must be
 * E.164 and `book_id` is required. Which other fields are required is not shown (§4 Gaps).
 */
export const ContactCreate = Schema.Struct({
  book_id: Id,
  first_name: Schema.optionalKey(Schema.String),
  last_name: Schema.optionalKey(Schema.String),
  middle_name: Schema.optionalKey(Schema.String),
  preferred_name: Schema.optionalKey(Schema.String),
  salutation: Schema.optionalKey(Schema.String),
  suffix: Schema.optionalKey(Schema.String),
  gender: Schema.optionalKey(Gender),
  designations: Schema.optionalKey(Schema.String),
  email_addresses: Schema.optionalKey(
    Schema.Array(Schema.Struct({ email: Schema.String, email_type: Schema.String, is_primary: Schema.Boolean }))
  ),
  phone_numbers: Schema.optionalKey(
    Schema.Array(Schema.Struct({ phone_number: E164, phone_type: Schema.String, is_primary: Schema.Boolean }))
  ),
  addresses: Schema.optionalKey(
    Schema.Array(
      Schema.Struct({
        line1: Schema.optionalKey(Schema.String),
        line2: Schema.optionalKey(Schema.String),
        city: Schema.optionalKey(Schema.String),
        state: Schema.optionalKey(Schema.String),
        zip: Schema.optionalKey(Schema.String),
        country_code: Schema.optionalKey(Schema.String),
        address_type: Schema.String,
        is_primary: Schema.Boolean
      })
    )
  ),
  custom_fields: Schema.optionalKey(JsonObject)
})
export type ContactCreate = typeof ContactCreate.Type

/** A prospect: `id`, `book_id`, `first_name`, `last_name`; other fields not shown (spec §4, §6.4). */
export const Prospect = Schema.Struct({
  id: Id,
  book_id: NullableString,
  first_name: NullableString,
  last_name: NullableString,
  // Not among the fields the spec shows (§2.1), but the API returns it: the forward-only guard's key.
  updated_at: NullableTimestamp
})
export type Prospect = typeof Prospect.Type

/** The body of `POST /v1/prospects` (spec §4): includes `book_id`, `first_name`, `last_name`. */
export const ProspectCreate = Schema.Struct({
  book_id: Id,
  first_name: Schema.String,
  last_name: Schema.String
})
export type ProspectCreate = typeof ProspectCreate.Type

/**
 * A client as delivered in events (spec §2.9). `tier`, `aum` and `became_client_at` may be null;
 * `type` is the record kind. `book_id` is not a client field but the events' context field (§6.2),
 * kept when the record is stored from an event.
 */
export const Client = Schema.Struct({
  id: Id,
  book_id: NullableString,
  name: NullableString,
  status: NullableString,
  tier: NullableString,
  aum: Nullable(DecimalAmount),
  became_client_at: NullableTimestamp,
  type: Nullable(OpenEnum(["client"]))
})
export type Client = typeof Client.Type

// ---------------------------------------------------------------------------------------------
// Businesses
// ---------------------------------------------------------------------------------------------

/** A business (spec §2.3). */
export const Business = Schema.Struct({
  id: Id,
  book_id: NullableString,
  name: NullableString,
  industry: NullableString,
  website_url: NullableString,
  tax_id: NullableString,
  additional_info: NullableString,
  created_at: NullableTimestamp,
  updated_at: Timestamp,
  email_addresses: List(EmailAddress),
  phone_numbers: List(PhoneNumberEntry),
  addresses: List(Address),
  tags: List(Tag)
})
export type Business = typeof Business.Type

// ---------------------------------------------------------------------------------------------
// Project templates (spec §2.4)
// ---------------------------------------------------------------------------------------------

export const ProjectMilestoneOutcome = Schema.Struct({
  id: Id,
  label: NullableString,
  destination: NullableString,
  default_comment: NullableString,
  target_project_milestone_id: NullableString,
  sort_order: Nullable(Int32)
})
export type ProjectMilestoneOutcome = typeof ProjectMilestoneOutcome.Type

export const ProjectMilestoneFormField = Schema.Struct({
  id: Id,
  label: NullableString,
  field_type: NullableString,
  guid: NullableString,
  placeholder: NullableString,
  household_record_source: NullableString,
  required: NullableBoolean,
  sort_order: Nullable(Int32),
  select_options: List(Schema.String)
})
export type ProjectMilestoneFormField = typeof ProjectMilestoneFormField.Type

export const ProjectMilestone = Schema.Struct({
  id: Id,
  title: NullableString,
  project_template_id: NullableString,
  guid: NullableString,
  color: NullableString,
  sort_order: Nullable(Int32),
  auto_advance_trigger: NullableString,
  created_at: NullableTimestamp,
  updated_at: NullableTimestamp,
  project_milestone_outcomes: List(ProjectMilestoneOutcome),
  project_milestone_form_fields: List(ProjectMilestoneFormField)
})
export type ProjectMilestone = typeof ProjectMilestone.Type

export const ProjectTemplateAttachment = Schema.Struct({
  file_name: NullableString,
  file_type: NullableString,
  file_size: Nullable(Int64),
  source: NullableString,
  signed_id: NullableString,
  download_url: NullableString,
  view_url: NullableString
})
export type ProjectTemplateAttachment = typeof ProjectTemplateAttachment.Type

export const ProjectableKind = OpenEnum(["household", "contact", "business"])

export const ProjectTemplate = Schema.Struct({
  id: Id,
  guid: NullableString,
  title: NullableString,
  description: NullableString,
  projectable_kind: Nullable(ProjectableKind),
  enable_kanban_view: NullableBoolean,
  book_id: NullableString,
  book_name: NullableString,
  book_initials: NullableString,
  order_index: Nullable(Int32),
  created_at: NullableTimestamp,
  updated_at: Timestamp,
  project_milestones: List(ProjectMilestone),
  attachments: List(ProjectTemplateAttachment)
})
export type ProjectTemplate = typeof ProjectTemplate.Type

// ---------------------------------------------------------------------------------------------
// Annuity contracts (spec §2.5) and financial accounts (spec §2.5a)
// ---------------------------------------------------------------------------------------------

export const AnnuityParty = Schema.Struct({
  id: Nullable(Id),
  role: NullableString,
  display_name: NullableString,
  participant_type: Nullable(OpenEnum(["Person"])),
  participant_id: NullableString
})
export type AnnuityParty = typeof AnnuityParty.Type

export const AnnuityPlacement = Schema.Struct({
  id: Nullable(Id),
  book_id: NullableString,
  household_id: NullableString,
  business_id: NullableString,
  trust_id: NullableString,
  placement_authority: NullableString
})
export type AnnuityPlacement = typeof AnnuityPlacement.Type

/** A valuation; `amount` is dollars as a decimal string (spec §2.5). */
export const AnnuityValue = Schema.Struct({
  id: Nullable(Id),
  kind: NullableString,
  amount: Nullable(Dollars),
  as_of_date: Nullable(CalendarDate),
  created_at: NullableTimestamp,
  updated_at: NullableTimestamp,
  annuity_contract_id: NullableString,
  source_kind: NullableString
})
export type AnnuityValue = typeof AnnuityValue.Type

export const AnnuityContract = Schema.Struct({
  id: Id,
  carrier_key: NullableString,
  carrier_name: NullableString,
  contract_number: Nullable(MaskedNumber),
  product_code: NullableString,
  product_name: NullableString,
  status: NullableString,
  tax_status: NullableString,
  registration_type: NullableString,
  data_provider: NullableString,
  notes: NullableString,
  contract_type: NullableString,
  established_on: Nullable(CalendarDate),
  issued_on: Nullable(CalendarDate),
  anniversary_on: Nullable(CalendarDate),
  matures_on: Nullable(CalendarDate),
  created_at: NullableTimestamp,
  updated_at: Timestamp,
  last_synced_at: NullableTimestamp,
  term_authority: Nullable(OpenEnum(["advisor"])),
  parties: List(AnnuityParty),
  placements: List(AnnuityPlacement),
  current_values: Nullable(JsonObject),
  values: List(AnnuityValue)
})
export type AnnuityContract = typeof AnnuityContract.Type

export const FinancialAccount = Schema.Struct({
  id: Id,
  name: NullableString,
  institution_name: NullableString,
  account_number: Nullable(MaskedNumber),
  notes: NullableString,
  other_tax_advantaged_type_label: NullableString,
  book_id: NullableString,
  household_id: NullableString,
  account_type: NullableString,
  tax_advantaged_type: NullableString,
  balance_in_cents: Nullable(Cents),
  balance_as_of: NullableTimestamp,
  owner_ids: List(Schema.String),
  custom_fields: Nullable(JsonObject),
  created_at: NullableTimestamp,
  updated_at: Timestamp
})
export type FinancialAccount = typeof FinancialAccount.Type

// ---------------------------------------------------------------------------------------------
// Meetings and transcripts (spec §2.6)
// ---------------------------------------------------------------------------------------------

export const MeetingSource = OpenEnum(["instant", "calendar_event", "imported", "logged"])

export const Meeting = Schema.Struct({
  id: Id,
  book_id: NullableString,
  title: NullableString,
  start_time: NullableTimestamp,
  end_time: NullableTimestamp,
  duration_seconds: Nullable(Int32),
  meeting_link: NullableString,
  meeting_source: Nullable(MeetingSource),
  meeting_type: NullableString,
  households: List(NamedReference),
  // Webhook snapshots only (spec §2.6); a meeting read leaves them out.
  contacts: List(NamedReference),
  businesses: List(NamedReference),
  users: List(User),
  has_transcript: NullableBoolean,
  has_recordings: NullableBoolean,
  quick_summary: NullableString,
  ai_summary: NullableString,
  notepad: NullableString,
  created_at: NullableTimestamp,
  updated_at: Timestamp,
  // The single-meeting read only; element fields are not shown, so they are kept as JSON.
  transcript: Nullable(Schema.Array(Schema.Unknown)),
  event_participants: Nullable(Schema.Array(Schema.Unknown))
})
export type Meeting = typeof Meeting.Type

/** Transcript timestamps: "format: not shown" (spec §2.6), so a string or a number, kept as JSON. */
export const TranscriptTimestamp = Schema.Union([Schema.String, Schema.Finite])

export const TranscriptSegment = Schema.Struct({
  text: NullableString,
  participant: Nullable(Schema.Struct({ name: NullableString })),
  start_timestamp: Nullable(TranscriptTimestamp),
  end_timestamp: Nullable(TranscriptTimestamp)
})
export type TranscriptSegment = typeof TranscriptSegment.Type

/** `GET /v1/meetings/{meeting_id}/transcript`: `transcript` is null when the meeting has none. */
export const MeetingTranscript = Schema.Struct({
  meeting_id: Id,
  transcript: Nullable(Schema.Array(TranscriptSegment))
})
export type MeetingTranscript = typeof MeetingTranscript.Type

// ---------------------------------------------------------------------------------------------
// Tasks and notes (as delivered in events and by their single reads)
// ---------------------------------------------------------------------------------------------

export const TaskStatus = OpenEnum(["todo", "done"])

/** The related record of a task, `{id, type, name}`; `type` is for example `household` (spec §2.7). */
export const TaskRecord = Schema.Struct({
  id: Id,
  type: Nullable(OpenEnum(["household", "contact", "business"])),
  name: NullableString
})
export type TaskRecord = typeof TaskRecord.Type

export const Task = Schema.Struct({
  id: Id,
  book_id: NullableString,
  title: NullableString,
  description: NullableString,
  deadline_at: NullableTimestamp,
  completed_at: NullableTimestamp,
  all_day: NullableBoolean,
  is_private: NullableBoolean,
  status: Nullable(TaskStatus),
  // "a value of the form <level>_priority": the levels are not shown.
  priority: NullableString,
  created_at: NullableTimestamp,
  updated_at: Timestamp,
  assigned_to: Nullable(Schema.Struct({ id: Id, name: NullableString, email: NullableString })),
  assigned_team: Nullable(Team),
  record: Nullable(TaskRecord),
  tags: List(Tag)
})
export type Task = typeof Task.Type

export const Note = Schema.Struct({
  id: Id,
  book_id: NullableString,
  household_id: NullableString,
  created_by_id: NullableString,
  notable_id: NullableString,
  notable_type: Nullable(OpenEnum(["household", "contact", "business"])),
  pinned: NullableBoolean,
  hidden: NullableBoolean,
  tag_ids: List(Schema.String),
  content: NullableString,
  // Element fields not shown (spec §2.8): kept as JSON.
  references: Nullable(Schema.Array(Schema.Unknown)),
  created_at: NullableTimestamp,
  updated_at: Timestamp
})
export type Note = typeof Note.Type

// ---------------------------------------------------------------------------------------------
// Webhook subscription, the authenticated user, the list envelope
// ---------------------------------------------------------------------------------------------

export const WebhookSubscription = Schema.Struct({
  id: Id,
  user_id: Schema.String,
  created_at: Timestamp
})
export type WebhookSubscription = typeof WebhookSubscription.Type

/** `GET /v1/me` (spec §2.11): `api_access.can_write` says whether writes are enabled (§5 rule 2). */
export const Me = Schema.Struct({
  id: Id,
  email: NullableString,
  first_name: NullableString,
  last_name: NullableString,
  api_access: Schema.Struct({
    auth_type: OpenEnum(["personal", "oauth"]),
    scope: NullableString,
    can_write: Schema.Boolean
  })
})
export type Me = typeof Me.Type

/** The four pagination members are integers (spec §2.1). */
export const Pagination = Schema.Struct({
  current_page: Schema.Int,
  total_pages: Schema.Int,
  total_count: Schema.Int,
  per_page: Schema.Int
})
export type Pagination = typeof Pagination.Type

/** `{data: [<item>...], pagination}` (spec §2.1). */
export const ListEnvelope = <S extends Schema.Top>(item: S) =>
  Schema.Struct({ data: Schema.Array(item), pagination: Pagination })

/**
 * A record not yet decoded: what a crawler hands to the warehouse, which decodes each one itself
 * so that one bad record is stored with its error instead of failing the page.
 */
export const RawRecord = JsonObject
export type RawRecord = typeof RawRecord.Type

/** A page of records kept raw: `ListEnvelope(RawRecord)`. */
export const RawListEnvelope = ListEnvelope(RawRecord)
export type RawListEnvelope = typeof RawListEnvelope.Type

/** The error body of spec §7: `{error, detail}`. */
export const ErrorBody = Schema.Struct({ error: Schema.String, detail: NullableString })
export type ErrorBody = typeof ErrorBody.Type
