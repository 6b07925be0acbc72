/**
 * KnownReferences: the references one crawl has stored, by the transaction that stored them. A
 * reference becomes known only when its transaction commits; a rolled-back one leaves nothing.
 */
import { assert, describe, it } from "@effect/vitest"
import { KnownReferences } from "../../src/warehouse/Warehouse.ts"

describe("KnownReferences", () => {
  it("knows a reference once the transaction that stored it settles, per resource", () => {
    const known = new KnownReferences()
    const first = known.open()
    first.add([
      ["households", "hh_1"],
      ["users", "usr_1"]
    ])
    assert.isFalse(first.has("households", "hh_1"), "not before the commit")
    first.settle()
    const next = known.open()
    assert.isTrue(next.has("households", "hh_1"))
    assert.isTrue(next.has("users", "usr_1"))
    assert.isFalse(next.has("users", "hh_1"), "an id is known for its own resource only")
    assert.isFalse(next.has("households", "hh_2"))
  })

  it("forgets what a discarded (rolled back) transaction added", () => {
    const known = new KnownReferences()
    const failed = known.open()
    failed.add([["households", "hh_1"]])
    failed.discard()
    failed.settle()
    assert.isFalse(known.open().has("households", "hh_1"))
  })
})
