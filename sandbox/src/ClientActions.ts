/**
 * Clients, contacts and prospects as the CRM's users create and change them. A new client emits
 * `client.created`; a changed one goes through the debounced `client.updated` (§6.3, §8); a new
 * prospect emits `prospect.created`; contacts emit nothing (their event shape is not in the
 * spec). Contacts and prospects take the person fields of spec §2.2.
 */
import { Effect } from "effect"
import type { CreateClientInput, PersonInput, ProspectInput, UpdateClientInput } from "./ActionInputs.ts"
import { type ActionDeps, announce, bookOf, find, subjectOf, timestampOf } from "./ActionSupport.ts"
import { validationFailed } from "./errors.ts"
import type { World } from "./World.ts"
import type { Address, ClientRow, EmailAddress, PhoneNumber } from "./Records.ts"
import { clientApi, prospectApi } from "./Serializers.ts"

const blank = (value: string | null | undefined) => value == null || value.trim() === ""

/** Spec §2.2 defaults for the repeated person fields: lower-cased emails, US home addresses. */
const contactPoints = (input: PersonInput) => {
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
  return { email_addresses: emails, phone_numbers: phones, addresses }
}

/** The stored fields of a contact or prospect; custom fields must be among the defined keys. */
export const personRow = (world: World, input: PersonInput, timestamp: string) => {
  const customKeys = Object.keys(input.custom_fields ?? {})
  const unknownKeys = customKeys.filter((key) => !world.customFields.contact.includes(key))
  if (unknownKeys.length > 0) {
    return Effect.fail(
      validationFailed(
        `custom_fields: unknown keys ${unknownKeys.join(", ")}; defined keys: ${world.customFields.contact.join(", ")}`
      )
    )
  }
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
    ...contactPoints(input),
    custom_fields: input.custom_fields ?? {},
    created_at: timestamp,
    updated_at: timestamp
  })
}

export const createClient = Effect.fn("SandboxActions.createClient")(function* (
  deps: ActionDeps,
  input: CreateClientInput
) {
  const world = yield* deps.store.world
  const book = yield* bookOf(world, input.book_id)
  if (input.household_id != null && world.households.getById(input.household_id)?.book_id !== book.id) {
    return yield* validationFailed(`household_id: ${input.household_id} not found in book ${book.id}`)
  }
  const timestamp = yield* timestampOf(deps)
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
  yield* announce(deps, world, "client.created", "client", world.clients.indexOf(client.id)!, client)
  return clientApi(client)
})

export const updateClient = Effect.fn("SandboxActions.updateClient")(function* (
  deps: ActionDeps,
  id: string,
  input: UpdateClientInput
) {
  const world = yield* deps.store.world
  const { index, row } = yield* find(world.clients, id)
  const changed = (Object.keys(input) as Array<keyof UpdateClientInput>).filter((key) => input[key] !== row[key])
  if (changed.length === 0) return clientApi(row)
  const timestamp = yield* timestampOf(deps)
  const next = world.clients.update(index, (client): ClientRow => ({
    ...client,
    ...input,
    updated_at: timestamp
  }))!
  // debounced: changed_fields accumulate over the window (§6.3, §8)
  yield* deps.webhooks.clientChanged(subjectOf(world, "client", index, next), changed)
  return clientApi(next)
})

export const createContact = Effect.fn("SandboxActions.createContact")(function* (
  deps: ActionDeps,
  input: PersonInput
) {
  const world = yield* deps.store.world
  yield* bookOf(world, input.book_id)
  if (blank(input.first_name) && blank(input.last_name)) {
    return yield* validationFailed("a contact needs a first_name or a last_name")
  }
  const fields = yield* personRow(world, input, yield* timestampOf(deps))
  return world.contacts.insert((_, id) => ({ id, ...fields }))
})

export const createProspect = Effect.fn("SandboxActions.createProspect")(function* (
  deps: ActionDeps,
  input: ProspectInput
) {
  const world = yield* deps.store.world
  yield* bookOf(world, input.book_id)
  const missing = (["first_name", "last_name"] as const).filter((key) => blank(input[key]))
  if (missing.length > 0) return yield* validationFailed(`required: ${missing.join(", ")}`)
  const fields = yield* personRow(world, input, yield* timestampOf(deps))
  const prospect = world.prospects.insert((_, id) => ({
    id,
    ...fields,
    status: input.status ?? "new",
    type: "prospect" as const
  }))
  yield* announce(deps, world, "prospect.created", "prospect", world.prospects.indexOf(prospect.id)!, prospect)
  return prospectApi(prospect)
})
