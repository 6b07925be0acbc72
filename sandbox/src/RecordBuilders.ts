/**
 * One builder per lazily generated kind: record `i` from its own PRNG stream, its book and its
 * timestamps (a `Draw`). A builder may look at the world's kinds declared before its own, and
 * picks related records (a financial account's household and owners, a note's parent) among the
 * base records of the same book, so references stay inside a book and stay stable whatever is
 * mutated later. The order of the PRNG draws is part of the data: moving a field that draws
 * changes every record after it.
 */
import type { Collection } from "./Collection.ts"
import type { World } from "./World.ts"
import { hash, hashString, type Rng } from "./Prng.ts"
import type {
  Address,
  AnnuityContractRow,
  BookRow,
  BusinessPhoneNumber,
  BusinessRow,
  ClientRow,
  ContactRow,
  EmailAddress,
  FinancialAccountRow,
  HouseholdRow,
  MeetingRow,
  NotableType,
  NoteRow,
  PhoneNumber,
  ProspectRow,
  RecordRef,
  TaskRow,
  TranscriptSegment
} from "./Records.ts"
import { iso, isoDate } from "./SandboxClock.ts"
import * as V from "./Vocabulary.ts"

/** Generated timestamps fall in [2022-01-01, 2025-01-01) UTC, before any sandbox "now". */
export const RANGE_START = 1_640_995_200_000
export const RANGE_END = 1_735_689_600_000
export const DAY = 86_400_000

export const ordinalId = (prefix: string, ordinal: number) => `${prefix}_${String(ordinal + 1).padStart(8, "0")}`

export const slug = (value: string) =>
  value
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-|-$/g, "")

const money = (cents: number): string => (cents / 100).toFixed(2)

const mask = (digits: string): string => `****${digits.slice(-4)}`

const e164 = (rng: Rng) => `+1${rng.int(201, 989)}${rng.digits(7)}`

const emailFor = (rng: Rng, first: string, last: string, domain?: string): string =>
  `${slug(first)}.${slug(last)}${rng.int(1, 99)}@${domain ?? rng.pick(V.EMAIL_DOMAINS)}`

const addressFor = (rng: Rng, type: string, primary: boolean): Address => {
  const [city, state, zip] = rng.pick(V.CITIES)
  return {
    line1: `${rng.int(10, 9999)} ${rng.pick(V.STREETS)}`,
    line2: rng.bool(0.25) ? `Suite ${rng.int(100, 900)}` : null,
    city,
    state,
    zip: `${zip}${rng.digits(2)}`,
    country_code: "US",
    address_type: type,
    is_primary: primary
  }
}

export const notableTypeOf = (type: RecordRef["type"]): NotableType =>
  type === "household" ? "Household" : type === "contact" ? "Contact" : "Business"

/** What a builder makes record `index` from: its id, PRNG stream, book and timestamps (epoch ms). */
export interface Draw {
  readonly index: number
  readonly id: string
  readonly rng: Rng
  readonly book: BookRow
  readonly created: number
  readonly updated: number
}

/** A base record of `book`, or undefined when the book has none of the kind. */
const pickIn = <Row extends { readonly id: string }>(collection: Collection<Row>, book: number, rng: Rng) => {
  const list = collection.baseByBook[book]!
  return list.length === 0 ? undefined : list[rng.next() % list.length]!
}

const householdIn = (world: World, book: number, rng: Rng) => {
  const index = pickIn(world.households, book, rng)
  return index === undefined ? null : world.households.idOf(index)
}

const contactName = (world: World, index: number) => {
  const contact = world.contacts.lastKnown(index)!
  return [contact.first_name, contact.last_name].filter((part) => part !== null).join(" ")
}

const userName = (world: World, id: string) => {
  const user = world.users.find((u) => u.id === id)!
  return `${user.first_name} ${user.last_name}`
}

/** A household, contact or business of the book, as a task's `record` or a note's parent. */
const relatedIn = (world: World, book: number, rng: Rng): RecordRef => {
  const roll = rng.float()
  if (roll < 0.3) {
    const index = pickIn(world.contacts, book, rng)
    if (index !== undefined) return { id: world.contacts.idOf(index), type: "contact", name: contactName(world, index) }
  } else if (roll < 0.45) {
    const index = pickIn(world.businesses, book, rng)
    if (index !== undefined) {
      return { id: world.businesses.idOf(index), type: "business", name: world.businesses.lastKnown(index)!.name }
    }
  }
  const index = pickIn(world.households, book, rng)!
  return { id: world.households.idOf(index), type: "household", name: world.households.lastKnown(index)!.name }
}

const personFields = (world: World, rng: Rng, book: BookRow) => {
  const first = rng.pick(V.FIRST_NAMES)
  const last = rng.pick(V.LAST_NAMES)
  const emails: Array<EmailAddress> = Array.from({ length: rng.int(1, 2) }, (_, i) => ({
    email: emailFor(rng, first, last),
    email_type: i === 0 ? "personal" : "work",
    is_primary: i === 0
  }))
  const phones: Array<PhoneNumber> = Array.from({ length: rng.int(0, 2) }, (_, i) => ({
    phone_number: e164(rng),
    phone_type: rng.pick(V.PHONE_TYPES),
    is_primary: i === 0
  }))
  const customFields: Record<string, unknown> = { risk_tolerance: rng.pick(V.RISK_TOLERANCES) }
  if (rng.bool(0.5)) customFields.preferred_contact_method = rng.pick(V.CONTACT_METHODS)
  return {
    book_id: book.id,
    household_id: householdIn(world, book.ordinal, rng),
    first_name: first,
    last_name: last,
    middle_name: rng.bool(0.4) ? rng.pick(V.MIDDLE_NAMES) : null,
    preferred_name: rng.bool(0.15) ? first.slice(0, 3) : null,
    salutation: rng.bool(0.5) ? rng.pick(V.SALUTATIONS) : null,
    suffix: rng.bool(0.05) ? rng.pick(V.SUFFIXES) : null,
    gender: rng.pick(V.GENDERS),
    designations: rng.bool(0.1) ? rng.pick(V.DESIGNATIONS) : null,
    email_addresses: emails,
    phone_numbers: phones,
    addresses: rng.bool(0.8) ? [addressFor(rng, "home", true)] : [],
    custom_fields: customFields
  }
}

export const householdRow = (_world: World, { id, rng, book, created, updated }: Draw): HouseholdRow => ({
  id,
  book_id: book.id,
  name: `${rng.pick(V.LAST_NAMES)} Household`,
  created_at: iso(created),
  updated_at: iso(updated)
})

export const contactRow = (world: World, { id, rng, book, created, updated }: Draw): ContactRow => ({
  id,
  ...personFields(world, rng, book),
  created_at: iso(created),
  updated_at: iso(updated)
})

export const prospectRow = (world: World, { id, rng, book, created, updated }: Draw): ProspectRow => ({
  id,
  ...personFields(world, rng, book),
  household_id: null,
  status: rng.pick(V.PROSPECT_STATUSES),
  type: "prospect" as const,
  created_at: iso(created),
  updated_at: iso(updated)
})

export const clientRow = (world: World, { id, rng, book, created, updated }: Draw): ClientRow => {
  const households = world.households
  const householdIndex = pickIn(households, book.ordinal, rng)
  const tier = rng.pick(V.CLIENT_TIERS)
  return {
    id,
    book_id: book.id,
    household_id: householdIndex === undefined ? null : households.idOf(householdIndex),
    name:
      householdIndex === undefined ? `${rng.pick(V.LAST_NAMES)} Family` : households.lastKnown(householdIndex)!.name,
    status: rng.pick(V.CLIENT_STATUSES),
    tier,
    aum: tier === null ? null : money(rng.int(5_000_000, 2_500_000_000)),
    became_client_at: rng.bool(0.85) ? iso(created + rng.int(0, 30) * DAY) : null,
    created_at: iso(created),
    updated_at: iso(updated)
  }
}

const BUSINESS_SALT = hashString("business")

/** A business's name from `(seed, index)` alone: the name index is built without generating rows. */
export const businessNameOf = (seed: number, index: number) =>
  `${V.BUSINESS_PREFIXES[hash(seed, BUSINESS_SALT, index, 10) % V.BUSINESS_PREFIXES.length]} ${
    V.BUSINESS_NOUNS[hash(seed, BUSINESS_SALT, index, 11) % V.BUSINESS_NOUNS.length]
  } ${V.BUSINESS_SUFFIXES[hash(seed, BUSINESS_SALT, index, 12) % V.BUSINESS_SUFFIXES.length]}`

export const businessRow = (world: World, { index, id, rng, book, created, updated }: Draw): BusinessRow => {
  const name = businessNameOf(world.seed, index)
  const domain = `${slug(name).split("-").slice(0, 2).join("")}.example.com`
  const companyTags = world.tags[book.company]!
  const phones: Array<BusinessPhoneNumber> = Array.from({ length: rng.int(1, 2) }, (_, i) => ({
    phone_number: e164(rng),
    phone_type: i === 0 ? "work" : rng.pick(V.PHONE_TYPES),
    is_primary: i === 0,
    extension: rng.bool(0.4) ? String(rng.int(100, 9999)) : null
  }))
  return {
    id,
    book_id: book.id,
    name,
    industry: rng.bool(0.9) ? rng.pick(V.INDUSTRIES) : null,
    website_url: rng.bool(0.7) ? `https://www.${domain}` : null,
    tax_id: rng.bool(0.6) ? `**-***${rng.digits(4)}` : null,
    additional_info: rng.bool(0.3) ? `Fiscal year ends in ${rng.pick(["March", "June", "September"])}.` : null,
    created_at: iso(created),
    updated_at: iso(updated),
    email_addresses: [{ email: `info@${domain}`, email_type: "work", is_primary: true }],
    phone_numbers: phones,
    addresses: [addressFor(rng, "work", true)],
    tags: rng.sample(companyTags, rng.int(0, 2))
  }
}

export const annuityContractRow = (world: World, { id, rng, book, created, updated }: Draw): AnnuityContractRow => {
  const contacts = world.contacts
  const suffix = id.slice(3)
  const [carrierKey, carrierName, products] = rng.pick(V.CARRIERS)
  const [productCode, productName] = rng.pick(products)
  const issued = created - rng.int(0, 3650) * DAY
  const ownerIndexes = [pickIn(contacts, book.ordinal, rng), pickIn(contacts, book.ordinal, rng)].filter(
    (i): i is number => i !== undefined
  )
  const roles = ["owner", "annuitant", "beneficiary"]
  const parties = ownerIndexes.map((contactIndex, i) => ({
    id: `acp_${suffix}_${i + 1}`,
    role: roles[i % roles.length]!,
    display_name: contactName(world, contactIndex),
    participant_type: "Person",
    participant_id: contacts.idOf(contactIndex)
  }))
  const contractValue = rng.int(2_500_000, 250_000_000)
  const asOf = isoDate(updated)
  const kinds = ["contract_value", "surrender_value", "death_benefit"]
  const amounts = [contractValue, Math.floor(contractValue * 0.93), Math.floor(contractValue * 1.05)]
  const values = kinds.slice(0, rng.int(1, 3)).map((kind, i) => ({
    id: `acv_${suffix}_${i + 1}`,
    kind,
    amount: money(amounts[i]!),
    as_of_date: asOf,
    created_at: iso(created),
    updated_at: iso(updated),
    annuity_contract_id: id,
    source_kind: rng.bool(0.8) ? "carrier_feed" : "advisor"
  }))
  return {
    id,
    carrier_key: carrierKey,
    carrier_name: carrierName,
    contract_number: mask(rng.digits(10)),
    product_code: productCode,
    product_name: productName,
    status: rng.pick(V.ANNUITY_STATUSES),
    tax_status: rng.pick(V.TAX_STATUSES),
    registration_type: rng.pick(V.REGISTRATION_TYPES),
    data_provider: rng.bool(0.7) ? "dtcc" : "manual",
    notes: rng.bool(0.2) ? "Rider elected at issue; review income base annually." : null,
    contract_type: rng.pick(V.CONTRACT_TYPES),
    established_on: isoDate(issued - rng.int(1, 30) * DAY),
    issued_on: isoDate(issued),
    anniversary_on: isoDate(issued + 365 * DAY * Math.max(1, Math.ceil((updated - issued) / (365 * DAY)))),
    matures_on: rng.bool(0.7) ? isoDate(issued + rng.int(10, 30) * 365 * DAY) : null,
    created_at: iso(created),
    updated_at: iso(updated),
    last_synced_at: rng.bool(0.8) ? iso(updated) : null,
    term_authority: rng.bool(0.6) ? "advisor" : "carrier",
    parties,
    placements: [
      {
        id: `acpl_${suffix}_1`,
        book_id: book.id,
        household_id: householdIn(world, book.ordinal, rng),
        business_id: null,
        trust_id: null,
        placement_authority: "advisor"
      }
    ],
    current_values: Object.fromEntries([
      ...values.map((value) => [value.kind, value.amount] as const),
      ["as_of_date", asOf] as const
    ]),
    values
  }
}

export const financialAccountRow = (world: World, { id, rng, book, created, updated }: Draw): FinancialAccountRow => {
  const contacts = world.contacts
  const [accountType, taxType, label] = rng.pick(V.ACCOUNT_KINDS)
  const owners = [pickIn(contacts, book.ordinal, rng)]
  if (rng.bool(0.3)) owners.push(pickIn(contacts, book.ordinal, rng))
  const ownerIds = [...new Set(owners.filter((i): i is number => i !== undefined))].map((i) => contacts.idOf(i))
  const custom: Record<string, unknown> = { custodian_code: `C${rng.digits(4)}` }
  if (rng.bool(0.6)) custom.model_portfolio = rng.pick(V.MODEL_PORTFOLIOS)
  return {
    id,
    name: label,
    institution_name: rng.pick(V.INSTITUTIONS),
    account_number: mask(rng.digits(9)),
    notes: rng.bool(0.15) ? "Held away; balance reported monthly by the client." : null,
    other_tax_advantaged_type_label: taxType === "other" ? "457(b)" : null,
    book_id: book.id,
    household_id: householdIn(world, book.ordinal, rng),
    account_type: accountType,
    tax_advantaged_type: taxType,
    balance_in_cents: rng.int(0, 1_500_000_000) + rng.int(0, 99),
    balance_as_of: iso(updated - rng.int(0, 5) * DAY),
    owner_ids: ownerIds,
    custom_fields: custom,
    created_at: iso(created),
    updated_at: iso(updated)
  }
}

/** Two thirds of meetings have a transcript: a few lines between the users and the client. */
const transcriptOf = (rng: Rng, names: ReadonlyArray<string>, start: number): Array<TranscriptSegment> =>
  Array.from({ length: rng.int(3, 8) }, (_, i) => ({
    text: rng.pick(V.TRANSCRIPT_LINES),
    participant: { name: names[i % names.length]! },
    start_timestamp: iso(start + i * 20_000),
    end_timestamp: iso(start + i * 20_000 + 18_000)
  }))

export const meetingRow = (world: World, { id, rng, book, created, updated }: Draw): MeetingRow => {
  const start = created + rng.int(1, 20) * DAY
  const duration = rng.pick([15, 30, 45, 60, 90]) * 60
  const householdIds = [householdIn(world, book.ordinal, rng)].filter(
    (household): household is string => household !== null
  )
  const contactIndex = rng.bool(0.6) ? pickIn(world.contacts, book.ordinal, rng) : undefined
  const businessIndex = rng.bool(0.2) ? pickIn(world.businesses, book.ordinal, rng) : undefined
  const members = [...book.members]
  const userIds = rng.sample(members, rng.int(1, Math.min(2, members.length)))
  const transcriptKind = rng.float()
  const names = [
    ...userIds.map((userId) => userName(world, userId)),
    contactIndex === undefined ? "Client" : contactName(world, contactIndex)
  ]
  const transcript = transcriptKind < 0.65 ? transcriptOf(rng, names, start) : null
  const source = rng.pick(V.MEETING_SOURCES)
  return {
    id,
    book_id: book.id,
    title: rng.pick(V.MEETING_TITLES),
    start_time: iso(start),
    end_time: iso(start + duration * 1000),
    duration_seconds: duration,
    meeting_link: source === "logged" ? null : `https://meet.example.com/${rng.digits(3)}-${rng.digits(4)}`,
    meeting_source: source,
    meeting_type: rng.pick(V.MEETING_TYPES),
    household_ids: householdIds,
    contact_ids: contactIndex === undefined ? [] : [world.contacts.idOf(contactIndex)],
    business_ids: businessIndex === undefined ? [] : [world.businesses.idOf(businessIndex)],
    user_ids: userIds,
    has_recordings: transcript !== null && rng.bool(0.7),
    quick_summary: transcript === null ? null : "Reviewed goals and agreed on next steps.",
    ai_summary: transcript === null ? null : `Discussed ${rng.pick(V.MEETING_TITLES).toLowerCase()} topics.`,
    notepad: rng.bool(0.4) ? "Bring updated statements next time." : null,
    transcript,
    // a few transcripts exist but are hidden from advisors (spec §6.4)
    transcript_visible: transcript !== null && transcriptKind < 0.6,
    event_participants: userIds.map((userId) => {
      const user = world.users.find((u) => u.id === userId)!
      return {
        id: userId,
        name: `${user.first_name} ${user.last_name}`,
        email: user.email,
        participant_type: "user",
        response_status: "accepted"
      }
    }),
    created_at: iso(created),
    updated_at: iso(Math.max(updated, start + duration * 1000))
  }
}

export const taskRow = (world: World, { id, rng, book, created, updated }: Draw): TaskRow => {
  const done = rng.bool(0.4)
  const members = [...book.members]
  const assignment = rng.float()
  const companyTags = world.tags[book.company]!
  return {
    id,
    book_id: book.id,
    title: rng.pick(V.TASK_TITLES),
    description: rng.bool(0.6) ? rng.pick(V.NOTE_SENTENCES) : "",
    deadline_at: rng.bool(0.8) ? iso(created + rng.int(1, 60) * DAY) : null,
    completed_at: done ? iso(updated) : null,
    all_day: rng.bool(0.5),
    is_private: rng.bool(0.1),
    status: done ? "done" : "todo",
    priority: rng.pick(V.TASK_PRIORITIES),
    created_at: iso(created),
    updated_at: iso(updated),
    assigned_to_id: assignment < 0.7 ? rng.pick(members) : null,
    assigned_team_id: assignment >= 0.7 && assignment < 0.9 ? rng.pick(book.teams) : null,
    record: relatedIn(world, book.ordinal, rng),
    tag_ids: rng.sample(companyTags, rng.int(0, 2)).map((tag) => tag.id),
    scheduled: rng.bool(0.03),
    approved: !rng.bool(0.03)
  }
}

export const noteRow = (world: World, { id, rng, book, created, updated }: Draw): NoteRow => {
  const parent = relatedIn(world, book.ordinal, rng)
  const householdId =
    parent.type === "household"
      ? parent.id
      : parent.type === "contact"
        ? (world.contacts.getById(parent.id)?.household_id ?? null)
        : null
  const companyTags = world.tags[book.company]!
  return {
    id,
    book_id: book.id,
    household_id: householdId,
    created_by_id: rng.pick([...book.members]),
    notable_id: parent.id,
    notable_type: notableTypeOf(parent.type),
    pinned: rng.bool(0.1),
    hidden: rng.bool(0.05),
    tag_ids: rng.sample(companyTags, rng.int(0, 2)).map((tag) => tag.id),
    content: `<p>${rng.pick(V.NOTE_SENTENCES)}</p>`,
    references: [],
    created_at: iso(created),
    updated_at: iso(updated)
  }
}
