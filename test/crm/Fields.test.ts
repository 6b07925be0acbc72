/**
 * `timestampMillis`, which the models' Timestamp check and the warehouse's forward-only ordering
 * both use: the CRM's own shape is read by a fast path, every other ISO 8601 shape by the general
 * one, and both agree with the calendar.
 */
import { assert, describe, it } from "@effect/vitest"
import { timestampMillis } from "../../src/crm/Fields.ts"

describe("timestampMillis", () => {
  it("reads the CRM's shape, with and without a fraction, as Date.parse does", () => {
    for (const value of [
      "2024-05-01T12:00:00Z",
      "2024-05-01T12:00:00.123Z",
      "1999-12-31T23:59:59.9Z",
      "2024-02-29T00:00:00Z",
      "0150-01-01T00:00:00Z"
    ]) {
      assert.strictEqual(timestampMillis(value), Date.parse(value), value)
    }
    // Microseconds are kept as a fraction of a millisecond (PostgreSQL keeps them too).
    assert.strictEqual(timestampMillis("2024-05-01T12:00:00.123456Z"), Date.parse("2024-05-01T12:00:00.123Z") + 0.456)
  })

  it("reads offsets, a space for T, no seconds and years before 100 by the general path", () => {
    assert.strictEqual(timestampMillis("2024-05-01T12:00:00+02:00"), Date.parse("2024-05-01T10:00:00Z"))
    assert.strictEqual(timestampMillis("2024-05-01 12:00:00Z"), Date.parse("2024-05-01T12:00:00Z"))
    assert.strictEqual(timestampMillis("2024-05-01T12:00Z"), Date.parse("2024-05-01T12:00:00Z"))
    assert.strictEqual(timestampMillis("0099-05-01T12:00:00Z"), -59_032_584_000_000)
  })

  it("refuses dates that do not exist and malformed times, in either path", () => {
    for (const value of [
      "2024-02-30T00:00:00Z",
      "2023-02-29T00:00:00Z",
      "2024-13-01T00:00:00Z",
      "2024-04-31T00:00:00Z",
      "2024-05-01T24:00:01Z",
      "2024-05-01T12:60:00Z",
      "2024-05-01T12:00:00.Z",
      "2024-05-01T12:0a:00Z",
      "2024-05-01T12:00:00+16:00",
      "yesterday"
    ]) {
      assert.isUndefined(timestampMillis(value), value)
    }
  })
})
