/**
 * The resource models of spec §2 against the JSON fixtures: every resource decodes, unknown fields
 * and new enum values pass, absent values read as null or empty, and values a typed column could
 * not hold (a fractional cent, an impossible date, a malformed amount) fail naming the field. The
 * warehouse's fast decoder gives what the models give, on the fixtures and on every variant of
 * them with a field removed, null, or of another type.
 */
import { assert, describe, it } from "@effect/vitest"
import { Result, Schema } from "effect"
import { E164, fastDecoder, isE164 } from "../../src/crm/Fields.ts"
import * as Models from "../../src/crm/Models.ts"
import { type JsonObject, type ResourceFixture, resourceFixture } from "../fixtures/Fixtures.ts"

const decode = <S extends Schema.Decoder<unknown>>(schema: S, input: unknown) =>
  Schema.decodeUnknownResult(schema)(input, { errors: "all" })

const decodeOk = <S extends Schema.Decoder<unknown>>(schema: S, input: unknown): S["Type"] => {
  const result = decode(schema, input)
  if (Result.isFailure(result)) assert.fail(result.failure.message)
  return result.success
}

const decodeFails = (schema: Schema.Decoder<unknown>, input: unknown): string => {
  const result = decode(schema, input)
  if (Result.isSuccess(result)) return assert.fail("expected decoding to fail")
  return result.failure.message
}

const models: ReadonlyArray<readonly [ResourceFixture, Schema.Decoder<unknown>]> = [
  ["contact", Models.Contact],
  ["business", Models.Business],
  ["project_template", Models.ProjectTemplate],
  ["annuity_contract", Models.AnnuityContract],
  ["financial_account", Models.FinancialAccount],
  ["meeting", Models.Meeting],
  ["meeting_transcript", Models.MeetingTranscript],
  ["task", Models.Task],
  ["note", Models.Note],
  ["client", Models.Client],
  ["prospect", Models.Prospect],
  ["book", Models.Book],
  ["user", Models.User],
  ["team", Models.Team],
  ["household", Models.Household],
  ["webhook_subscription", Models.WebhookSubscription],
  ["me", Models.Me],
  ["businesses_page", Models.ListEnvelope(Models.Business)]
]

describe("resource models (spec §2)", () => {
  for (const [name, schema] of models) {
    it(`decodes the ${name} fixture`, () => {
      decodeOk(schema, resourceFixture(name))
    })
  }

  it("types every kind of field: dates, timestamps, dollars, cents, nested lists", () => {
    const contract = decodeOk(Models.AnnuityContract, resourceFixture("annuity_contract"))
    assert.strictEqual(contract.established_on, "2019-04-15")
    assert.strictEqual(contract.values[0]!.amount, "412345.67")
    assert.strictEqual(contract.parties[1]!.participant_type, "Trust")
    const account = decodeOk(Models.FinancialAccount, resourceFixture("financial_account"))
    assert.strictEqual(account.balance_in_cents, 987654321012)
    assert.deepStrictEqual(account.owner_ids, ["per_331", "per_332"])
    const template = decodeOk(Models.ProjectTemplate, resourceFixture("project_template"))
    assert.deepStrictEqual(template.project_milestones[0]!.project_milestone_form_fields[0]!.select_options, [
      "IRA",
      "Roth IRA",
      "Brokerage"
    ])
  })

  it("accepts an extra field and a new enum value without error", () => {
    const contact: JsonObject = { ...resourceFixture("contact"), gender: "agender", loyalty_tier: "gold" }
    const decoded = decodeOk(Models.Contact, contact)
    assert.strictEqual(decoded.gender, "agender")
    const meeting = { ...resourceFixture("meeting"), meeting_source: "phone_bridge", recording_region: "eu" }
    assert.strictEqual(decodeOk(Models.Meeting, meeting).meeting_source, "phone_bridge")
    const task = { ...resourceFixture("task"), status: "waiting_on_client" }
    assert.strictEqual(decodeOk(Models.Task, task).status, "waiting_on_client")
  })

  it("reads absent or null fields as null and absent or null nested lists as empty", () => {
    const business = decodeOk(Models.Business, {
      id: "bus_min",
      updated_at: "2025-01-01T00:00:00Z",
      website_url: null,
      tags: null
    })
    assert.strictEqual(business.website_url, null)
    assert.strictEqual(business.name, null)
    assert.deepStrictEqual(business.tags, [])
    assert.deepStrictEqual(business.email_addresses, [])
  })

  it("keeps the spec's nulls: tier, aum, became_client_at, meeting_link, completed_at, transcript", () => {
    const client = decodeOk(Models.Client, { id: "cli_1", tier: null, aum: null, became_client_at: null })
    assert.deepStrictEqual([client.tier, client.aum, client.became_client_at], [null, null, null])
    assert.strictEqual(decodeOk(Models.MeetingTranscript, { meeting_id: "m", transcript: null }).transcript, null)
  })

  it("requires an id, and updated_at where the spec gives one (the forward-only guard needs it)", () => {
    assert.include(decodeFails(Models.Business, { ...resourceFixture("business"), id: undefined }), "id")
    const { updated_at: _, ...noUpdatedAt } = resourceFixture("business")
    assert.include(decodeFails(Models.Business, noUpdatedAt), "updated_at")
    decodeOk(Models.Client, { id: "cli_2" })
  })

  it("refuses values a typed column could not hold", () => {
    const account = resourceFixture("financial_account")
    assert.include(decodeFails(Models.FinancialAccount, { ...account, balance_in_cents: 12.5 }), "balance_in_cents")
    assert.include(decodeFails(Models.FinancialAccount, { ...account, balance_as_of: "yesterday" }), "balance_as_of")
    const contract = resourceFixture("annuity_contract")
    assert.include(decodeFails(Models.AnnuityContract, { ...contract, matures_on: "2049-02-30" }), "matures_on")
    const values = [{ ...(contract.values as Array<JsonObject>)[0], amount: "1,234.00" }]
    assert.include(decodeFails(Models.AnnuityContract, { ...contract, values }), "amount")
    const meeting = resourceFixture("meeting")
    assert.include(decodeFails(Models.Meeting, { ...meeting, duration_seconds: 2 ** 31 }), "duration_seconds")
  })

  it("accepts timestamps with offsets and fractions, dates only when they exist", () => {
    const base = resourceFixture("business")
    decodeOk(Models.Business, { ...base, updated_at: "2025-03-10T16:45:12.123456+02:00" })
    decodeOk(Models.Business, { ...base, updated_at: "2025-03-10 16:45:12+02" })
    decodeFails(Models.Business, { ...base, updated_at: "2025-03-10T16:45:12" })
    decodeFails(Models.Business, { ...base, updated_at: "2025-04-31T16:45:12Z" })
    decodeFails(Models.Business, { ...base, updated_at: "2025-03-10" })
    decodeFails(Models.Business, { ...base, updated_at: "2025-13-10T16:45:12Z" })
    decodeOk(Models.AnnuityContract, { ...resourceFixture("annuity_contract"), matures_on: "2048-02-29" })
  })

  it("stores a received phone number that is not E.164, but refuses one in a request body", () => {
    const contact = resourceFixture("contact")
    const phones = [{ phone_number: "(415) 555-0123", phone_type: "home", is_primary: true }]
    assert.strictEqual(
      decodeOk(Models.Contact, { ...contact, phone_numbers: phones }).phone_numbers[0]!.phone_number,
      "(415) 555-0123"
    )
    assert.isFalse(isE164("(415) 555-0123"))
    assert.isTrue(isE164("+14155550123"))
    decodeFails(E164, "+0123")
    const body = { book_id: "book_3F9A", first_name: "Ana", phone_numbers: phones }
    assert.include(decodeFails(Models.ContactCreate, body), "E.164")
    decodeOk(Models.ContactCreate, { ...body, phone_numbers: [{ ...phones[0], phone_number: "+14155550123" }] })
  })

  it("reads a client's aum given as a number as an exact decimal string", () => {
    assert.strictEqual(decodeOk(Models.Client, { id: "cli_3", aum: 1250000.5 }).aum, "1250000.5")
    assert.strictEqual(decodeOk(Models.Client, { id: "cli_3", aum: "1250000.50" }).aum, "1250000.50")
  })

  it("requires integer pagination members", () => {
    const page = resourceFixture("businesses_page")
    const envelope = Models.ListEnvelope(Models.RawRecord)
    assert.strictEqual(decodeOk(envelope, page).pagination.total_count, 76)
    decodeFails(envelope, { ...page, pagination: { current_page: 1, total_pages: "4", total_count: 76, per_page: 25 } })
    decodeFails(envelope, { ...page, pagination: { current_page: 1.5, total_pages: 4, total_count: 76, per_page: 25 } })
  })
})

/**
 * The fixture, and variants of it: each field (and each field of the first element of each nested
 * list or object) removed, null, and given values of other JSON types.
 */
const variants = (fixture: JsonObject): Array<unknown> => {
  const others: ReadonlyArray<unknown> = [null, 0, 12.5, -1, "", "x", "2024-02-30", true, [], ["a"], [{}], {}, { a: 1 }]
  const out: Array<unknown> = [fixture, {}, null, "a string", []]
  for (const key of Object.keys(fixture)) {
    const { [key]: _removed, ...without } = fixture
    out.push(without)
    for (const other of others) out.push({ ...fixture, [key]: other })
    const value = fixture[key]
    const nested = Array.isArray(value) ? value[0] : value
    if (typeof nested === "object" && nested !== null && !Array.isArray(nested)) {
      for (const inner of variants(nested as JsonObject).slice(1)) {
        out.push({ ...fixture, [key]: Array.isArray(value) ? [inner, ...value.slice(1)] : inner })
      }
    }
  }
  return out
}

describe("fastDecoder (the warehouse's decoding)", () => {
  for (const [name, schema] of models) {
    it(`decodes what the ${name} model decodes, to the same value, and refuses what it refuses`, () => {
      const fast = fastDecoder(schema)
      const model = Schema.decodeUnknownResult(schema)
      const inputs = variants(resourceFixture(name))
      let accepted = 0
      for (const input of inputs) {
        const expected = model(input, { errors: "first" })
        const actual = fast(input)
        const label = JSON.stringify(input).slice(0, 200)
        assert.strictEqual(Result.isSuccess(actual), Result.isSuccess(expected), label)
        if (Result.isSuccess(actual) && Result.isSuccess(expected)) {
          accepted++
          assert.deepStrictEqual(actual.success, expected.success, label)
          // The same keys in the same order: rows and raw JSON are built from these objects.
          assert.strictEqual(JSON.stringify(actual.success), JSON.stringify(expected.success), label)
        }
      }
      assert.isAbove(accepted, 1)
      assert.isBelow(accepted, inputs.length)
    })
  }

  it("fills absent and null fields with null and absent or null lists with [], nested ones included", () => {
    const decode = fastDecoder(Models.AnnuityContract)
    const contract = resourceFixture("annuity_contract")
    const parties = [{ ...(contract.parties as Array<JsonObject>)[0], participant_type: null }]
    const { current_values: _, ...rest } = contract
    const result = decode({ ...rest, parties, placements: null })
    if (Result.isFailure(result)) return assert.fail(result.failure.message)
    assert.strictEqual(result.success.current_values, null)
    assert.deepStrictEqual(result.success.placements, [])
    assert.strictEqual(result.success.parties[0]!.participant_type, null)
    assert.isTrue(Result.isFailure(decode({ ...contract, parties: [{ ...parties[0], id: 5 }] })))
  })
})
