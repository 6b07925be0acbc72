/**
 * What the CRM's own users do: create, change and delete records, with the webhook events that
 * spec §3 and §6.4 attach to each change. The admin API and the API's write endpoints both go
 * through here, so a prospect created by `POST /v1/prospects` and one created through the admin
 * API emit the same `prospect.created`. Inputs are `Schema` structs, shared with the admin API's
 * decoding. Page-drift faults also mutate through here (without events: drift touches only kinds
 * that have none).
 */
import { Context, Effect, Layer, Schema } from "effect"
import type { Collection } from "./Collection.ts"
import { type ApiError, notFound, validationFailed } from "./errors.ts"
import { notableTypeOf, type World } from "./Generator.ts"
import type { Rng } from "./Prng.ts"
import type {
  Address,
  AnnuityContractRow,
  BusinessRow,
  ClientRow,
  ContactRow,
  EmailAddress,
  FinancialAccountRow,
  NoteRow,
  PhoneNumber,
  ProspectRow,
  RecordRef,
  TaskRow,
  TranscriptSegment
} from "./Records.ts"
import { iso, SandboxClock } from "./SandboxClock.ts"
import { clientApi, meetingApi, noteApi, prospectApi, taskApi, hasVisibleTranscript } from "./Serializers.ts"
import { SandboxStore } from "./Store.ts"
import { type EventType, SandboxWebhooks, type Subject } from "./Webhooks.ts"

// ---------------------------------------------------------------------------------------------
// Inputs (the admin API decodes its bodies with these too)

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

// ---------------------------------------------------------------------------------------------
// Checks and row building shared by the actions (422 for bad references, 404 for unknown ids)

const bookOf = (world: World, bookId: string) => {
  const book = world.booksById.get(bookId)
  return book === undefined ? Effect.fail(validationFailed(`book_id: unknown book ${bookId}`)) : Effect.succeed(book)
}

const find = <Row extends { readonly id: string }>(collection: Collection<Row>, id: string) => {
  const index = collection.indexOf(id)
  const row = index === undefined ? undefined : collection.get(index)
  return index === undefined || row === undefined
    ? Effect.fail(notFound(`${collection.kind} ${id} not found`))
    : Effect.succeed({ index, row })
}

const subjectOf = (
  world: World,
  kind: Subject["kind"],
  index: number,
  id: string,
  bookId: string,
  householdId?: string | null
): Subject => ({
  kind,
  index,
  id,
  book: world.booksById.get(bookId)!.ordinal,
  ...(householdId === undefined ? {} : { householdId })
})

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

const checkTags = (world: World, company: number, tagIds: ReadonlyArray<string> | undefined) => {
  const unknown = (tagIds ?? []).filter((id) => !world.tags[company]!.some((tag) => tag.id === id))
  return unknown.length === 0 ? Effect.void : Effect.fail(validationFailed(`unknown tag ids: ${unknown.join(", ")}`))
}

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

const checkLinks = (world: World, bookId: string, input: UpdateMeetingInput) => {
  const book = world.booksById.get(bookId)!
  const bad: Array<string> = []
  for (const id of input.household_ids ?? []) if (world.households.getById(id)?.book_id !== bookId) bad.push(id)
  for (const id of input.contact_ids ?? []) if (world.contacts.getById(id)?.book_id !== bookId) bad.push(id)
  for (const id of input.business_ids ?? []) if (world.businesses.getById(id)?.book_id !== bookId) bad.push(id)
  for (const id of input.user_ids ?? []) if (!book.members.has(id)) bad.push(id)
  return bad.length === 0
    ? Effect.void
    : Effect.fail(validationFailed(`linked records not found in book ${bookId}: ${bad.join(", ")}`))
}

const meetingTimes = (start: string, duration: number) => ({
  start_time: start,
  end_time: iso(Date.parse(start) + duration * 1000),
  duration_seconds: duration
})

const personRow = (world: World, input: PersonInput, timestamp: string) => {
  const customKeys = Object.keys(input.custom_fields ?? {})
  const unknownKeys = customKeys.filter((key) => !world.customFields.contact.includes(key))
  if (unknownKeys.length > 0) {
    return Effect.fail(
      validationFailed(
        `custom_fields: unknown keys ${unknownKeys.join(", ")}; defined keys: ${world.customFields.contact.join(", ")}`
      )
    )
  }
  const emails: Array<EmailAddress> = (input.email_addresses ?? []).map((email) => ({
    email: email.email.trim().toLowerCase(),
    email_type: email.email_type ?? "personal",
    is_primary: email.is_primary ?? false
  }))
  const phones: Array<PhoneNumber> = (input.phone_numbers ?? []).map((phone) => ({
    phone_number: phone.phone_number,
    phone_type: phone.phone_type ?? "mobile",
    is_primary: phone.is_primary ?? false
  }))
  const addresses: Array<Address> = (input.addresses ?? []).map((address) => ({
    line1: address.line1 ?? "",
    line2: address.line2 ?? null,
    city: address.city ?? "",
    state: address.state ?? "",
    zip: address.zip ?? "",
    country_code: address.country_code ?? "US",
    address_type: address.address_type ?? "home",
    is_primary: address.is_primary ?? false
  }))
  return Effect.succeed({
    book_id: input.book_id,
    household_id: null,
    first_name: input.first_name ?? null,
    last_name: input.last_name ?? null,
    middle_name: input.middle_name ?? null,
    preferred_name: input.preferred_name ?? null,
    salutation: input.salutation ?? null,
    suffix: input.suffix ?? null,
    gender: input.gender ?? null,
    designations: input.designations ?? null,
    email_addresses: emails,
    phone_numbers: phones,
    addresses,
    custom_fields: input.custom_fields ?? {},
    created_at: timestamp,
    updated_at: timestamp
  })
}

const blank = (value: string | null | undefined) => value == null || value.trim() === ""

const tagsOf = (world: World, company: number, tagIds: ReadonlyArray<string>) =>
  world.tags[company]!.filter((tag) => tagIds.includes(tag.id))

const checkAccountLinks = (world: World, bookId: string, input: UpdateFinancialAccountInput) => {
  const bad = [
    ...(input.household_id != null && world.households.getById(input.household_id)?.book_id !== bookId
      ? [input.household_id]
      : []),
    ...(input.owner_ids ?? []).filter((owner) => world.contacts.getById(owner)?.book_id !== bookId)
  ]
  const unknownKeys = Object.keys(input.custom_fields ?? {}).filter(
    (key) => !world.customFields.financial_account.includes(key)
  )
  if (bad.length > 0) return Effect.fail(validationFailed(`not found in book ${bookId}: ${bad.join(", ")}`))
  if (unknownKeys.length > 0) {
    return Effect.fail(validationFailed(`custom_fields: unknown keys ${unknownKeys.join(", ")}`))
  }
  return Effect.void
}

/** Only advisor valuations can be edited (§2.5): a new contract value is an `advisor` entry. */
const withContractValue = (contract: AnnuityContractRow, amount: string | undefined, timestamp: string) => {
  if (amount === undefined) return contract
  const date = timestamp.slice(0, 10)
  const advisorValue = {
    id: `acv_${contract.id.slice(3)}_adv`,
    kind: "contract_value",
    amount,
    as_of_date: date,
    created_at: timestamp,
    updated_at: timestamp,
    annuity_contract_id: contract.id,
    source_kind: "advisor"
  }
  return {
    ...contract,
    current_values: { ...contract.current_values, contract_value: amount, as_of_date: date },
    values: [...contract.values.filter((value) => value.id !== advisorValue.id), advisorValue]
  }
}

type Api<A> = Effect.Effect<A, ApiError>

export class SandboxActions extends Context.Service<
  SandboxActions,
  {
    createTask(input: CreateTaskInput): Api<ReturnType<typeof taskApi>>
    updateTask(id: string, input: UpdateTaskInput): Api<ReturnType<typeof taskApi>>
    completeTask(id: string): Api<ReturnType<typeof taskApi>>
    reopenTask(id: string): Api<ReturnType<typeof taskApi>>
    deleteTask(id: string): Api<void>
    createMeeting(input: CreateMeetingInput): Api<ReturnType<typeof meetingApi>>
    updateMeeting(id: string, input: UpdateMeetingInput): Api<ReturnType<typeof meetingApi>>
    setTranscript(id: string, input: TranscriptInput): Api<ReturnType<typeof meetingApi>>
    deleteMeeting(id: string): Api<void>
    createNote(input: CreateNoteInput): Api<NoteRow>
    updateNote(id: string, input: UpdateNoteInput): Api<NoteRow>
    deleteNote(id: string): Api<void>
    createClient(input: CreateClientInput): Api<ReturnType<typeof clientApi>>
    updateClient(id: string, input: UpdateClientInput): Api<ReturnType<typeof clientApi>>
    /** Validates and stores a contact (`POST /v1/contacts`); no event (its shape is not in the spec). */
    createContact(input: PersonInput): Api<ContactRow>
    /** Validates and stores a prospect (`POST /v1/prospects`); emits `prospect.created`. */
    createProspect(input: ProspectInput): Api<ProspectRow>
    createBusiness(input: CreateBusinessInput): Api<BusinessRow>
    updateBusiness(id: string, input: UpdateBusinessInput): Api<BusinessRow>
    deleteBusiness(id: string): Api<void>
    createFinancialAccount(input: CreateFinancialAccountInput): Api<FinancialAccountRow>
    updateFinancialAccount(id: string, input: UpdateFinancialAccountInput): Api<FinancialAccountRow>
    deleteFinancialAccount(id: string): Api<void>
    createAnnuityContract(input: CreateAnnuityContractInput): Api<AnnuityContractRow>
    updateAnnuityContract(id: string, input: UpdateAnnuityContractInput): Api<AnnuityContractRow>
    deleteAnnuityContract(id: string): Api<void>
    /** A project template (book or company-wide) disappears from the listings (no event). */
    deleteProjectTemplate(id: string): Api<void>
    /**
     * One page-drift mutation among the books a crawl sees: `insert` a record, `update` one, or
     * `delete` one from before `offset` (so the crawl's later pages shift and it skips a record).
     */
    drift(
      target: DriftTarget,
      action: DriftAction,
      books: ReadonlyArray<number>,
      offset: number,
      rng: Rng
    ): Effect.Effect<{ readonly action: DriftAction; readonly id: string } | undefined>
  }
>()("crm-sync/sandbox/SandboxActions") {
  static readonly layer = Layer.effect(
    SandboxActions,
    Effect.gen(function* () {
      const store = yield* SandboxStore
      const clock = yield* SandboxClock
      const webhooks = yield* SandboxWebhooks

      const now = Effect.map(clock.now, iso)

      // --- tasks -------------------------------------------------------------------------------

      const emitTask = Effect.fnUntraced(function* (
        world: World,
        index: number,
        task: TaskRow,
        types: ReadonlyArray<EventType>
      ) {
        if (!eligible(task)) return
        const subject = subjectOf(world, "task", index, task.id, task.book_id)
        for (const type of types) yield* webhooks.emit(type, subject)
      })

      const createTask = Effect.fn("SandboxActions.createTask")(function* (input: CreateTaskInput) {
        const world = yield* store.world
        const book = yield* bookOf(world, input.book_id)
        yield* checkAssignment(world, book.id, input.assigned_to_id, input.assigned_team_id)
        yield* checkTags(world, book.company, input.tag_ids)
        const record = yield* recordRef(world, book.id, input.record)
        const timestamp = yield* now
        const task = world.tasks.insert((_, id) => ({
          id,
          book_id: book.id,
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
        }))
        // initial rich text and tags do not also emit task.updated (§6.4)
        yield* emitTask(world, world.tasks.indexOf(task.id)!, task, ["task.created"])
        return taskApi(world, task)
      })

      const updateTask = Effect.fn("SandboxActions.updateTask")(function* (id: string, input: UpdateTaskInput) {
        const world = yield* store.world
        const { index, row } = yield* find(world.tasks, id)
        const book = world.booksById.get(row.book_id)!
        yield* checkAssignment(world, row.book_id, input.assigned_to_id, input.assigned_team_id)
        yield* checkTags(world, book.company, input.tag_ids)
        const timestamp = yield* now
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
        yield* emitTask(world, index, next, wasEligible ? ["task.updated"] : ["task.created"])
        return taskApi(world, next)
      })

      const completeTask = Effect.fn("SandboxActions.completeTask")(function* (id: string) {
        const world = yield* store.world
        const { index, row } = yield* find(world.tasks, id)
        if (row.status === "done") return taskApi(world, row)
        const timestamp = yield* now
        const next = world.tasks.update(index, (task) => ({
          ...task,
          status: "done",
          completed_at: timestamp,
          updated_at: timestamp
        }))!
        yield* emitTask(world, index, next, ["task.completed", "task.updated"])
        return taskApi(world, next)
      })

      const reopenTask = Effect.fn("SandboxActions.reopenTask")(function* (id: string) {
        const world = yield* store.world
        const { index, row } = yield* find(world.tasks, id)
        // only done -> todo reopens (§3); an incomplete task never emits task.reopened
        if (row.status !== "done") return taskApi(world, row)
        const timestamp = yield* now
        const next = world.tasks.update(index, (task) => ({
          ...task,
          status: "todo",
          completed_at: null,
          updated_at: timestamp
        }))!
        yield* emitTask(world, index, next, ["task.reopened", "task.updated"])
        return taskApi(world, next)
      })

      const deleteTask = Effect.fn("SandboxActions.deleteTask")(function* (id: string) {
        const world = yield* store.world
        const { index, row } = yield* find(world.tasks, id)
        world.tasks.remove(index)
        yield* emitTask(world, index, row, ["task.deleted"])
      })

      // --- meetings ----------------------------------------------------------------------------

      const createMeeting = Effect.fn("SandboxActions.createMeeting")(function* (input: CreateMeetingInput) {
        const world = yield* store.world
        const book = yield* bookOf(world, input.book_id)
        yield* checkLinks(world, book.id, input)
        const timestamp = yield* now
        const segments = input.transcript?.segments ?? null
        const meeting = world.meetings.insert((_, id) => ({
          id,
          book_id: book.id,
          title: input.title ?? "Meeting",
          ...meetingTimes(input.start_time ?? timestamp, input.duration_seconds ?? 1800),
          meeting_link: input.meeting_link ?? null,
          meeting_source: input.meeting_source ?? "instant",
          meeting_type: input.meeting_type ?? "client_review",
          household_ids: input.household_ids ?? [],
          contact_ids: input.contact_ids ?? [],
          business_ids: input.business_ids ?? [],
          user_ids: input.user_ids ?? [],
          has_recordings: false,
          quick_summary: input.quick_summary ?? null,
          ai_summary: input.ai_summary ?? null,
          notepad: input.notepad ?? null,
          transcript: segments,
          transcript_visible: input.transcript?.visible ?? true,
          event_participants: [],
          created_at: timestamp,
          updated_at: timestamp
        }))
        const index = world.meetings.indexOf(meeting.id)!
        const subject = subjectOf(world, "meeting", index, meeting.id, meeting.book_id)
        // initial notes and links do not also emit meeting.updated (§6.4)
        yield* webhooks.emit("meeting.created", subject)
        if (hasVisibleTranscript(meeting)) yield* webhooks.emit("meeting.transcript_ready", subject)
        return meetingApi(world, meeting)
      })

      const updateMeeting = Effect.fn("SandboxActions.updateMeeting")(function* (
        id: string,
        input: UpdateMeetingInput
      ) {
        const world = yield* store.world
        const { index, row } = yield* find(world.meetings, id)
        yield* checkLinks(world, row.book_id, input)
        const timestamp = yield* now
        const next = world.meetings.update(index, (meeting) => ({
          ...meeting,
          ...input,
          ...meetingTimes(input.start_time ?? meeting.start_time, input.duration_seconds ?? meeting.duration_seconds),
          updated_at: timestamp
        }))!
        yield* webhooks.emit("meeting.updated", subjectOf(world, "meeting", index, next.id, next.book_id))
        return meetingApi(world, next)
      })

      const setTranscript = Effect.fn("SandboxActions.setTranscript")(function* (id: string, input: TranscriptInput) {
        const world = yield* store.world
        const { index, row } = yield* find(world.meetings, id)
        const timestamp = yield* now
        const segments: ReadonlyArray<TranscriptSegment> | null =
          input.segments === undefined ? row.transcript : input.segments
        const next = world.meetings.update(index, (meeting) => ({
          ...meeting,
          transcript: segments,
          transcript_visible: input.visible ?? meeting.transcript_visible,
          updated_at: timestamp
        }))!
        const changed = JSON.stringify(row.transcript) !== JSON.stringify(next.transcript)
        const becameVisible = !hasVisibleTranscript(row) && hasVisibleTranscript(next)
        // empty or hidden transcripts never trigger it (§6.4)
        if (hasVisibleTranscript(next) && (changed || becameVisible)) {
          yield* webhooks.emit("meeting.transcript_ready", subjectOf(world, "meeting", index, next.id, next.book_id))
        }
        return meetingApi(world, next)
      })

      const deleteMeeting = Effect.fn("SandboxActions.deleteMeeting")(function* (id: string) {
        const world = yield* store.world
        const { index, row } = yield* find(world.meetings, id)
        world.meetings.remove(index)
        yield* webhooks.emit("meeting.deleted", subjectOf(world, "meeting", index, row.id, row.book_id))
      })

      // --- notes -------------------------------------------------------------------------------

      const createNote = Effect.fn("SandboxActions.createNote")(function* (input: CreateNoteInput) {
        const world = yield* store.world
        const parent =
          input.parent_type === "household"
            ? world.households.getById(input.parent_id)
            : input.parent_type === "contact"
              ? world.contacts.getById(input.parent_id)
              : world.businesses.getById(input.parent_id)
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
        const timestamp = yield* now
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
        yield* webhooks.emit("note.created", subjectOf(world, "note", index, note.id, note.book_id, note.household_id))
        return noteApi(note)
      })

      const updateNote = Effect.fn("SandboxActions.updateNote")(function* (id: string, input: UpdateNoteInput) {
        const world = yield* store.world
        const { index, row } = yield* find(world.notes, id)
        yield* checkTags(world, world.booksById.get(row.book_id)!.company, input.tag_ids)
        const timestamp = yield* now
        const next = world.notes.update(index, (note) => ({ ...note, ...input, updated_at: timestamp }))!
        yield* webhooks.emit("note.updated", subjectOf(world, "note", index, next.id, next.book_id, next.household_id))
        return noteApi(next)
      })

      const deleteNote = Effect.fn("SandboxActions.deleteNote")(function* (id: string) {
        const world = yield* store.world
        const { index, row } = yield* find(world.notes, id)
        world.notes.remove(index)
        // parent ids are retained after deletion (§6.3)
        yield* webhooks.emit("note.deleted", subjectOf(world, "note", index, row.id, row.book_id, row.household_id))
      })

      // --- clients -----------------------------------------------------------------------------

      const createClient = Effect.fn("SandboxActions.createClient")(function* (input: CreateClientInput) {
        const world = yield* store.world
        const book = yield* bookOf(world, input.book_id)
        if (input.household_id != null && world.households.getById(input.household_id)?.book_id !== book.id) {
          return yield* validationFailed(`household_id: ${input.household_id} not found in book ${book.id}`)
        }
        const timestamp = yield* now
        const client = world.clients.insert((_, id) => ({
          id,
          book_id: book.id,
          household_id: input.household_id ?? null,
          name: input.name,
          status: input.status ?? "active",
          tier: input.tier ?? null,
          aum: input.aum ?? null,
          became_client_at: input.became_client_at === undefined ? timestamp : input.became_client_at,
          created_at: timestamp,
          updated_at: timestamp
        }))
        const index = world.clients.indexOf(client.id)!
        yield* webhooks.emit("client.created", subjectOf(world, "client", index, client.id, client.book_id))
        return clientApi(client)
      })

      const updateClient = Effect.fn("SandboxActions.updateClient")(function* (id: string, input: UpdateClientInput) {
        const world = yield* store.world
        const { index, row } = yield* find(world.clients, id)
        const changed = (Object.keys(input) as Array<keyof UpdateClientInput>).filter((key) => input[key] !== row[key])
        if (changed.length === 0) return clientApi(row)
        const timestamp = yield* now
        const next = world.clients.update(index, (client): ClientRow => ({
          ...client,
          ...input,
          updated_at: timestamp
        }))!
        // debounced: changed_fields accumulate over the window (§6.3, §8)
        yield* webhooks.clientChanged(subjectOf(world, "client", index, next.id, next.book_id), changed)
        return clientApi(next)
      })

      // --- contacts and prospects ----------------------------------------------------------------

      const createContact = Effect.fn("SandboxActions.createContact")(function* (input: PersonInput) {
        const world = yield* store.world
        yield* bookOf(world, input.book_id)
        if (blank(input.first_name) && blank(input.last_name)) {
          return yield* validationFailed("a contact needs a first_name or a last_name")
        }
        const fields = yield* personRow(world, input, yield* now)
        return world.contacts.insert((_, id) => ({ id, ...fields }))
      })

      const createProspect = Effect.fn("SandboxActions.createProspect")(function* (input: ProspectInput) {
        const world = yield* store.world
        yield* bookOf(world, input.book_id)
        const missing = (["first_name", "last_name"] as const).filter((key) => blank(input[key]))
        if (missing.length > 0) return yield* validationFailed(`required: ${missing.join(", ")}`)
        const fields = yield* personRow(world, input, yield* now)
        const prospect = world.prospects.insert((_, id) => ({
          id,
          ...fields,
          status: input.status ?? "new",
          type: "prospect" as const
        }))
        const index = world.prospects.indexOf(prospect.id)!
        yield* webhooks.emit("prospect.created", subjectOf(world, "prospect", index, prospect.id, prospect.book_id))
        return prospectApi(prospect)
      })

      // --- businesses, accounts, contracts (no events) --------------------------------------------

      const createBusiness = Effect.fn("SandboxActions.createBusiness")(function* (input: CreateBusinessInput) {
        const world = yield* store.world
        const book = yield* bookOf(world, input.book_id)
        yield* checkTags(world, book.company, input.tag_ids)
        const nowMs = yield* clock.now
        const { book_id: _book, tag_ids, ...fields } = input
        return world.businesses.insert((index) => ({
          ...world.businesses.spec.generateIn(index, book.ordinal, nowMs),
          ...fields,
          ...(tag_ids === undefined ? {} : { tags: tagsOf(world, book.company, tag_ids) })
        }))
      })

      const updateBusiness = Effect.fn("SandboxActions.updateBusiness")(function* (
        id: string,
        input: UpdateBusinessInput
      ) {
        const world = yield* store.world
        const { index, row } = yield* find(world.businesses, id)
        const company = world.booksById.get(row.book_id)!.company
        yield* checkTags(world, company, input.tag_ids)
        const timestamp = yield* now
        const { tag_ids, ...fields } = input
        return world.businesses.update(index, (business) => ({
          ...business,
          ...fields,
          ...(tag_ids === undefined ? {} : { tags: tagsOf(world, company, tag_ids) }),
          updated_at: timestamp
        }))!
      })

      const createFinancialAccount = Effect.fn("SandboxActions.createFinancialAccount")(function* (
        input: CreateFinancialAccountInput
      ) {
        const world = yield* store.world
        const book = yield* bookOf(world, input.book_id)
        yield* checkAccountLinks(world, book.id, input)
        const nowMs = yield* clock.now
        return world.financialAccounts.insert((index) => ({
          ...world.financialAccounts.spec.generateIn(index, book.ordinal, nowMs),
          ...input,
          balance_as_of: iso(nowMs)
        }))
      })

      const updateFinancialAccount = Effect.fn("SandboxActions.updateFinancialAccount")(function* (
        id: string,
        input: UpdateFinancialAccountInput
      ) {
        const world = yield* store.world
        const { index, row } = yield* find(world.financialAccounts, id)
        yield* checkAccountLinks(world, row.book_id, input)
        const timestamp = yield* now
        return world.financialAccounts.update(index, (account) => ({
          ...account,
          ...input,
          ...(input.balance_in_cents === undefined ? {} : { balance_as_of: timestamp }),
          updated_at: timestamp
        }))!
      })

      const createAnnuityContract = Effect.fn("SandboxActions.createAnnuityContract")(function* (
        input: CreateAnnuityContractInput
      ) {
        const world = yield* store.world
        const book = yield* bookOf(world, input.book_id)
        const nowMs = yield* clock.now
        const { book_id: _book, contract_value, ...fields } = input
        return world.annuityContracts.insert((index) =>
          withContractValue(
            { ...world.annuityContracts.spec.generateIn(index, book.ordinal, nowMs), ...fields },
            contract_value,
            iso(nowMs)
          )
        )
      })

      const updateAnnuityContract = Effect.fn("SandboxActions.updateAnnuityContract")(function* (
        id: string,
        input: UpdateAnnuityContractInput
      ) {
        const world = yield* store.world
        const { index } = yield* find(world.annuityContracts, id)
        const timestamp = yield* now
        const { contract_value, ...fields } = input
        return world.annuityContracts.update(index, (contract) =>
          withContractValue({ ...contract, ...fields, updated_at: timestamp }, contract_value, timestamp)
        )!
      })

      const remover =
        <Row extends { readonly id: string }>(pick: (world: World) => Collection<Row>, name: string) =>
        (id: string) =>
          Effect.gen(function* () {
            const collection = pick(yield* store.world)
            const { index } = yield* find(collection, id)
            collection.remove(index)
          }).pipe(Effect.withSpan(`SandboxActions.${name}`))

      const deleteProjectTemplate = Effect.fn("SandboxActions.deleteProjectTemplate")(function* (id: string) {
        const world = yield* store.world
        const index = world.templates.findIndex((template) => template.id === id)
        if (index < 0) return yield* notFound(`project template ${id} not found`)
        world.templates.splice(index, 1)
      })

      const drift = Effect.fn("SandboxActions.drift")(function* (
        target: DriftTarget,
        action: DriftAction,
        books: ReadonlyArray<number>,
        offset: number,
        rng: Rng
      ) {
        const world = yield* store.world
        if (books.length === 0) return undefined
        const nowMs = yield* clock.now
        const collection: Collection<BusinessRow> | Collection<FinancialAccountRow> | Collection<AnnuityContractRow> =
          target === "businesses"
            ? world.businesses
            : target === "financial_accounts"
              ? world.financialAccounts
              : world.annuityContracts
        if (action === "insert") {
          const book = rng.pick(books)
          const row = (collection as Collection<{ readonly id: string }>).insert((index) =>
            collection.spec.generateIn(index, book, nowMs)
          )
          return { action, id: row.id }
        }
        // a record the crawl has already passed, so removing it shifts the pages still to come
        const page = collection.list({ books, offset: 0, limit: Math.max(1, offset) })
        const candidates =
          page.indexes.length > 0 ? page.indexes : collection.list({ books, offset: 0, limit: 1 }).indexes
        if (candidates.length === 0) return undefined
        const index = rng.pick(candidates)
        const id = collection.idOf(index)
        if (action === "delete") {
          collection.remove(index)
        } else {
          const timestamp = iso(nowMs)
          ;(collection as Collection<{ readonly id: string; readonly updated_at: string }>).update(index, (row) => ({
            ...row,
            updated_at: timestamp
          }))
        }
        return { action, id }
      })

      return SandboxActions.of({
        createTask,
        updateTask,
        completeTask,
        reopenTask,
        deleteTask,
        createMeeting,
        updateMeeting,
        setTranscript,
        deleteMeeting,
        createNote,
        updateNote,
        deleteNote,
        createClient,
        updateClient,
        createContact,
        createProspect,
        createBusiness,
        updateBusiness,
        deleteBusiness: remover((world) => world.businesses, "deleteBusiness"),
        createFinancialAccount,
        updateFinancialAccount,
        deleteFinancialAccount: remover((world) => world.financialAccounts, "deleteFinancialAccount"),
        createAnnuityContract,
        updateAnnuityContract,
        deleteAnnuityContract: remover((world) => world.annuityContracts, "deleteAnnuityContract"),
        deleteProjectTemplate,
        drift
      })
    })
  )
}
