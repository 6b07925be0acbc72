/**
 * The deterministic world: companies, users, teams, books, tags and project templates are built
 * eagerly (they are few); every other kind is a lazy `Collection` whose record `i` is a pure
 * function of `(seed, kind, i)`: its book and timestamps are placed here, its fields drawn by
 * the kind's builder in `RecordBuilders.ts`. Related records are picked from the same book's base
 * records, so references stay inside a book and stay stable whatever is mutated later.
 */
import { Collection, type KindSpec } from "./Collection.ts"
import type { ResolvedOptions } from "./Options.ts"
import { hash, hashString, Rng, unit } from "./Prng.ts"
import { buildTemplates } from "./ProjectTemplates.ts"
import {
  annuityContractRow,
  businessNameOf,
  businessRow,
  clientRow,
  contactRow,
  DAY,
  type Draw,
  financialAccountRow,
  householdRow,
  meetingRow,
  noteRow,
  ordinalId,
  prospectRow,
  RANGE_END,
  RANGE_START,
  slug,
  taskRow
} from "./RecordBuilders.ts"
import type { BookRow, CompanyRow, TeamRow, UserRow } from "./Records.ts"
import { iso } from "./SandboxClock.ts"
import * as V from "./Vocabulary.ts"
import type { World } from "./World.ts"

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

const rngFor = (seed: number, salt: string, index: number) => new Rng(hash(seed, hashString(salt), index))

const buildCompanies = (count: number): Array<CompanyRow> =>
  Array.from({ length: count }, (_, ordinal) => ({
    id: ordinalId("cmp", ordinal),
    name:
      ordinal < V.COMPANY_NAMES.length ? V.COMPANY_NAMES[ordinal]! : `${V.COMPANY_NAMES[ordinal % 8]} ${ordinal + 1}`,
    ordinal
  }))

/** `usersPerCompany` users per company, in company order, with addresses at the company's domain. */
const buildUsers = (options: ResolvedOptions, companies: ReadonlyArray<CompanyRow>): Array<UserRow> => {
  const users: Array<UserRow> = []
  for (const company of companies) {
    const domain = `${slug(company.name).split("-")[0]}.example.com`
    for (let u = 0; u < options.usersPerCompany; u++) {
      const ordinal = users.length
      const rng = rngFor(options.seed, "user", ordinal)
      const first = rng.pick(V.FIRST_NAMES)
      const last = rng.pick(V.LAST_NAMES)
      users.push({
        id: ordinalId("usr", ordinal),
        email: `${slug(first)}.${slug(last)}@${domain}`,
        first_name: first,
        last_name: last,
        // the first user of company 0 also works for company 1: a user in several companies (spec §5.4)
        companies: ordinal === 0 && companies.length > 1 ? [0, 1] : [company.ordinal],
        active: true
      })
    }
  }
  return users
}

const buildTeams = (companyCount: number): Array<TeamRow> => {
  const teams: Array<TeamRow> = []
  for (let company = 0; company < companyCount; company++) {
    for (let t = 0; t < 2; t++) {
      teams.push({ id: ordinalId("team", teams.length), name: V.TEAM_NAMES[t]!, company })
    }
  }
  return teams
}

const initialsOf = (name: string) =>
  name
    .split(/[^A-Za-z]+/)
    .filter((word) => word.length > 0)
    .map((word) => word[0]!.toUpperCase())
    .join("")

/** The default layout: the company's first user is in every book, the others in one or two. */
const defaultMembers = (options: ResolvedOptions, own: ReadonlyArray<UserRow>, b: number) => {
  const members = new Set<string>([own[0]!.id])
  for (let u = 1; u < own.length; u++) {
    if ((u - 1) % options.booksPerCompany === b || u % options.booksPerCompany === b) members.add(own[u]!.id)
  }
  return members
}

/**
 * A chosen overlap: user `u` is in `max(1, round(overlap × booksPerCompany))` consecutive books
 * from book `u mod booksPerCompany`, wrapping; book `b` has the users whose run covers it.
 */
const overlapMembers = (options: ResolvedOptions, own: ReadonlyArray<UserRow>, b: number) => {
  const books = options.booksPerCompany
  const run = Math.max(1, Math.round((options.overlap ?? 1) * books))
  const members = new Set<string>()
  for (const [u, user] of own.entries()) {
    if ((b - (u % books) + books) % books < run) members.add(user.id)
  }
  return members
}

/**
 * `booksPerCompany` books per company, their members as `defaultMembers` or `overlapMembers`
 * lay them out; even books have one team, odd books both.
 */
const buildBooks = (
  options: ResolvedOptions,
  users: ReadonlyArray<UserRow>,
  teams: ReadonlyArray<TeamRow>
): Array<BookRow> => {
  const books: Array<BookRow> = []
  for (let company = 0; company < options.companies; company++) {
    const own = users.slice(company * options.usersPerCompany, (company + 1) * options.usersPerCompany)
    const companyTeams = teams.filter((team) => team.company === company)
    for (let b = 0; b < options.booksPerCompany; b++) {
      const ordinal = books.length
      const name = b < V.BOOK_NAMES.length ? V.BOOK_NAMES[b]! : `Book ${b + 1}`
      const members = options.overlap === undefined ? defaultMembers(options, own, b) : overlapMembers(options, own, b)
      // the multi-company user sees only the first book of their second company
      if (company === 1 && b === 0) members.add(users[0]!.id)
      const rng = rngFor(options.seed, "book", ordinal)
      const created = RANGE_START + Math.floor(rng.float() * 90 * DAY)
      books.push({
        id: ordinalId("bk", ordinal),
        name,
        initials: initialsOf(name),
        ordinal,
        company,
        members,
        teams: b % 2 === 0 ? [companyTeams[0]!.id] : companyTeams.map((team) => team.id),
        created_at: iso(created),
        updated_at: iso(created + Math.floor(rng.float() * 30 * DAY))
      })
    }
  }
  return books
}

/** Where the base records of every lazy kind go: how many, in which book, with which timestamps. */
interface Plan {
  readonly seed: number
  readonly records: number
  readonly books: ReadonlyArray<BookRow>
  readonly booksById: ReadonlyMap<string, BookRow>
  /** The partner's own company's books come first: `ownBooks` of them. */
  readonly ownBooks: number
  /** Records spread evenly over every book (`recordsPerCompany`), at least one of a kind per book. */
  readonly even: boolean
}

/**
 * The book of base record `i`: the first `bookCount` records cover every book once; after
 * that, 90% go to the partner's own company (company 0), where the bootstrap token looks, or,
 * spread evenly, any book alike.
 */
const bookOfFor = (plan: Plan, salt: number) => {
  const bookCount = plan.books.length
  const otherBooks = bookCount - plan.ownBooks
  return (index: number) => {
    if (index < bookCount) return index
    const h = hash(plan.seed, salt, index, 1)
    if (plan.even) return h % bookCount
    return otherBooks === 0 || unit(hash(plan.seed, salt, index, 5)) < OWN_COMPANY_SHARE
      ? h % plan.ownBooks
      : plan.ownBooks + (h % otherBooks)
  }
}

const createdOf = (plan: Plan, salt: number, index: number) =>
  RANGE_START + Math.floor(unit(hash(plan.seed, salt, index, 2)) * (RANGE_END - RANGE_START))

const updatedOf = (plan: Plan, salt: number, index: number) => {
  const created = createdOf(plan, salt, index)
  return created + Math.floor(unit(hash(plan.seed, salt, index, 3)) * (RANGE_END - created))
}

const bookOrdinalOf = (plan: Plan, row: { readonly book_id: string }) => {
  const book = plan.booksById.get(row.book_id)
  if (book === undefined) throw new globalThis.Error(`unknown book ${row.book_id}`)
  return book.ordinal
}

/**
 * A lazy collection of `kind` whose record `i` is `build(world, draw)`. The world is read only
 * when a record is generated, which never happens while the world is being assembled.
 */
const lazyKind = <Row extends { readonly id: string; readonly updated_at: string }>(
  plan: Plan,
  world: () => World,
  names: { readonly kind: string; readonly prefix: string; readonly share: number },
  build: (world: World, draw: Draw) => Row,
  extra: NoInfer<Partial<KindSpec<Row>> & { bookOfRow: (row: Row) => number }>
): Collection<Row> => {
  const salt = hashString(names.kind)
  const bookOf = bookOfFor(plan, salt)
  const generate = (index: number, book: number, created: number, updated: number) =>
    build(world(), {
      index,
      id: collection.idOf(index),
      rng: new Rng(hash(plan.seed, salt, index, 4)),
      book: plan.books[book]!,
      created,
      updated
    })
  const collection: Collection<Row> = new Collection<Row>({
    kind: names.kind,
    prefix: names.prefix,
    // at least a few of every kind in every book, however small `records` is
    baseCount: Math.max(plan.books.length * (plan.even ? 1 : 4), Math.round(plan.records * names.share)),
    bookCount: plan.books.length,
    bookOf,
    updatedAtOf: (index) => updatedOf(plan, salt, index),
    generate: (index) => generate(index, bookOf(index), createdOf(plan, salt, index), updatedOf(plan, salt, index)),
    generateIn: (index, book, now) => generate(index, book, now, now),
    updatedAtOfRow: (row) => Date.parse(row.updated_at),
    ...extra
  })
  return collection
}

export const buildWorld = (options: ResolvedOptions): World => {
  const seed = options.seed
  const companies = buildCompanies(options.companies)
  const users = buildUsers(options, companies)
  const teams = buildTeams(options.companies)
  const books = buildBooks(options, users, teams)
  const booksById = new Map(books.map((book) => [book.id, book] as const))
  const tags = companies.map((company) =>
    V.TAG_NAMES.map((name, i) => ({ id: ordinalId("tag", company.ordinal * V.TAG_NAMES.length + i), name }))
  )
  const plan: Plan = {
    seed,
    records: options.records,
    books,
    booksById,
    ownBooks: options.booksPerCompany,
    even: options.recordsPerCompany !== undefined
  }
  const kind = <Row extends { readonly id: string; readonly updated_at: string }>(
    name: string,
    prefix: string,
    share: number,
    build: (world: World, draw: Draw) => Row,
    extra: NoInfer<Partial<KindSpec<Row>> & { bookOfRow: (row: Row) => number }>
  ) => lazyKind(plan, () => world, { kind: name, prefix, share }, build, extra)
  const inBook = { bookOfRow: (row: { readonly book_id: string }) => bookOrdinalOf(plan, row) }

  // Collections are declared in dependency order: a builder may only look at earlier ones.
  const world: World = {
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
    customFields: { contact: [...V.CONTACT_CUSTOM_FIELDS], financial_account: [...V.ACCOUNT_CUSTOM_FIELDS] },
    templates: buildTemplates(seed, companies, books),
    households: kind("household", "hh", SHARES.households, householdRow, inBook),
    contacts: kind("contact", "con", SHARES.contacts, contactRow, inBook),
    prospects: kind("prospect", "pro", SHARES.prospects, prospectRow, inBook),
    clients: kind("client", "cli", SHARES.clients, clientRow, inBook),
    businesses: kind("business", "biz", SHARES.businesses, businessRow, {
      ...inBook,
      nameOf: (index) => businessNameOf(seed, index),
      nameOfRow: (row) => row.name
    }),
    annuityContracts: kind("annuity_contract", "ac", SHARES.annuityContracts, annuityContractRow, {
      bookOfRow: (row) => bookOrdinalOf(plan, row.placements[0]!)
    }),
    financialAccounts: kind("financial_account", "fa", SHARES.financialAccounts, financialAccountRow, inBook),
    meetings: kind("meeting", "mtg", SHARES.meetings, meetingRow, inBook),
    tasks: kind("task", "task", SHARES.tasks, taskRow, inBook),
    notes: kind("note", "note", SHARES.notes, noteRow, inBook)
  }
  return world
}
