/**
 * The sandbox's timestamp format: `iso` prints exactly what `Date.prototype.toISOString` prints,
 * for the instants the generator produces and for the edges of the calendar arithmetic.
 */
import { assert, describe, it } from "@effect/vitest"
import { iso, isoDate } from "../src/SandboxClock.ts"
import { Rng } from "../src/Prng.ts"

const edges = [
  0,
  -1,
  1,
  Date.UTC(1969, 11, 31, 23, 59, 59, 999),
  Date.UTC(1900, 1, 28, 12),
  Date.UTC(1900, 2, 1),
  Date.UTC(2000, 1, 29, 23, 59, 59, 999),
  Date.UTC(2024, 1, 29),
  Date.UTC(2024, 11, 31, 23, 59, 59, 999),
  Date.UTC(2025, 0, 1),
  Date.UTC(2100, 1, 28, 23),
  Date.UTC(2100, 2, 1),
  -62_167_219_200_000, // 0000-01-01
  -62_167_219_200_001, // before year 0: toISOString's own form
  253_402_300_799_999, // 9999-12-31T23:59:59.999Z
  253_402_300_800_000, // 10000: toISOString's own form
  1_700_000_000_000.5
]

describe("SandboxClock.iso", () => {
  it("prints what toISOString prints at the calendar's edges", () => {
    for (const millis of edges) assert.strictEqual(iso(millis), new Date(millis).toISOString(), String(millis))
  })

  it("prints what toISOString prints for instants across two centuries", () => {
    const rng = new Rng(7)
    const from = Date.UTC(1950, 0, 1)
    const span = Date.UTC(2150, 0, 1) - from
    for (let i = 0; i < 20_000; i++) {
      const millis = from + Math.floor(rng.float() * span)
      assert.strictEqual(iso(millis), new Date(millis).toISOString())
    }
    assert.strictEqual(isoDate(Date.UTC(2024, 1, 29, 13)), "2024-02-29")
  })
})
