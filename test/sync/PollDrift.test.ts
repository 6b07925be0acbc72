/**
 * How far a poll's cursor may move: to the latest `updated_at` read when the listing held still;
 * back to the page before the drift when a record was read twice or the total shrank; nowhere when
 * the listing came out of `updated_at` order.
 */
import { assert, describe, it } from "@effect/vitest"
import { PollDrift } from "../../src/sync/PollDrift.ts"

const record = (id: string, minute: number) => ({
  id,
  updated_at: `2026-01-01T10:${String(minute).padStart(2, "0")}:00Z`
})
const at = (minute: number) => `2026-01-01T10:${String(minute).padStart(2, "0")}:00.000Z`

describe("PollDrift", () => {
  it("lets the cursor go to the latest updated_at of a listing that held still", () => {
    const drift = new PollDrift()
    drift.see(1, [record("a", 1), record("b", 2)], 4)
    drift.see(2, [record("c", 3), record("d", 4)], 4)
    assert.isFalse(drift.drifted)
    assert.strictEqual(drift.target?.iso, at(4))
  })

  it("holds the cursor at the page before a record read twice", () => {
    const drift = new PollDrift()
    drift.see(1, [record("a", 1), record("b", 2)], 4)
    drift.see(2, [record("c", 3), record("d", 4)], 4)
    // `b` was updated while the pages were read and moved to the end.
    drift.see(3, [record("e", 5), record("b", 6)], 5)
    assert.isTrue(drift.drifted)
    assert.strictEqual(drift.target?.iso, at(2))
    assert.strictEqual(drift.heldAt, at(2))
  })

  it("holds the cursor at the page before the total shrank", () => {
    const drift = new PollDrift()
    drift.see(1, [record("a", 1), record("b", 2)], 5)
    drift.see(2, [record("c", 3), record("d", 4)], 5)
    drift.see(3, [record("e", 5)], 4)
    assert.isTrue(drift.drifted)
    assert.strictEqual(drift.target?.iso, at(4))
  })

  it("keeps the cursor where it was when drift meets a listing out of updated_at order", () => {
    const drift = new PollDrift()
    drift.see(1, [record("a", 3), record("b", 1)], 4)
    drift.see(2, [record("c", 4), record("a", 5)], 4)
    assert.isFalse(drift.ordered)
    assert.isTrue(drift.drifted)
    assert.isUndefined(drift.target)
    assert.strictEqual(drift.heldAt, "(unchanged)")
  })
})
