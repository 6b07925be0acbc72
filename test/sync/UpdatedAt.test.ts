/**
 * One rule for a listed record's `updated_at`, shared by the business poll's cursor and the
 * reconciliation's comparison: every spelling of one instant reads the same.
 */
import { assert, describe, it } from "@effect/vitest"
import { updatedAtOf } from "../../src/sync/UpdatedAt.ts"

describe("updatedAtOf", () => {
  it("reads a space or a T, with or without a zone, as the same UTC instant", () => {
    const expected = { iso: "2026-01-01T10:00:00.000Z", ms: Date.UTC(2026, 0, 1, 10) }
    for (const spelling of [
      "2026-01-01 10:00:00Z",
      "2026-01-01T10:00:00Z",
      "2026-01-01T10:00:00",
      "2026-01-01 10:00:00",
      "2026-01-01T12:00:00+02:00",
      "2026-01-01T10:00:00.000Z"
    ]) {
      assert.deepStrictEqual(updatedAtOf({ updated_at: spelling }), expected, spelling)
    }
  })

  it("has none for a record without a usable updated_at", () => {
    for (const record of [null, "x", {}, { updated_at: null }, { updated_at: 5 }, { updated_at: "yesterday" }]) {
      assert.isUndefined(updatedAtOf(record))
    }
  })
})
