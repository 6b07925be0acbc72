/**
 * The sandbox's stored record shapes. Most rows are the API's own shapes (spec §2) so they can be
 * returned as they are; rows that the API renders with resolved references (tasks, meetings,
 * clients) keep ids and internal state (a task's `scheduled`/`approved` flags, a meeting's
 * transcript visibility) that `Store` turns into the API shape.
 */

export interface CompanyRow {
  readonly id: string
  readonly name: string
  readonly ordinal: number
}

export interface UserRow {
  readonly id: string
  readonly email: string
  readonly first_name: string
  readonly last_name: string
  /** Company ordinals the user belongs to. */
  readonly companies: ReadonlyArray<number>
  active: boolean
}

export interface TeamRow {
  readonly id: string
  readonly name: string
  readonly company: number
}

export interface BookRow {
  readonly id: string
  readonly name: string
  readonly initials: string
  readonly ordinal: number
  readonly company: number
  /** User ids with access to the book; the admin API revokes and grants. */
  readonly members: Set<string>
  readonly teams: ReadonlyArray<string>
  readonly created_at: string
  readonly updated_at: string
}

export interface TagRow {
  readonly id: string
  readonly name: string
}

export interface EmailAddress {
  readonly email: string
  readonly email_type: string
  readonly is_primary: boolean
}

export interface PhoneNumber {
  readonly phone_number: string
  readonly phone_type: string
  readonly is_primary: boolean
}

export interface BusinessPhoneNumber extends PhoneNumber {
  readonly extension: string | null
}

export interface Address {
  readonly line1: string
  readonly line2: string | null
  readonly city: string
  readonly state: string
  readonly zip: string
  readonly country_code: string
  readonly address_type: string
  readonly is_primary: boolean
}

export interface HouseholdRow {
  readonly id: string
  readonly book_id: string
  readonly name: string
  readonly created_at: string
  readonly updated_at: string
}

/** Spec §2.2. */
export interface ContactRow {
  readonly id: string
  readonly book_id: string
  readonly household_id: string | null
  readonly first_name: string | null
  readonly last_name: string | null
  readonly middle_name: string | null
  readonly preferred_name: string | null
  readonly salutation: string | null
  readonly suffix: string | null
  readonly gender: string | null
  readonly designations: string | null
  readonly email_addresses: ReadonlyArray<EmailAddress>
  readonly phone_numbers: ReadonlyArray<PhoneNumber>
  readonly addresses: ReadonlyArray<Address>
  readonly custom_fields: Readonly<Record<string, unknown>>
  readonly created_at: string
  readonly updated_at: string
}

/** A prospect: the contact fields plus a status and the record kind. */
export interface ProspectRow extends ContactRow {
  readonly status: string
  readonly type: "prospect"
}

/** Spec §2.9 plus the owning book. */
export interface ClientRow {
  readonly id: string
  readonly book_id: string
  readonly household_id: string | null
  readonly name: string
  readonly status: string
  readonly tier: string | null
  readonly aum: string | null
  readonly became_client_at: string | null
  readonly created_at: string
  readonly updated_at: string
}

/** Spec §2.3. */
export interface BusinessRow {
  readonly id: string
  readonly book_id: string
  readonly name: string
  readonly industry: string | null
  readonly website_url: string | null
  readonly tax_id: string | null
  readonly additional_info: string | null
  readonly created_at: string
  readonly updated_at: string
  readonly email_addresses: ReadonlyArray<EmailAddress>
  readonly phone_numbers: ReadonlyArray<BusinessPhoneNumber>
  readonly addresses: ReadonlyArray<Address>
  readonly tags: ReadonlyArray<TagRow>
}

export interface MilestoneOutcome {
  readonly id: string
  readonly label: string
  readonly destination: string
  readonly default_comment: string | null
  readonly target_project_milestone_id: string | null
  readonly sort_order: number
}

export interface MilestoneFormField {
  readonly id: string
  readonly label: string
  readonly field_type: string
  readonly guid: string
  readonly placeholder: string | null
  readonly household_record_source: string | null
  readonly required: boolean
  readonly sort_order: number
  readonly select_options: ReadonlyArray<string>
}

export interface Milestone {
  readonly id: string
  readonly title: string
  readonly project_template_id: string
  readonly guid: string
  readonly color: string
  readonly sort_order: number
  readonly auto_advance_trigger: string
  readonly created_at: string
  readonly updated_at: string
  readonly project_milestone_outcomes: ReadonlyArray<MilestoneOutcome>
  readonly project_milestone_form_fields: ReadonlyArray<MilestoneFormField>
}

export interface Attachment {
  readonly file_name: string
  readonly file_type: string
  readonly file_size: number
  readonly source: string
  readonly signed_id: string
  readonly download_url: string
  readonly view_url: string
}

/** Spec §2.4; `company` is internal. Company-wide templates have `book_id: null`. */
export interface ProjectTemplateRow {
  readonly id: string
  readonly guid: string
  readonly title: string
  readonly description: string
  readonly projectable_kind: "household" | "contact" | "business"
  readonly enable_kanban_view: boolean
  readonly book_id: string | null
  readonly book_name: string | null
  readonly book_initials: string | null
  readonly order_index: number
  readonly created_at: string
  readonly updated_at: string
  readonly project_milestones: ReadonlyArray<Milestone>
  readonly attachments: ReadonlyArray<Attachment>
  readonly company: number
}

export interface AnnuityParty {
  readonly id: string
  readonly role: string
  readonly display_name: string
  readonly participant_type: string
  readonly participant_id: string
}

export interface AnnuityPlacement {
  readonly id: string
  readonly book_id: string
  readonly household_id: string | null
  readonly business_id: string | null
  readonly trust_id: string | null
  readonly placement_authority: string
}

export interface AnnuityValue {
  readonly id: string
  readonly kind: string
  readonly amount: string
  readonly as_of_date: string
  readonly created_at: string
  readonly updated_at: string
  readonly annuity_contract_id: string
  readonly source_kind: string
}

/** Spec §2.5; the owning book is `placements[0].book_id`. */
export interface AnnuityContractRow {
  readonly id: string
  readonly carrier_key: string
  readonly carrier_name: string
  readonly contract_number: string
  readonly product_code: string
  readonly product_name: string
  readonly status: string
  readonly tax_status: string
  readonly registration_type: string
  readonly data_provider: string
  readonly notes: string | null
  readonly contract_type: string
  readonly established_on: string
  readonly issued_on: string
  readonly anniversary_on: string
  readonly matures_on: string | null
  readonly created_at: string
  readonly updated_at: string
  readonly last_synced_at: string | null
  readonly term_authority: string
  readonly parties: ReadonlyArray<AnnuityParty>
  readonly placements: ReadonlyArray<AnnuityPlacement>
  readonly current_values: Readonly<Record<string, string | null>>
  readonly values: ReadonlyArray<AnnuityValue>
}

/** Spec §2.5a. */
export interface FinancialAccountRow {
  readonly id: string
  readonly name: string
  readonly institution_name: string
  readonly account_number: string
  readonly notes: string | null
  readonly other_tax_advantaged_type_label: string | null
  readonly book_id: string
  readonly household_id: string | null
  readonly account_type: string
  readonly tax_advantaged_type: string
  readonly balance_in_cents: number
  readonly balance_as_of: string
  readonly owner_ids: ReadonlyArray<string>
  readonly custom_fields: Readonly<Record<string, unknown>>
  readonly created_at: string
  readonly updated_at: string
}

export interface TranscriptSegment {
  readonly text: string
  readonly participant: { readonly name: string }
  readonly start_timestamp: string
  readonly end_timestamp: string
}

export interface EventParticipant {
  readonly id: string
  readonly name: string
  readonly email: string | null
  readonly participant_type: string
  readonly response_status: string
}

/** Spec §2.6 with linked records kept as ids and the transcript's visibility. */
export interface MeetingRow {
  readonly id: string
  readonly book_id: string
  readonly title: string
  readonly start_time: string
  readonly end_time: string
  readonly duration_seconds: number
  readonly meeting_link: string | null
  readonly meeting_source: "instant" | "calendar_event" | "imported" | "logged"
  readonly meeting_type: string
  readonly household_ids: ReadonlyArray<string>
  readonly contact_ids: ReadonlyArray<string>
  readonly business_ids: ReadonlyArray<string>
  readonly user_ids: ReadonlyArray<string>
  readonly has_recordings: boolean
  readonly quick_summary: string | null
  readonly ai_summary: string | null
  readonly notepad: string | null
  readonly transcript: ReadonlyArray<TranscriptSegment> | null
  /** A hidden transcript is not visible to advisors: not served and never announced. */
  readonly transcript_visible: boolean
  readonly event_participants: ReadonlyArray<EventParticipant>
  readonly created_at: string
  readonly updated_at: string
}

export interface RecordRef {
  readonly id: string
  readonly type: "household" | "contact" | "business"
  readonly name: string
}

/** Spec §2.7 with assignees and tags as ids, plus the flags that silence its events. */
export interface TaskRow {
  readonly id: string
  readonly book_id: string
  readonly title: string
  readonly description: string
  readonly deadline_at: string | null
  readonly completed_at: string | null
  readonly all_day: boolean
  readonly is_private: boolean
  readonly status: "todo" | "done"
  readonly priority: string
  readonly created_at: string
  readonly updated_at: string
  readonly assigned_to_id: string | null
  readonly assigned_team_id: string | null
  readonly record: RecordRef
  readonly tag_ids: ReadonlyArray<string>
  /** Created by a schedule for a future date; emits no events. */
  readonly scheduled: boolean
  /** Awaiting approval (e.g. suggested from a meeting); emits no events until approved. */
  readonly approved: boolean
}

export type NotableType = "Household" | "Contact" | "Business"

/** Spec §2.8. */
export interface NoteRow {
  readonly id: string
  readonly book_id: string
  readonly household_id: string | null
  readonly created_by_id: string
  readonly notable_id: string
  readonly notable_type: NotableType
  readonly pinned: boolean
  readonly hidden: boolean
  readonly tag_ids: ReadonlyArray<string>
  readonly content: string
  readonly references: ReadonlyArray<{ readonly id: string; readonly type: string }>
  readonly created_at: string
  readonly updated_at: string
}
