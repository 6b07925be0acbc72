/**
 * Pure helpers of the sandbox's services, checked without a running sandbox: which rate buckets a
 * request counts against (§8), redirect matching and the connection rule (§5.5), the advisor
 * valuation of an annuity contract (§2.5), a person's stored fields (§2.2) and the webhook
 * envelopes built from the records (§6.3).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { personRow } from "../src/ClientActions.ts"
import { buildWorld } from "../src/Generator.ts"
import { checkConnection, redirectMatches } from "../src/OAuthFlow.ts"
import { resolveOptions } from "../src/Options.ts"
import { checksFor, limitOf } from "../src/RateLimiter.ts"
import { withContractValue } from "../src/SilentActions.ts"
import { payloadOf } from "../src/WebhookDelivery.ts"
import type { Message } from "../src/Webhooks.ts"

const world = Effect.map(resolveOptions({ seed: 3, records: 400 }), buildWorld)

const limits = { personal: { token: 1, company: 2, ip: 3 }, oauth: { user: 4, app: 5, ip: 6 } }

describe("rate buckets (§8)", () => {
  it("a personal token counts against its token, its company and the address", () => {
    const checks = checksFor(
      limits,
      { kind: "personal", tokenId: "pat_1", userId: "usr_1", company: 2, canWrite: false },
      "10.0.0.1"
    )
    assert.deepStrictEqual(checks, [
      { name: "token", key: "token:pat_1", limit: 1 },
      { name: "company", key: "company:2", limit: 2 },
      { name: "ip", key: "ip:10.0.0.1", limit: 3 }
    ])
  })

  it("an OAuth token counts against the app user, the app in the company and the address", () => {
    const checks = checksFor(
      limits,
      { kind: "oauth", clientId: "app_1", userId: "usr_1", company: 0, canWrite: true, scope: "read write" },
      "10.0.0.1"
    )
    assert.deepStrictEqual(checks, [
      { name: "token", key: "user:app_1:usr_1", limit: 4 },
      { name: "company", key: "app:app_1:0", limit: 5 },
      { name: "ip", key: "ip:10.0.0.1", limit: 6 }
    ])
  })

  it("an unauthenticated request counts only against its address", () => {
    assert.deepStrictEqual(checksFor(limits, undefined, "10.0.0.9"), [{ name: "ip", key: "ip:10.0.0.9", limit: 3 }])
  })

  it("a bucket's limit follows the prefix of its key", () => {
    assert.deepStrictEqual(
      ["token:pat_1", "company:2", "user:app_1:usr_1", "app:app_1:0"].map((key) => limitOf(limits, key)),
      [1, 2, 4, 5]
    )
  })
})

describe("OAuth redirects and connections (§5.5)", () => {
  it("a loopback redirect URI matches whatever its port (RFC 8252 §7.3), nothing else does", () => {
    const registered = "http://127.0.0.1:8080/oauth/callback"
    assert.isTrue(redirectMatches(registered, registered))
    assert.isTrue(redirectMatches(registered, "http://127.0.0.1:53123/oauth/callback"))
    assert.isFalse(redirectMatches(registered, "http://127.0.0.1:53123/other"))
    assert.isFalse(redirectMatches(registered, "http://localhost:8080/oauth/callback"))
    assert.isFalse(redirectMatches("https://partner.example.com/cb", "https://partner.example.com:8443/cb"))
  })

  it.effect("a sandbox-mode app connects only to its owner's company", () =>
    Effect.gen(function* () {
      const w = yield* world
      // the first user works for companies 0 and 1
      const app = {
        clientId: "app_1",
        clientSecret: "secret",
        name: "Partner",
        redirectUris: [],
        ownerCompany: 0,
        mode: "sandbox" as const,
        enabled: true,
        scope: "read write"
      }
      const user = w.users[0]!.id
      assert.strictEqual(checkConnection(w, app, user, 0), undefined)
      assert.include(checkConnection(w, app, user, 1), "sandbox mode")
      assert.strictEqual(checkConnection(w, { ...app, mode: "production" }, user, 1), undefined)
      assert.include(checkConnection(w, { ...app, mode: "production" }, user, 2), "does not belong")
      assert.include(checkConnection(w, app, "usr_99999999", 0), "unknown or deactivated")
    })
  )
})

describe("actions' row building", () => {
  it.effect("a contract value is the advisor valuation: one advisor entry, replaced on change (§2.5)", () =>
    Effect.gen(function* () {
      const contract = (yield* world).annuityContracts.get(0)!
      assert.strictEqual(withContractValue(contract, undefined, "2025-03-01T00:00:00.000Z"), contract)
      const once = withContractValue(contract, "1000.00", "2025-03-01T12:00:00.000Z")
      const twice = withContractValue(once, "2000.00", "2025-04-01T12:00:00.000Z")
      const advisor = twice.values.filter((value) => value.id === `acv_${contract.id.slice(3)}_adv`)
      assert.deepStrictEqual(
        advisor.map((value) => [value.amount, value.as_of_date, value.source_kind]),
        [["2000.00", "2025-04-01", "advisor"]]
      )
      assert.strictEqual(twice.values.length, contract.values.length + 1)
      assert.strictEqual(twice.current_values.contract_value, "2000.00")
      assert.strictEqual(twice.current_values.as_of_date, "2025-04-01")
    })
  )

  it.effect("a person's repeated fields get the §2.2 defaults; unknown custom fields are refused", () =>
    Effect.gen(function* () {
      const w = yield* world
      const book = w.books[0]!.id
      const row = yield* personRow(
        w,
        {
          book_id: book,
          first_name: "Ada",
          email_addresses: [{ email: "  Ada@Example.COM " }],
          phone_numbers: [{ phone_number: "+15035550100" }],
          addresses: [{ city: "Portland" }]
        },
        "2025-01-01T00:00:00.000Z"
      )
      assert.deepStrictEqual(row.email_addresses, [
        { email: "ada@example.com", email_type: "personal", is_primary: false }
      ])
      assert.deepStrictEqual(row.phone_numbers, [
        { phone_number: "+15035550100", phone_type: "mobile", is_primary: false }
      ])
      assert.deepStrictEqual(row.addresses, [
        {
          line1: "",
          line2: null,
          city: "Portland",
          state: "",
          zip: "",
          country_code: "US",
          address_type: "home",
          is_primary: false
        }
      ])
      assert.strictEqual(row.last_name, null)
      const refused = yield* Effect.flip(personRow(w, { book_id: book, custom_fields: { shoe_size: 9 } }, ""))
      assert.strictEqual(refused.status, 422)
      assert.include(refused.detail, "custom_fields: unknown keys shoe_size")
    })
  )
})

/** A submitted message about `subject`, as the preparation fiber hands it to `payloadOf`. */
const message = (
  w: ReturnType<typeof buildWorld>,
  type: Message["record"]["event_type"],
  subject: Message["subject"],
  changedFields: ReadonlyArray<string> = []
): Message => ({
  record: {
    id: "msg_1",
    event_type: type,
    subscription_id: "sub_1",
    user_id: "usr_00000001",
    company_id: w.companies[w.books[subject.book]!.company]!.id,
    book_id: w.books[subject.book]!.id,
    record_id: subject.id,
    submitted_at: "2025-01-01T00:00:00.000Z",
    prepared_at: null,
    payload: null,
    endpoint_ids: []
  },
  subject,
  changedFields,
  submittedAtMs: 0,
  generation: 0
})

describe("webhook envelopes (§6.3)", () => {
  it.effect("client.updated nests the client next to its changed fields and the context", () =>
    Effect.gen(function* () {
      const w = yield* world
      const id = w.clients.idOf(0)
      const subject = { kind: "client" as const, index: 0, id, book: w.clients.bookOf(0) }
      const payload = payloadOf(w, message(w, "client.updated", subject, ["tier"])) as Record<string, any>
      assert.strictEqual(payload.client.id, id)
      assert.deepStrictEqual(payload.changed_fields, ["tier"])
      assert.strictEqual(payload.book_id, w.books[subject.book]!.id)
      assert.strictEqual(payload.subscription_id, "sub_1")
    })
  )

  it.effect("note.deleted keeps the note's household and carries no snapshot", () =>
    Effect.gen(function* () {
      const w = yield* world
      const note = w.notes.get(0)!
      const subject = { kind: "note" as const, index: 0, id: note.id, book: w.notes.bookOf(0), householdId: "hh_1" }
      const payload = payloadOf(w, message(w, "note.deleted", subject)) as Record<string, unknown>
      assert.strictEqual(payload.event_type, "note.deleted")
      assert.strictEqual(payload.id, note.id)
      assert.strictEqual(payload.household_id, "hh_1")
      assert.notProperty(payload, "note")
    })
  )
})
