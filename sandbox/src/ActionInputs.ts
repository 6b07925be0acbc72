/**
 * The inputs of the CRM users' actions, as `Schema` structs: the admin API decodes its bodies
 * with them and `POST /v1/contacts` and `/v1/prospects` decode theirs with `PersonInput` and
 * `ProspectInput`. Decoding checks shapes and formats (timestamps, E.164 numbers, dollar
 * amounts); references to other records are checked by the actions themselves.
 */
import { Schema } from "effect"

const Timestamp = Schema.String.check(
  Schema.makeFilter((value: string) => (Number.isNaN(Date.parse(value)) ? "expected an ISO 8601 timestamp" : undefined))
)
const Ids = Schema.Array(Schema.String)
const opt = Schema.optionalKey

export const CreateTaskInput = Schema.Struct({
  book_id: Schema.String,
  title: Schema.NonEmptyString,
  description: opt(Schema.String),
  deadline_at: opt(Schema.NullOr(Timestamp)),
  all_day: opt(Schema.Boolean),
  is_private: opt(Schema.Boolean),
  priority: opt(Schema.String),
  assigned_to_id: opt(Schema.NullOr(Schema.String)),
  assigned_team_id: opt(Schema.NullOr(Schema.String)),
  /** The related record; defaults to a household of the book. */
  record: opt(Schema.Struct({ type: Schema.Literals(["household", "contact", "business"]), id: Schema.String })),
  tag_ids: opt(Ids),
  /** A scheduled task emits no events (spec §6.4). */
  scheduled: opt(Schema.Boolean),
  /** An unapproved task emits no events until approved (spec §6.4). */
  approved: opt(Schema.Boolean)
})
export type CreateTaskInput = typeof CreateTaskInput.Type

export const UpdateTaskInput = Schema.Struct({
  title: opt(Schema.NonEmptyString),
  description: opt(Schema.String),
  deadline_at: opt(Schema.NullOr(Timestamp)),
  all_day: opt(Schema.Boolean),
  is_private: opt(Schema.Boolean),
  priority: opt(Schema.String),
  assigned_to_id: opt(Schema.NullOr(Schema.String)),
  assigned_team_id: opt(Schema.NullOr(Schema.String)),
  tag_ids: opt(Ids),
  scheduled: opt(Schema.Boolean),
  approved: opt(Schema.Boolean)
})
export type UpdateTaskInput = typeof UpdateTaskInput.Type

const Segment = Schema.Struct({
  text: Schema.String,
  participant: Schema.Struct({ name: Schema.String }),
  start_timestamp: Schema.String,
  end_timestamp: Schema.String
})

export const TranscriptInput = Schema.Struct({
  /** Null removes the transcript. */
  segments: opt(Schema.NullOr(Schema.Array(Segment))),
  /** Hidden transcripts are not served and never announced (default true). */
  visible: opt(Schema.Boolean)
})
export type TranscriptInput = typeof TranscriptInput.Type

const meetingFields = {
  title: opt(Schema.NonEmptyString),
  start_time: opt(Timestamp),
  duration_seconds: opt(Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))),
  meeting_link: opt(Schema.NullOr(Schema.String)),
  meeting_type: opt(Schema.String),
  household_ids: opt(Ids),
  contact_ids: opt(Ids),
  business_ids: opt(Ids),
  user_ids: opt(Ids),
  quick_summary: opt(Schema.NullOr(Schema.String)),
  ai_summary: opt(Schema.NullOr(Schema.String)),
  notepad: opt(Schema.NullOr(Schema.String))
}

export const CreateMeetingInput = Schema.Struct({
  book_id: Schema.String,
  ...meetingFields,
  meeting_source: opt(Schema.Literals(["instant", "calendar_event", "imported", "logged"])),
  transcript: opt(TranscriptInput)
})
export type CreateMeetingInput = typeof CreateMeetingInput.Type

export const UpdateMeetingInput = Schema.Struct(meetingFields)
export type UpdateMeetingInput = typeof UpdateMeetingInput.Type

export const CreateNoteInput = Schema.Struct({
  parent_type: Schema.Literals(["household", "contact", "business"]),
  parent_id: Schema.String,
  content: Schema.String,
  tag_ids: opt(Ids),
  pinned: opt(Schema.Boolean),
  hidden: opt(Schema.Boolean),
  created_by_id: opt(Schema.String)
})
export type CreateNoteInput = typeof CreateNoteInput.Type

export const UpdateNoteInput = Schema.Struct({
  content: opt(Schema.String),
  tag_ids: opt(Ids),
  pinned: opt(Schema.Boolean),
  hidden: opt(Schema.Boolean)
})
export type UpdateNoteInput = typeof UpdateNoteInput.Type

const clientFields = {
  status: opt(Schema.String),
  tier: opt(Schema.NullOr(Schema.String)),
  aum: opt(Schema.NullOr(Schema.String.check(Schema.isPattern(/^-?\d+(\.\d{1,2})?$/)))),
  became_client_at: opt(Schema.NullOr(Timestamp))
}

export const CreateClientInput = Schema.Struct({
  book_id: Schema.String,
  name: Schema.NonEmptyString,
  household_id: opt(Schema.NullOr(Schema.String)),
  ...clientFields
})
export type CreateClientInput = typeof CreateClientInput.Type

export const UpdateClientInput = Schema.Struct({ name: opt(Schema.NonEmptyString), ...clientFields })
export type UpdateClientInput = typeof UpdateClientInput.Type

const EmailInput = Schema.Struct({
  email: Schema.String.check(Schema.isPattern(/^[^\s@]+@[^\s@]+\.[^\s@]+$/, { message: "expected an email address" })),
  email_type: opt(Schema.String),
  is_primary: opt(Schema.Boolean)
})
const PhoneInput = Schema.Struct({
  phone_number: Schema.String.check(
    Schema.isPattern(/^\+[1-9]\d{1,14}$/, { message: "expected an E.164 phone number such as +15035550100" })
  ),
  phone_type: opt(Schema.String),
  is_primary: opt(Schema.Boolean)
})
const AddressInput = Schema.Struct({
  line1: opt(Schema.NullOr(Schema.String)),
  line2: opt(Schema.NullOr(Schema.String)),
  city: opt(Schema.NullOr(Schema.String)),
  state: opt(Schema.NullOr(Schema.String)),
  zip: opt(Schema.NullOr(Schema.String)),
  country_code: opt(Schema.NullOr(Schema.String)),
  address_type: opt(Schema.String),
  is_primary: opt(Schema.Boolean)
})
const NullableString = opt(Schema.NullOr(Schema.String))

/** Spec §2.2 request fields (contacts and prospects). Unknown members are ignored. */
export const PersonInput = Schema.Struct({
  book_id: Schema.String,
  first_name: NullableString,
  last_name: NullableString,
  middle_name: NullableString,
  preferred_name: NullableString,
  salutation: NullableString,
  suffix: NullableString,
  gender: opt(Schema.NullOr(Schema.Literals(["female", "male", "nonbinary", "other", "prefer_not_to_say"]))),
  designations: NullableString,
  email_addresses: opt(Schema.Array(EmailInput)),
  phone_numbers: opt(Schema.Array(PhoneInput)),
  addresses: opt(Schema.Array(AddressInput)),
  custom_fields: opt(Schema.Record(Schema.String, Schema.Unknown))
})
export type PersonInput = typeof PersonInput.Type

export const ProspectInput = Schema.Struct({ ...PersonInput.fields, status: opt(Schema.String) })
export type ProspectInput = typeof ProspectInput.Type

export const CreateBusinessInput = Schema.Struct({
  book_id: Schema.String,
  name: opt(Schema.NonEmptyString),
  industry: NullableString,
  website_url: NullableString,
  tax_id: NullableString,
  additional_info: NullableString,
  tag_ids: opt(Ids)
})
export type CreateBusinessInput = typeof CreateBusinessInput.Type

export const UpdateBusinessInput = Schema.Struct({
  name: opt(Schema.NonEmptyString),
  industry: NullableString,
  website_url: NullableString,
  tax_id: NullableString,
  additional_info: NullableString,
  tag_ids: opt(Ids)
})
export type UpdateBusinessInput = typeof UpdateBusinessInput.Type

const accountFields = {
  name: opt(Schema.NonEmptyString),
  institution_name: opt(Schema.String),
  notes: NullableString,
  account_type: opt(Schema.String),
  tax_advantaged_type: opt(Schema.String),
  balance_in_cents: opt(Schema.Int),
  household_id: NullableString,
  owner_ids: opt(Ids),
  custom_fields: opt(Schema.Record(Schema.String, Schema.Unknown))
}
export const CreateFinancialAccountInput = Schema.Struct({ book_id: Schema.String, ...accountFields })
export type CreateFinancialAccountInput = typeof CreateFinancialAccountInput.Type
export const UpdateFinancialAccountInput = Schema.Struct(accountFields)
export type UpdateFinancialAccountInput = typeof UpdateFinancialAccountInput.Type

const Dollars = Schema.String.check(
  Schema.isPattern(/^-?\d+(\.\d{1,2})?$/, { message: "expected dollars like 1234.56" })
)
const annuityFields = {
  status: opt(Schema.String),
  notes: NullableString,
  contract_type: opt(Schema.String),
  tax_status: opt(Schema.String),
  /** Sets the advisor valuation: `current_values.contract_value` and an `advisor` value entry. */
  contract_value: opt(Dollars)
}
export const CreateAnnuityContractInput = Schema.Struct({ book_id: Schema.String, ...annuityFields })
export type CreateAnnuityContractInput = typeof CreateAnnuityContractInput.Type
export const UpdateAnnuityContractInput = Schema.Struct(annuityFields)
export type UpdateAnnuityContractInput = typeof UpdateAnnuityContractInput.Type

export type DriftTarget = "businesses" | "financial_accounts" | "annuity_contracts"
export type DriftAction = "insert" | "update" | "delete"
