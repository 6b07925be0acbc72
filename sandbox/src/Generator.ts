/**
 * The deterministic world: companies, users, teams, books, tags and project templates are built
 * eagerly (they are few); every other kind is a lazy `Collection` whose record `i` is a pure
 * function of `(seed, kind, i)`. Related records (a financial account's household and owners, a
 * note's parent) are picked from the same book's base records, so references stay inside a book
 * and stay stable whatever is mutated later.
 */
import { Collection, type KindSpec } from "./Collection.ts"
import type { ResolvedOptions } from "./Options.ts"
import { hash, hashString, Rng, unit } from "./Prng.ts"
import type {
  Address,
  AnnuityContractRow,
  BookRow,
  BusinessPhoneNumber,
  BusinessRow,
  ClientRow,
  CompanyRow,
  ContactRow,
  EmailAddress,
  FinancialAccountRow,
  HouseholdRow,
  MeetingRow,
  Milestone,
  NotableType,
  NoteRow,
  PhoneNumber,
  ProjectTemplateRow,
  ProspectRow,
  RecordRef,
  TagRow,
  TaskRow,
  TeamRow,
  TranscriptSegment,
  UserRow
} from "./Records.ts"
import { iso, isoDate } from "./SandboxClock.ts"
import * as V from "./Vocabulary.ts"

/** Generated timestamps fall in [2022-01-01, 2025-01-01) UTC, before any sandbox "now". */
const RANGE_START = 1_640_995_200_000
const RANGE_END = 1_735_689_600_000
const DAY = 86_400_000

/**
 * Share of `records` per lazily generated kind. Financial accounts dominate, as in an advisory
 * firm's book (several accounts per household), and make the big crawls of the sandbox.
 */
const SHARES = {
  financialAccounts: 0.6,
  annuityContracts: 0.12,
  businesses: 0.1,
  contacts: 0.06,
  households: 0.04,
  tasks: 0.03,
  notes: 0.02,
  meetings: 0.01,
  prospects: 0.01,
  clients: 0.01
} as const

/** Share of the records that live in the partner's own company (the bootstrap token's). */
const OWN_COMPANY_SHARE = 0.9

export interface World {
  readonly seed: number
  readonly companies: ReadonlyArray<CompanyRow>
  readonly users: ReadonlyArray<UserRow>
  readonly usersById: ReadonlyMap<string, UserRow>
  readonly teams: ReadonlyArray<TeamRow>
  readonly teamsById: ReadonlyMap<string, TeamRow>
  readonly books: ReadonlyArray<BookRow>
  readonly booksById: ReadonlyMap<string, BookRow>
  /** Tags per company ordinal. */
  readonly tags: ReadonlyArray<ReadonlyArray<TagRow>>
  readonly tagsById: ReadonlyMap<string, TagRow>
  readonly customFields: { readonly contact: ReadonlyArray<string>; readonly financial_account: ReadonlyArray<string> }
  readonly templates: Array<ProjectTemplateRow>
  readonly households: Collection<HouseholdRow>
  readonly contacts: Collection<ContactRow>
  readonly prospects: Collection<ProspectRow>
  readonly clients: Collection<ClientRow>
  readonly businesses: Collection<BusinessRow>
  readonly annuityContracts: Collection<AnnuityContractRow>
  readonly financialAccounts: Collection<FinancialAccountRow>
  readonly meetings: Collection<MeetingRow>
  readonly tasks: Collection<TaskRow>
  readonly notes: Collection<NoteRow>
}

const pad = (n: number) => String(n).padStart(8, "0")
const ordinalId = (prefix: string, ordinal: number) => `${prefix}_${pad(ordinal + 1)}`

/** A version-4-shaped UUID derived from a hash, for `guid` fields. */
const guidOf = (...parts: ReadonlyArray<number>): string => {
  const hex = [1, 2, 3, 4]
    .map((salt) =>
      hash(...parts, salt)
        .toString(16)
        .padStart(8, "0")
    )
    .join("")
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-4${hex.slice(13, 16)}-a${hex.slice(17, 20)}-${hex.slice(20, 32)}`
}

const money = (cents: number): string => (cents / 100).toFixed(2)

const mask = (digits: string): string => `****${digits.slice(-4)}`

const slug = (value: string) =>
  value
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-|-$/g, "")

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

const updatedOfRow = (row: { readonly updated_at: string }) => Date.parse(row.updated_at)

const pickIn = <Row extends { readonly id: string }>(collection: Collection<Row>, book: number, rng: Rng) => {
  const list = collection.baseByBook[book]!
  return list.length === 0 ? undefined : list[rng.next() % list.length]!
}

export const buildWorld = (options: ResolvedOptions): World => {
  const seed = options.seed
  const companyCount = options.companies
  const bookCount = companyCount * options.booksPerCompany
  const rngFor = (salt: string, index: number) => new Rng(hash(seed, hashString(salt), index))

  const companies: Array<CompanyRow> = Array.from({ length: companyCount }, (_, ordinal) => ({
    id: ordinalId("cmp", ordinal),
    name:
      ordinal < V.COMPANY_NAMES.length ? V.COMPANY_NAMES[ordinal]! : `${V.COMPANY_NAMES[ordinal % 8]} ${ordinal + 1}`,
    ordinal
  }))
  const domainOf = (company: number) => `${slug(companies[company]!.name).split("-")[0]}.example.com`

  const users: Array<UserRow> = []
  for (let company = 0; company < companyCount; company++) {
    for (let u = 0; u < options.usersPerCompany; u++) {
      const ordinal = users.length
      const rng = rngFor("user", ordinal)
      const first = rng.pick(V.FIRST_NAMES)
      const last = rng.pick(V.LAST_NAMES)
      users.push({
        id: ordinalId("usr", ordinal),
        email: `${slug(first)}.${slug(last)}@${domainOf(company)}`,
        first_name: first,
        last_name: last,
        // the first user of company 0 also works for company 1: a user in several companies (spec §5.4)
        companies: ordinal === 0 && companyCount > 1 ? [0, 1] : [company],
        active: true
      })
    }
  }
  const ownUsers = (company: number) =>
    users.slice(company * options.usersPerCompany, (company + 1) * options.usersPerCompany)

  const teams: Array<TeamRow> = []
  for (let company = 0; company < companyCount; company++) {
    for (let t = 0; t < 2; t++) {
      teams.push({ id: ordinalId("team", teams.length), name: V.TEAM_NAMES[t]!, company })
    }
  }

  const books: Array<BookRow> = []
  for (let company = 0; company < companyCount; company++) {
    const own = ownUsers(company)
    for (let b = 0; b < options.booksPerCompany; b++) {
      const ordinal = books.length
      const name = b < V.BOOK_NAMES.length ? V.BOOK_NAMES[b]! : `Book ${b + 1}`
      const members = new Set<string>([own[0]!.id])
      for (let u = 1; u < own.length; u++) {
        if ((u - 1) % options.booksPerCompany === b || u % options.booksPerCompany === b) members.add(own[u]!.id)
      }
      // the multi-company user sees only the first book of their second company
      if (company === 1 && b === 0) members.add(users[0]!.id)
      const rng = rngFor("book", ordinal)
      const created = RANGE_START + Math.floor(rng.float() * 90 * DAY)
      const companyTeams = teams.filter((team) => team.company === company)
      books.push({
        id: ordinalId("bk", ordinal),
        name,
        initials: name
          .split(/[^A-Za-z]+/)
          .filter((word) => word.length > 0)
          .map((word) => word[0]!.toUpperCase())
          .join(""),
        ordinal,
        company,
        members,
        teams: b % 2 === 0 ? [companyTeams[0]!.id] : companyTeams.map((team) => team.id),
        created_at: iso(created),
        updated_at: iso(created + Math.floor(rng.float() * 30 * DAY))
      })
    }
  }

  const tags = companies.map((company) =>
    V.TAG_NAMES.map((name, i) => ({ id: ordinalId("tag", company.ordinal * V.TAG_NAMES.length + i), name }))
  )

  const customFields = {
    contact: [...V.CONTACT_CUSTOM_FIELDS],
    financial_account: [...V.ACCOUNT_CUSTOM_FIELDS]
  }

  // at least a few of every kind in every book, however small `records` is
  const countOf = (share: number) => Math.max(bookCount * 4, Math.round(options.records * share))

  /**
   * The book of base record `i`: the first `bookCount` records cover every book once; after
   * that, 90% go to the partner's own company (company 0), where the bootstrap token looks.
   */
  const ownBooks = options.booksPerCompany
  const otherBooks = bookCount - ownBooks
  const bookOfFor = (salt: number) => (index: number) => {
    if (index < bookCount) return index
    const h = hash(seed, salt, index, 1)
    return otherBooks === 0 || unit(hash(seed, salt, index, 5)) < OWN_COMPANY_SHARE
      ? h % ownBooks
      : ownBooks + (h % otherBooks)
  }
  const timesFor = (salt: number) => ({
    created: (index: number) => RANGE_START + Math.floor(unit(hash(seed, salt, index, 2)) * (RANGE_END - RANGE_START)),
    updated: (index: number) => {
      const created = RANGE_START + Math.floor(unit(hash(seed, salt, index, 2)) * (RANGE_END - RANGE_START))
      return created + Math.floor(unit(hash(seed, salt, index, 3)) * (RANGE_END - created))
    }
  })
  const bookIdOf = (row: { readonly book_id: string }) => {
    const book = booksById.get(row.book_id)
    if (book === undefined) throw new globalThis.Error(`unknown book ${row.book_id}`)
    return book.ordinal
  }
  const booksById = new Map(books.map((book) => [book.id, book] as const))

  const spec = <Row extends { readonly id: string; readonly updated_at: string }>(
    kind: string,
    prefix: string,
    share: number,
    generate: (index: number, rng: Rng, book: BookRow, times: { created: number; updated: number }) => Row,
    extra: Partial<KindSpec<Row>> & { bookOfRow: (row: Row) => number }
  ): KindSpec<Row> => {
    const salt = hashString(kind)
    const bookOf = bookOfFor(salt)
    const times = timesFor(salt)
    return {
      kind,
      prefix,
      baseCount: countOf(share),
      bookCount,
      bookOf,
      updatedAtOf: times.updated,
      generate: (index) =>
        generate(index, new Rng(hash(seed, salt, index, 4)), books[bookOf(index)]!, {
          created: times.created(index),
          updated: times.updated(index)
        }),
      generateIn: (index, book, now) =>
        generate(index, new Rng(hash(seed, salt, index, 4)), books[book]!, { created: now, updated: now }),
      updatedAtOfRow: updatedOfRow,
      ...extra
    }
  }

  // Collections are declared in dependency order: a generator may only look at earlier ones.
  const households: Collection<HouseholdRow> = new Collection(
    spec<HouseholdRow>(
      "household",
      "hh",
      SHARES.households,
      (index, rng, book, t) => ({
        id: households.idOf(index),
        book_id: book.id,
        name: `${rng.pick(V.LAST_NAMES)} Household`,
        created_at: iso(t.created),
        updated_at: iso(t.updated)
      }),
      { bookOfRow: bookIdOf }
    )
  )

  const householdIn = (book: number, rng: Rng) => {
    const index = pickIn(households, book, rng)
    return index === undefined ? null : households.idOf(index)
  }

  const personFields = (rng: Rng, book: BookRow) => {
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
      household_id: householdIn(book.ordinal, rng),
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

  const contacts: Collection<ContactRow> = new Collection(
    spec<ContactRow>(
      "contact",
      "con",
      SHARES.contacts,
      (index, rng, book, t) => ({
        id: contacts.idOf(index),
        ...personFields(rng, book),
        created_at: iso(t.created),
        updated_at: iso(t.updated)
      }),
      { bookOfRow: bookIdOf }
    )
  )
  const contactName = (index: number) => {
    const contact = contacts.lastKnown(index)!
    return [contact.first_name, contact.last_name].filter((part) => part !== null).join(" ")
  }

  const prospects: Collection<ProspectRow> = new Collection(
    spec<ProspectRow>(
      "prospect",
      "pro",
      SHARES.prospects,
      (index, rng, book, t) => ({
        id: prospects.idOf(index),
        ...personFields(rng, book),
        household_id: null,
        status: rng.pick(V.PROSPECT_STATUSES),
        type: "prospect" as const,
        created_at: iso(t.created),
        updated_at: iso(t.updated)
      }),
      { bookOfRow: bookIdOf }
    )
  )

  const clients: Collection<ClientRow> = new Collection(
    spec<ClientRow>(
      "client",
      "cli",
      SHARES.clients,
      (index, rng, book, t) => {
        const householdIndex = pickIn(households, book.ordinal, rng)
        const tier = rng.pick(V.CLIENT_TIERS)
        return {
          id: clients.idOf(index),
          book_id: book.id,
          household_id: householdIndex === undefined ? null : households.idOf(householdIndex),
          name:
            householdIndex === undefined
              ? `${rng.pick(V.LAST_NAMES)} Family`
              : households.lastKnown(householdIndex)!.name,
          status: rng.pick(V.CLIENT_STATUSES),
          tier,
          aum: tier === null ? null : money(rng.int(5_000_000, 2_500_000_000)),
          became_client_at: rng.bool(0.85) ? iso(t.created + rng.int(0, 30) * DAY) : null,
          created_at: iso(t.created),
          updated_at: iso(t.updated)
        }
      },
      { bookOfRow: bookIdOf }
    )
  )

  const businessSalt = hashString("business")
  const businessNameOf = (index: number) =>
    `${V.BUSINESS_PREFIXES[hash(seed, businessSalt, index, 10) % V.BUSINESS_PREFIXES.length]} ${
      V.BUSINESS_NOUNS[hash(seed, businessSalt, index, 11) % V.BUSINESS_NOUNS.length]
    } ${V.BUSINESS_SUFFIXES[hash(seed, businessSalt, index, 12) % V.BUSINESS_SUFFIXES.length]}`
  const businesses: Collection<BusinessRow> = new Collection(
    spec<BusinessRow>(
      "business",
      "biz",
      SHARES.businesses,
      (index, rng, book, t) => {
        const name = businessNameOf(index)
        const domain = `${slug(name).split("-").slice(0, 2).join("")}.example.com`
        const companyTags = tags[book.company]!
        const phones: Array<BusinessPhoneNumber> = Array.from({ length: rng.int(1, 2) }, (_, i) => ({
          phone_number: e164(rng),
          phone_type: i === 0 ? "work" : rng.pick(V.PHONE_TYPES),
          is_primary: i === 0,
          extension: rng.bool(0.4) ? String(rng.int(100, 9999)) : null
        }))
        return {
          id: businesses.idOf(index),
          book_id: book.id,
          name,
          industry: rng.bool(0.9) ? rng.pick(V.INDUSTRIES) : null,
          website_url: rng.bool(0.7) ? `https://www.${domain}` : null,
          tax_id: rng.bool(0.6) ? `**-***${rng.digits(4)}` : null,
          additional_info: rng.bool(0.3) ? `Fiscal year ends in ${rng.pick(["March", "June", "September"])}.` : null,
          created_at: iso(t.created),
          updated_at: iso(t.updated),
          email_addresses: [{ email: `info@${domain}`, email_type: "work", is_primary: true }],
          phone_numbers: phones,
          addresses: [addressFor(rng, "work", true)],
          tags: rng.sample(companyTags, rng.int(0, 2))
        }
      },
      { bookOfRow: bookIdOf, nameOf: businessNameOf, nameOfRow: (row) => row.name }
    )
  )

  const annuityContracts: Collection<AnnuityContractRow> = new Collection(
    spec<AnnuityContractRow>(
      "annuity_contract",
      "ac",
      SHARES.annuityContracts,
      (index, rng, book, t) => {
        const id = annuityContracts.idOf(index)
        const suffix = id.slice(3)
        const [carrierKey, carrierName, products] = rng.pick(V.CARRIERS)
        const [productCode, productName] = rng.pick(products)
        const issued = t.created - rng.int(0, 3650) * DAY
        const ownerIndexes = [pickIn(contacts, book.ordinal, rng), pickIn(contacts, book.ordinal, rng)].filter(
          (i): i is number => i !== undefined
        )
        const roles = ["owner", "annuitant", "beneficiary"]
        const parties = ownerIndexes.map((contactIndex, i) => ({
          id: `acp_${suffix}_${i + 1}`,
          role: roles[i % roles.length]!,
          display_name: contactName(contactIndex),
          participant_type: "Person",
          participant_id: contacts.idOf(contactIndex)
        }))
        const contractValue = rng.int(2_500_000, 250_000_000)
        const asOf = isoDate(t.updated)
        const kinds = ["contract_value", "surrender_value", "death_benefit"]
        const amounts = [contractValue, Math.floor(contractValue * 0.93), Math.floor(contractValue * 1.05)]
        const values = kinds.slice(0, rng.int(1, 3)).map((kind, i) => ({
          id: `acv_${suffix}_${i + 1}`,
          kind,
          amount: money(amounts[i]!),
          as_of_date: asOf,
          created_at: iso(t.created),
          updated_at: iso(t.updated),
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
          anniversary_on: isoDate(issued + 365 * DAY * Math.max(1, Math.ceil((t.updated - issued) / (365 * DAY)))),
          matures_on: rng.bool(0.7) ? isoDate(issued + rng.int(10, 30) * 365 * DAY) : null,
          created_at: iso(t.created),
          updated_at: iso(t.updated),
          last_synced_at: rng.bool(0.8) ? iso(t.updated) : null,
          term_authority: rng.bool(0.6) ? "advisor" : "carrier",
          parties,
          placements: [
            {
              id: `acpl_${suffix}_1`,
              book_id: book.id,
              household_id: householdIn(book.ordinal, rng),
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
      },
      { bookOfRow: (row) => bookIdOf(row.placements[0]!) }
    )
  )

  const financialAccounts: Collection<FinancialAccountRow> = new Collection(
    spec<FinancialAccountRow>(
      "financial_account",
      "fa",
      SHARES.financialAccounts,
      (index, rng, book, t) => {
        const [accountType, taxType, label] = rng.pick(V.ACCOUNT_KINDS)
        const owners = [pickIn(contacts, book.ordinal, rng)]
        if (rng.bool(0.3)) owners.push(pickIn(contacts, book.ordinal, rng))
        const ownerIds = [...new Set(owners.filter((i): i is number => i !== undefined))].map((i) => contacts.idOf(i))
        const custom: Record<string, unknown> = { custodian_code: `C${rng.digits(4)}` }
        if (rng.bool(0.6)) custom.model_portfolio = rng.pick(V.MODEL_PORTFOLIOS)
        return {
          id: financialAccounts.idOf(index),
          name: label,
          institution_name: rng.pick(V.INSTITUTIONS),
          account_number: mask(rng.digits(9)),
          notes: rng.bool(0.15) ? "Held away; balance reported monthly by the client." : null,
          other_tax_advantaged_type_label: taxType === "other" ? "457(b)" : null,
          book_id: book.id,
          household_id: householdIn(book.ordinal, rng),
          account_type: accountType,
          tax_advantaged_type: taxType,
          balance_in_cents: rng.int(0, 1_500_000_000) + rng.int(0, 99),
          balance_as_of: iso(t.updated - rng.int(0, 5) * DAY),
          owner_ids: ownerIds,
          custom_fields: custom,
          created_at: iso(t.created),
          updated_at: iso(t.updated)
        }
      },
      { bookOfRow: bookIdOf }
    )
  )

  const meetings: Collection<MeetingRow> = new Collection(
    spec<MeetingRow>(
      "meeting",
      "mtg",
      SHARES.meetings,
      (index, rng, book, t) => {
        const start = t.created + rng.int(1, 20) * DAY
        const duration = rng.pick([15, 30, 45, 60, 90]) * 60
        const householdIds = [householdIn(book.ordinal, rng)].filter((id): id is string => id !== null)
        const contactIndex = rng.bool(0.6) ? pickIn(contacts, book.ordinal, rng) : undefined
        const businessIndex = rng.bool(0.2) ? pickIn(businesses, book.ordinal, rng) : undefined
        const members = [...book.members]
        const userIds = rng.sample(members, rng.int(1, Math.min(2, members.length)))
        const transcriptKind = rng.float()
        const names = [
          ...userIds.map((id) => {
            const user = users.find((u) => u.id === id)!
            return `${user.first_name} ${user.last_name}`
          }),
          contactIndex === undefined ? "Client" : contactName(contactIndex)
        ]
        const transcript: Array<TranscriptSegment> | null =
          transcriptKind < 0.65
            ? Array.from({ length: rng.int(3, 8) }, (_, i) => ({
                text: rng.pick(V.TRANSCRIPT_LINES),
                participant: { name: names[i % names.length]! },
                start_timestamp: iso(start + i * 20_000),
                end_timestamp: iso(start + i * 20_000 + 18_000)
              }))
            : null
        const source = rng.pick(V.MEETING_SOURCES)
        return {
          id: meetings.idOf(index),
          book_id: book.id,
          title: rng.pick(V.MEETING_TITLES),
          start_time: iso(start),
          end_time: iso(start + duration * 1000),
          duration_seconds: duration,
          meeting_link: source === "logged" ? null : `https://meet.example.com/${rng.digits(3)}-${rng.digits(4)}`,
          meeting_source: source,
          meeting_type: rng.pick(V.MEETING_TYPES),
          household_ids: householdIds,
          contact_ids: contactIndex === undefined ? [] : [contacts.idOf(contactIndex)],
          business_ids: businessIndex === undefined ? [] : [businesses.idOf(businessIndex)],
          user_ids: userIds,
          has_recordings: transcript !== null && rng.bool(0.7),
          quick_summary: transcript === null ? null : "Reviewed goals and agreed on next steps.",
          ai_summary: transcript === null ? null : `Discussed ${rng.pick(V.MEETING_TITLES).toLowerCase()} topics.`,
          notepad: rng.bool(0.4) ? "Bring updated statements next time." : null,
          transcript,
          // a few transcripts exist but are hidden from advisors (spec §6.4)
          transcript_visible: transcript !== null && transcriptKind < 0.6,
          event_participants: userIds.map((id) => {
            const user = users.find((u) => u.id === id)!
            return {
              id,
              name: `${user.first_name} ${user.last_name}`,
              email: user.email,
              participant_type: "user",
              response_status: "accepted"
            }
          }),
          created_at: iso(t.created),
          updated_at: iso(Math.max(t.updated, start + duration * 1000))
        }
      },
      { bookOfRow: bookIdOf }
    )
  )

  /** A household, contact or business of the book, as a task's `record` or a note's parent. */
  const relatedIn = (book: number, rng: Rng): RecordRef => {
    const roll = rng.float()
    if (roll < 0.3) {
      const index = pickIn(contacts, book, rng)
      if (index !== undefined) return { id: contacts.idOf(index), type: "contact", name: contactName(index) }
    } else if (roll < 0.45) {
      const index = pickIn(businesses, book, rng)
      if (index !== undefined) {
        return { id: businesses.idOf(index), type: "business", name: businesses.lastKnown(index)!.name }
      }
    }
    const index = pickIn(households, book, rng)!
    return { id: households.idOf(index), type: "household", name: households.lastKnown(index)!.name }
  }

  const tasks: Collection<TaskRow> = new Collection(
    spec<TaskRow>(
      "task",
      "task",
      SHARES.tasks,
      (index, rng, book, t) => {
        const done = rng.bool(0.4)
        const members = [...book.members]
        const assignment = rng.float()
        const companyTags = tags[book.company]!
        return {
          id: tasks.idOf(index),
          book_id: book.id,
          title: rng.pick(V.TASK_TITLES),
          description: rng.bool(0.6) ? rng.pick(V.NOTE_SENTENCES) : "",
          deadline_at: rng.bool(0.8) ? iso(t.created + rng.int(1, 60) * DAY) : null,
          completed_at: done ? iso(t.updated) : null,
          all_day: rng.bool(0.5),
          is_private: rng.bool(0.1),
          status: done ? "done" : "todo",
          priority: rng.pick(V.TASK_PRIORITIES),
          created_at: iso(t.created),
          updated_at: iso(t.updated),
          assigned_to_id: assignment < 0.7 ? rng.pick(members) : null,
          assigned_team_id: assignment >= 0.7 && assignment < 0.9 ? rng.pick(book.teams) : null,
          record: relatedIn(book.ordinal, rng),
          tag_ids: rng.sample(companyTags, rng.int(0, 2)).map((tag) => tag.id),
          scheduled: rng.bool(0.03),
          approved: !rng.bool(0.03)
        }
      },
      { bookOfRow: bookIdOf }
    )
  )

  const notes: Collection<NoteRow> = new Collection(
    spec<NoteRow>(
      "note",
      "note",
      SHARES.notes,
      (index, rng, book, t) => {
        const parent = relatedIn(book.ordinal, rng)
        const householdId =
          parent.type === "household"
            ? parent.id
            : parent.type === "contact"
              ? (contacts.getById(parent.id)?.household_id ?? null)
              : null
        const companyTags = tags[book.company]!
        return {
          id: notes.idOf(index),
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
          created_at: iso(t.created),
          updated_at: iso(t.updated)
        }
      },
      { bookOfRow: bookIdOf }
    )
  )

  const templates = buildTemplates(seed, companies, books)

  return {
    seed,
    companies,
    users,
    usersById: new Map(users.map((user) => [user.id, user] as const)),
    teams,
    teamsById: new Map(teams.map((team) => [team.id, team] as const)),
    books,
    booksById,
    tags,
    tagsById: new Map(tags.flat().map((tag) => [tag.id, tag] as const)),
    customFields,
    templates,
    households,
    contacts,
    prospects,
    clients,
    businesses,
    annuityContracts,
    financialAccounts,
    meetings,
    tasks,
    notes
  }
}

export const notableTypeOf = (type: RecordRef["type"]): NotableType =>
  type === "household" ? "Household" : type === "contact" ? "Contact" : "Business"

/** Two company-wide templates per company plus one per book. */
const buildTemplates = (
  seed: number,
  companies: ReadonlyArray<CompanyRow>,
  books: ReadonlyArray<BookRow>
): Array<ProjectTemplateRow> => {
  const templates: Array<ProjectTemplateRow> = []
  for (const company of companies) {
    const companyBooks = books.filter((book) => book.company === company.ordinal)
    const owners: Array<BookRow | null> = [null, null, ...companyBooks]
    owners.forEach((book, orderIndex) => {
      const ordinal = templates.length
      const rng = new Rng(hash(seed, hashString("project_template"), ordinal))
      const [title, kind, description] = V.TEMPLATE_SPECS[(company.ordinal * 2 + orderIndex) % V.TEMPLATE_SPECS.length]!
      const id = ordinalId("tpl", ordinal)
      const created = RANGE_START + Math.floor(rng.float() * 180 * DAY)
      const updated = created + Math.floor(rng.float() * 365 * DAY)
      const milestoneCount = rng.int(3, 5)
      const milestoneIds = Array.from({ length: milestoneCount }, (_, m) => `ms_${id.slice(4)}_${m + 1}`)
      const milestones: Array<Milestone> = milestoneIds.map((milestoneId, m) => ({
        id: milestoneId,
        title: V.MILESTONE_TITLES[m % V.MILESTONE_TITLES.length]!,
        project_template_id: id,
        guid: guidOf(seed, ordinal, m, 1),
        color: V.MILESTONE_COLORS[m % V.MILESTONE_COLORS.length]!,
        sort_order: m + 1,
        auto_advance_trigger:
          m === milestoneCount - 1 ? "none" : rng.pick(["none", "all_tasks_completed", "form_completed"]),
        created_at: iso(created),
        updated_at: iso(updated),
        project_milestone_outcomes:
          m === milestoneCount - 1
            ? [
                {
                  id: `out_${milestoneId.slice(3)}_1`,
                  label: "Complete",
                  destination: "complete_project",
                  default_comment: null,
                  target_project_milestone_id: null,
                  sort_order: 1
                }
              ]
            : [
                {
                  id: `out_${milestoneId.slice(3)}_1`,
                  label: "Advance",
                  destination: "next_milestone",
                  default_comment: "Moving forward.",
                  target_project_milestone_id: milestoneIds[m + 1]!,
                  sort_order: 1
                },
                ...(m > 0
                  ? [
                      {
                        id: `out_${milestoneId.slice(3)}_2`,
                        label: "Send back",
                        destination: "specific_milestone",
                        default_comment: "Needs rework.",
                        target_project_milestone_id: milestoneIds[m - 1]!,
                        sort_order: 2
                      }
                    ]
                  : [])
              ],
        project_milestone_form_fields: Array.from({ length: rng.int(0, 3) }, (_, f) => {
          const fieldType = rng.pick(V.FORM_FIELD_TYPES)
          return {
            id: `ff_${milestoneId.slice(3)}_${f + 1}`,
            label: ["Target date", "Documents received", "Risk profile", "Funding amount"][f % 4]!,
            field_type: fieldType,
            guid: guidOf(seed, ordinal, m, f, 2),
            placeholder: fieldType === "text" || fieldType === "textarea" ? "Type here" : null,
            household_record_source: f === 0 && kind === "household" ? "household.name" : null,
            required: rng.bool(0.5),
            sort_order: f + 1,
            select_options: fieldType === "select" ? ["Conservative", "Moderate", "Aggressive"] : []
          }
        })
      }))
      templates.push({
        id,
        guid: guidOf(seed, ordinal, 0),
        title: book === null ? title : `${title} (${book.initials})`,
        description,
        projectable_kind: kind,
        enable_kanban_view: rng.bool(0.5),
        book_id: book?.id ?? null,
        book_name: book?.name ?? null,
        book_initials: book?.initials ?? null,
        order_index: orderIndex + 1,
        created_at: iso(created),
        updated_at: iso(updated),
        project_milestones: milestones,
        attachments: rng.bool(0.4)
          ? [
              {
                file_name: `${slug(title)}-checklist.pdf`,
                file_type: "application/pdf",
                file_size: rng.int(20_000, 900_000),
                source: "upload",
                signed_id: `sid_${rng.digits(12)}`,
                download_url: `https://files.example.com/templates/${id}/download`,
                view_url: `https://files.example.com/templates/${id}/view`
              }
            ]
          : [],
        company: company.ordinal
      })
    })
  }
  return templates
}
