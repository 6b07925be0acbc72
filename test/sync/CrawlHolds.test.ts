/**
 * Who may hold a record back from deletion by absence, without a database: how long after its last
 * clean crawl a connection still holds (3 intervals of the listing's own schedule), and the run
 * note that names the holders.
 */
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { decodeDocument } from "../../src/config/AppConfig.ts"
import { heldBy, heldNote, holdFor, holdPolicy } from "../../src/sync/CrawlHolds.ts"

describe("CrawlHolds", () => {
  it.effect("a connection holds records for 3 intervals of that listing's schedule", () =>
    Effect.gen(function* () {
      const config = yield* decodeDocument({
        connections: [{ name: "a", base_url: "http://127.0.0.1:9", credential: "personal", token: "t" }],
        schedules: { crawl: "2 hours", business_crawl: "1 day", reference: "12 hours" }
      })
      const policy = holdPolicy({ ...config, origin: "inline" })
      assert.deepStrictEqual(policy.connections, ["a"])
      const hours = (resource: Parameters<typeof holdFor>[1]) => Duration.toHours(holdFor(policy, resource))
      assert.strictEqual(hours("financial_accounts"), 6)
      assert.strictEqual(hours("annuity_contracts"), 6)
      assert.strictEqual(hours("businesses"), 72)
      assert.strictEqual(hours("books"), 36)
      assert.strictEqual(hours("project_templates"), 36)
    })
  )

  it("the note names every holder and how many records each kept; none when nothing was held", () => {
    assert.isNull(heldNote(heldBy([])))
    const held = heldBy([
      { connection: "west", id: "fa_1" },
      { connection: "east", id: "fa_1" },
      { connection: "west", id: "fa_2" }
    ])
    assert.deepStrictEqual([...held.ids].toSorted(), ["fa_1", "fa_2"])
    assert.strictEqual(
      heldNote(held),
      "2 records missing from two clean crawls kept: still tracked by connection east (1), connection west (2)"
    )
  })
})
