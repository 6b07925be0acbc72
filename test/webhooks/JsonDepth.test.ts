/**
 * The nesting check that sets a too-deep delivery aside before anything parses it: brackets inside
 * strings (escaped quotes included) do not count, and the limit is exact.
 */
import { assert, describe, it } from "@effect/vitest"
import { MAX_JSON_DEPTH, nestsDeeperThan } from "../../src/webhooks/JsonDepth.ts"

const nested = (depth: number) => `${"[".repeat(depth)}${"]".repeat(depth)}`

describe("nestsDeeperThan", () => {
  it("counts arrays and objects, to the limit exactly", () => {
    assert.isFalse(nestsDeeperThan(nested(MAX_JSON_DEPTH)))
    assert.isTrue(nestsDeeperThan(nested(MAX_JSON_DEPTH + 1)))
    assert.isTrue(nestsDeeperThan(`{"a":${nested(100_000)}}`))
    assert.isFalse(nestsDeeperThan('{"task":{"tags":[{"id":"t1"}]}}', 4))
    assert.isTrue(nestsDeeperThan('{"task":{"tags":[{"id":"t1"}]}}', 3))
  })

  it("skips brackets inside strings, escaped quotes included", () => {
    const brackets = `"${"[{".repeat(500)}"`
    assert.isFalse(nestsDeeperThan(`{"note":${brackets}}`, 2))
    assert.isFalse(nestsDeeperThan(`{"note":"say \\"[[[[\\" twice"}`, 1))
  })
})
