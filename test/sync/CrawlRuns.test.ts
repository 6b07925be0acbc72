/**
 * The deletion threshold of a clean crawl's finish, without a database: when the records two clean
 * crawls missed are deleted, when they are refused, and when a large absence is only noted.
 */
import { assert, describe, it } from "@effect/vitest"
import { planDeletion } from "../../src/sync/DeletionPlan.ts"

const ids = (n: number) => Array.from({ length: n }, (_, i) => `rec_${i}`)

describe("planDeletion", () => {
  it("deletes within the threshold, and refuses more than it at once", () => {
    assert.deepStrictEqual(planDeletion(ids(5), 100, 5, { threshold: 0.1 }), { refuse: false, notes: [] })
    const refused = planDeletion(ids(20), 100, 20, { threshold: 0.1 })
    assert.isTrue(refused.refuse)
    assert.deepStrictEqual(refused.notes, [
      "deletion refused: 20 of 100 records (20%) missing from two clean crawls, more than the threshold of 10%; nothing deleted"
    ])
  })

  it("always allows `allowAtOnce` records, however small the set (a firm's books)", () => {
    assert.isFalse(planDeletion(ids(1), 3, 1, { threshold: 0.1, allowAtOnce: 1 }).refuse)
    assert.isTrue(planDeletion(ids(2), 3, 2, { threshold: 0.1, allowAtOnce: 1 }).refuse)
  })

  it("notes a large absence that deletes nothing yet: the next clean crawl decides", () => {
    const plan = planDeletion([], 10, 6, { threshold: 0.5 })
    assert.isFalse(plan.refuse)
    assert.strictEqual(plan.notes.length, 1)
    assert.include(plan.notes[0]!, "6 of 10 tracked records (60%) were absent from this crawl")
  })
})
