/**
 * Actions on the kinds that emit no webhook events: businesses, financial accounts, annuity
 * contracts and project templates. Page-drift faults mutate through here too: drift touches only
 * these kinds, so a drifted page never announces anything.
 */
import { Effect } from "effect"
import type {
  CreateAnnuityContractInput,
  CreateBusinessInput,
  CreateFinancialAccountInput,
  DriftAction,
  DriftTarget,
  UpdateAnnuityContractInput,
  UpdateBusinessInput,
  UpdateFinancialAccountInput
} from "./ActionInputs.ts"
import { type ActionDeps, bookOf, checkTags, find, timestampOf } from "./ActionSupport.ts"
import type { Collection } from "./Collection.ts"
import { notFound, validationFailed } from "./errors.ts"
import type { World } from "./World.ts"
import type { Rng } from "./Prng.ts"
import type { AnnuityContractRow, BusinessRow, FinancialAccountRow } from "./Records.ts"
import { iso } from "./SandboxClock.ts"

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
export const withContractValue = (contract: AnnuityContractRow, amount: string | undefined, timestamp: string) => {
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

export const createBusiness = Effect.fn("SandboxActions.createBusiness")(function* (
  deps: ActionDeps,
  input: CreateBusinessInput
) {
  const world = yield* deps.store.world
  const book = yield* bookOf(world, input.book_id)
  yield* checkTags(world, book.company, input.tag_ids)
  const nowMs = yield* deps.clock.now
  const { book_id: _book, tag_ids, ...fields } = input
  return world.businesses.insert((index) => ({
    ...world.businesses.spec.generateIn(index, book.ordinal, nowMs),
    ...fields,
    ...(tag_ids === undefined ? {} : { tags: tagsOf(world, book.company, tag_ids) })
  }))
})

export const updateBusiness = Effect.fn("SandboxActions.updateBusiness")(function* (
  deps: ActionDeps,
  id: string,
  input: UpdateBusinessInput
) {
  const world = yield* deps.store.world
  const { index, row } = yield* find(world.businesses, id)
  const company = world.booksById.get(row.book_id)!.company
  yield* checkTags(world, company, input.tag_ids)
  const timestamp = yield* timestampOf(deps)
  const { tag_ids, ...fields } = input
  return world.businesses.update(index, (business) => ({
    ...business,
    ...fields,
    ...(tag_ids === undefined ? {} : { tags: tagsOf(world, company, tag_ids) }),
    updated_at: timestamp
  }))!
})

export const createFinancialAccount = Effect.fn("SandboxActions.createFinancialAccount")(function* (
  deps: ActionDeps,
  input: CreateFinancialAccountInput
) {
  const world = yield* deps.store.world
  const book = yield* bookOf(world, input.book_id)
  yield* checkAccountLinks(world, book.id, input)
  const nowMs = yield* deps.clock.now
  return world.financialAccounts.insert((index) => ({
    ...world.financialAccounts.spec.generateIn(index, book.ordinal, nowMs),
    ...input,
    balance_as_of: iso(nowMs)
  }))
})

export const updateFinancialAccount = Effect.fn("SandboxActions.updateFinancialAccount")(function* (
  deps: ActionDeps,
  id: string,
  input: UpdateFinancialAccountInput
) {
  const world = yield* deps.store.world
  const { index, row } = yield* find(world.financialAccounts, id)
  yield* checkAccountLinks(world, row.book_id, input)
  const timestamp = yield* timestampOf(deps)
  return world.financialAccounts.update(index, (account) => ({
    ...account,
    ...input,
    ...(input.balance_in_cents === undefined ? {} : { balance_as_of: timestamp }),
    updated_at: timestamp
  }))!
})

export const createAnnuityContract = Effect.fn("SandboxActions.createAnnuityContract")(function* (
  deps: ActionDeps,
  input: CreateAnnuityContractInput
) {
  const world = yield* deps.store.world
  const book = yield* bookOf(world, input.book_id)
  const nowMs = yield* deps.clock.now
  const { book_id: _book, contract_value, ...fields } = input
  return world.annuityContracts.insert((index) =>
    withContractValue(
      { ...world.annuityContracts.spec.generateIn(index, book.ordinal, nowMs), ...fields },
      contract_value,
      iso(nowMs)
    )
  )
})

export const updateAnnuityContract = Effect.fn("SandboxActions.updateAnnuityContract")(function* (
  deps: ActionDeps,
  id: string,
  input: UpdateAnnuityContractInput
) {
  const world = yield* deps.store.world
  const { index } = yield* find(world.annuityContracts, id)
  const timestamp = yield* timestampOf(deps)
  const { contract_value, ...fields } = input
  return world.annuityContracts.update(index, (contract) =>
    withContractValue({ ...contract, ...fields, updated_at: timestamp }, contract_value, timestamp)
  )!
})

/** `delete<Kind>` for a collection of the world: the record disappears, no event. */
export const remover =
  <Row extends { readonly id: string }>(deps: ActionDeps, pick: (world: World) => Collection<Row>, name: string) =>
  (id: string) =>
    Effect.gen(function* () {
      const collection = pick(yield* deps.store.world)
      const { index } = yield* find(collection, id)
      collection.remove(index)
    }).pipe(Effect.withSpan(`SandboxActions.${name}`))

export const deleteProjectTemplate = Effect.fn("SandboxActions.deleteProjectTemplate")(function* (
  deps: ActionDeps,
  id: string
) {
  const world = yield* deps.store.world
  const index = world.templates.findIndex((template) => template.id === id)
  if (index < 0) return yield* notFound(`project template ${id} not found`)
  world.templates.splice(index, 1)
})

const driftCollection = (
  world: World,
  target: DriftTarget
): Collection<BusinessRow> | Collection<FinancialAccountRow> | Collection<AnnuityContractRow> =>
  target === "businesses"
    ? world.businesses
    : target === "financial_accounts"
      ? world.financialAccounts
      : world.annuityContracts

export const drift = Effect.fn("SandboxActions.drift")(function* (
  deps: ActionDeps,
  target: DriftTarget,
  action: DriftAction,
  books: ReadonlyArray<number>,
  offset: number,
  rng: Rng
) {
  const world = yield* deps.store.world
  if (books.length === 0) return undefined
  const nowMs = yield* deps.clock.now
  const collection = driftCollection(world, target)
  if (action === "insert") {
    const book = rng.pick(books)
    const row = (collection as Collection<{ readonly id: string }>).insert((index) =>
      collection.spec.generateIn(index, book, nowMs)
    )
    return { action, id: row.id }
  }
  // a record the crawl has already passed, so removing it shifts the pages still to come
  const page = collection.list({ books, offset: 0, limit: Math.max(1, offset) })
  const candidates = page.indexes.length > 0 ? page.indexes : collection.list({ books, offset: 0, limit: 1 }).indexes
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
