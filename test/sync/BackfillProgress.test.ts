/**
 * What the backfill shows: durations and limits as people say them, the ETA as the slower of the
 * budget's answer and the pace seen so far, the progress line, and the summary table.
 */
import { assert, describe, it } from "@effect/vitest"
import { formatDuration } from "../../src/observability/Text.ts"
import { describe as describeProgress, estimateMs, etaText, formatLimit } from "../../src/sync/BackfillProgress.ts"
import { renderSummary } from "../../src/sync/BackfillSummary.ts"

describe("backfill progress", () => {
  it("formats durations and limits", () => {
    assert.strictEqual(formatDuration(400), "< 1 s")
    assert.strictEqual(formatDuration(35_000), "35 s")
    assert.strictEqual(formatDuration(14 * 60_000), "14 min")
    assert.strictEqual(formatDuration((2 * 60 + 14) * 60_000), "2 h 14 min")
    assert.strictEqual(formatDuration(3 * 3_600_000), "3 h")
    assert.strictEqual(formatDuration(50 * 3_600_000), "2 d 2 h")
    assert.strictEqual(formatDuration(90_000), "2 min")
    assert.strictEqual(formatDuration(10.2 * 3_600_000), "10 h 12 min")
    assert.strictEqual(formatDuration(40 * 86_400_000 + 3 * 3_600_000), "40 d 3 h")
    assert.strictEqual(formatDuration(Infinity), "never")
    assert.strictEqual(formatLimit(500, 3_600_000), "500 req/h")
    assert.strictEqual(formatLimit(10_000, 3_600_000), "10,000 req/h")
  })

  it("takes the slower of the budget's wait and the pace seen so far", () => {
    // 83 pages left at 500 requests per hour (bulk leaves some of each window to the others).
    assert.strictEqual(estimateMs(83, 2 * 3_600_000, 37, 60_000), 2 * 3_600_000)
    // No budget wait (an unthrottled sandbox): the pace seen so far, 37 requests in a minute.
    assert.strictEqual(estimateMs(74, 0, 37, 60_000), 120_000)
    assert.strictEqual(estimateMs(0, 5_000, 10, 1_000), 0)
    assert.strictEqual(etaText((2 * 60 + 14) * 60_000, 500, 3_600_000), "ETA 2 h 14 min at 500 req/h")
  })

  it("describes a resource's progress in one line", () => {
    assert.strictEqual(
      describeProgress({
        pages: 37,
        totalPages: 120,
        records: 3_700,
        recordsPerSecond: 12.4,
        eta: "ETA 2 h 14 min at 500 req/h"
      }),
      "37/120 pages · 3,700 records · 12 rec/s · ETA 2 h 14 min at 500 req/h"
    )
    assert.strictEqual(
      describeProgress({
        pages: 0,
        totalPages: undefined,
        records: 0,
        recordsPerSecond: 0,
        eta: undefined,
        status: "waiting"
      }),
      "waiting"
    )
  })

  it("renders the summary table", () => {
    const table = renderSummary({
      rows: [
        {
          connection: "default",
          resource: "financial_accounts",
          status: "done",
          pages: 120,
          requests: 84,
          records: 11_950,
          inserted: 11_950,
          updated: 0,
          unchanged: 0,
          rejected: 0,
          deleted: 0,
          resumedFrom: 37,
          seconds: 8_040,
          note: undefined
        },
        {
          connection: "default",
          resource: "annuity_contracts",
          status: "failed",
          pages: 0,
          requests: 0,
          records: 0,
          inserted: 0,
          updated: 0,
          unchanged: 0,
          rejected: 0,
          deleted: 0,
          resumedFrom: undefined,
          seconds: 1,
          note: "the CRM failed (503)"
        }
      ],
      requests: 84,
      seconds: 8_041
    })
    const lines = table.split("\n")
    assert.match(lines[0]!, /^connection\s+resource\s+status\s+pages\s+requests\s+records/)
    assert.match(lines[1]!, /financial_accounts\s+done \(resumed at page 37\)\s+120\s+84\s+11,950/)
    assert.include(table, "1 of 2 done, 84 requests in 2 h 14 min")
    assert.include(table, "default annuity_contracts: the CRM failed (503)")
  })
})
