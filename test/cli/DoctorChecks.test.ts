/**
 * The parts of `crm-sync doctor` that judge without asking anyone: a signing secret's form, the
 * credential kind an `auth_type` names, and the drift of one listing page against its model.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { decodeDocument } from "../../src/config/AppConfig.ts"
import * as Models from "../../src/crm/Models.ts"
import { endpointChecks, renderCheck, secretProblem } from "../../src/cli/DoctorChecks.ts"
import { driftOf, kindOfAuthType } from "../../src/cli/DoctorCrm.ts"
import { resourceFixture } from "../fixtures/Fixtures.ts"

describe("doctor's judgements", () => {
  it("a Standard Webhooks secret is whsec_ and the base64 of 24 to 64 bytes", () => {
    assert.isUndefined(secretProblem(`whsec_${randomBytes(24).toString("base64")}`))
    assert.isUndefined(secretProblem(`whsec_${randomBytes(64).toString("base64")}`))
    // Fixed bytes: cut at a random key, the last character's unused bits may happen to be zero.
    const whole = `whsec_${Buffer.alloc(24, 0xa7).toString("base64")}`
    assert.strictEqual(secretProblem(whole.slice(0, -4)), "decodes to 21 bytes, not 24 to 64")
    assert.strictEqual(secretProblem(whole.slice(0, -2)), "is not valid base64")
    assert.strictEqual(
      secretProblem(`whsec_${randomBytes(65).toString("base64")}`),
      "decodes to 65 bytes, not 24 to 64"
    )
    assert.strictEqual(secretProblem(randomBytes(24).toString("base64")), "does not start with whsec_")
  })

  it("auth_type names a kind by a word in it; anything else is not compared", () => {
    assert.strictEqual(kindOfAuthType("personal_access_token"), "personal")
    assert.strictEqual(kindOfAuthType("personal"), "personal")
    assert.strictEqual(kindOfAuthType("oauth"), "oauth")
    assert.strictEqual(kindOfAuthType("OAuth2"), "oauth")
    assert.isUndefined(kindOfAuthType("service_account"))
  })

  it("a page's drift: fields the model does not know, records that do not decode", () => {
    const good = resourceFixture("financial_account")
    const page = {
      resource: "financial_accounts",
      page: 1,
      pagination: { current_page: 1, total_pages: 1, total_count: 3, per_page: 100 },
      data: [good, { ...good, id: "fa_2", risk_band: "high", advisor_note: "x" }, { ...good, id: "" }],
      schema: Models.FinancialAccount
    }
    const drift = driftOf(page, new Set(Object.keys(Models.FinancialAccount.fields)))
    assert.strictEqual(drift.records, 3)
    assert.deepStrictEqual(drift.unknown, ["advisor_note", "risk_band"])
    assert.strictEqual(drift.undecodable.length, 1)
  })

  it.effect("--connection: the endpoints of that connection and of none; a short secret fails its endpoint", () =>
    Effect.gen(function* () {
      const whole = `whsec_${randomBytes(24).toString("base64")}`
      const config = yield* decodeDocument({
        webhooks: {
          endpoints: [
            { name: "a", secrets: [whole], connection: "one" },
            { name: "b", secrets: [whole.slice(0, -4)], connection: "two" },
            { name: "c", secrets: [whole] }
          ]
        }
      })
      const all = endpointChecks({ ...config, origin: "test" })
      assert.deepStrictEqual(
        all.map((check) => [check.check, check.status]),
        [
          ["webhook endpoint a", "pass"],
          ["webhook endpoint b", "fail"],
          ["webhook endpoint c", "pass"]
        ]
      )
      assert.strictEqual(all[1]!.message, "secret 1 decodes to 21 bytes, not 24 to 64")
      assert.deepStrictEqual(
        endpointChecks({ ...config, origin: "test" }, "one").map((check) => check.check),
        ["webhook endpoint a", "webhook endpoint c"]
      )
    })
  )

  it("a line: mark, check, what was found, what to do", () => {
    assert.strictEqual(
      renderCheck({ check: "migrations", status: "fail", message: "1 pending: 0023_x", fix: "run `crm-sync migrate`" }),
      "✗ migrations: 1 pending: 0023_x; run `crm-sync migrate`"
    )
    assert.strictEqual(renderCheck({ check: "clock", status: "skip", message: "no answer" }), "– clock: no answer")
  })
})
