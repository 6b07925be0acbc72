/**
 * What a reconciliation prints and when it may count absences: a table row per resource (gone only
 * for a clean read), a line per run with what it spent of its allowance, the by-id line and the
 * notes; absences are not counted after a resumed read, a read the listing moved under, or one that
 * held fewer records than the listing said.
 */
import { assert, describe, it } from "@effect/vitest"
import { uncountable, type WholeRead } from "../../src/sync/ReconcileAbsences.ts"
import { emptyResourceReport, type ReconcileReport, renderReports, statusOf } from "../../src/sync/ReconcileReport.ts"

const report: ReconcileReport = {
  id: 7,
  connection: "default",
  status: "partial",
  stopped: "allowance",
  allowance: 125,
  requests: 126,
  budget: { bucket: "token", limit: 500, window_seconds: 3600, share: 0.25, used_at_start: 10, spent_earlier: 0 },
  resumed_from: null,
  next: { resource: "annuity_contracts", page: 3 },
  resources: {
    businesses: {
      ...emptyResourceReport(1_200, 1),
      api_total: 1_201,
      missing: 2,
      stale: 1,
      gone: 1,
      repaired: 3,
      undeleted: 1,
      pages_read: 13,
      last_page: 13,
      total_pages: 13,
      complete: true,
      clean: true,
      note: "1 record(s) not listed"
    },
    annuity_contracts: { ...emptyResourceReport(300, 1), api_total: 300, pages_read: 2, last_page: 2, total_pages: 3 }
  },
  by_id: null,
  error: null
}

describe("reconcile report", () => {
  it("renders a row per resource, a line per run, and the notes", () => {
    assert.strictEqual(
      renderReports([report]),
      [
        "connection  resource            status               pages    api  warehouse  missing  stale  gone  repaired  deleted",
        "default     businesses          complete                13  1,201      1,200        2      1     1         4        0",
        "default     annuity_contracts   partial (to page 2)      2    300        300        0      0     -         0        0",
        "default     financial_accounts  not reached              -      -          -        -      -     -         -        -",
        "",
        "default: partial — 126 of 125 allowed requests (25% of 500 per 1h on token); the next run resumes at " +
          "annuity_contracts page 3; report 7",
        "",
        "notes:",
        "  default businesses: 1 record(s) not listed"
      ].join("\n")
    )
  })

  it("names the records it repaired, by resource, and how many more there were", () => {
    const many = Array.from({ length: 23 }, (_, index) => `fa_${index + 1}`)
    const named: ReconcileReport = {
      ...report,
      resources: {
        ...report.resources,
        businesses: { ...report.resources.businesses!, repaired_ids: ["bz_1", "bz_2", "bz_3", "bz_9"] },
        financial_accounts: { ...emptyResourceReport(30, 1), repaired: 23, repaired_ids: many }
      },
      by_id: {
        known: 10,
        checked: 10,
        repaired: 1,
        deleted: 0,
        rejected: 0,
        unreadable: 0,
        not_reached: 0,
        requests: 11,
        repaired_ids: ["tasks tk_7"]
      }
    }
    const text = renderReports([named])
    const section = text.slice(text.indexOf("repaired:\n"))
    assert.strictEqual(
      section.split("\n\n")[0],
      [
        "repaired:",
        "  default businesses: bz_1, bz_2, bz_3, bz_9",
        `  default financial_accounts: ${many.slice(0, 20).join(", ")} and 3 more`,
        "  default by id: tasks tk_7"
      ].join("\n")
    )
  })

  it("is complete only when the pass finished, and failed on an error", () => {
    assert.strictEqual(statusOf("finished"), "complete")
    assert.strictEqual(statusOf("allowance"), "partial")
    assert.strictEqual(statusOf("interrupted"), "partial")
    assert.strictEqual(statusOf("error"), "failed")
  })
})

/** A whole read of 200 records (`r0`…`r199`) from `firstPage`, its listing saying `apiTotal`. */
const read = (overrides: Partial<WholeRead>, firstPage = 1, apiTotal = 200): WholeRead => ({
  report: { ...emptyResourceReport(200, firstPage), api_total: apiTotal },
  seen: new Set(Array.from({ length: 200 }, (_, index) => `r${index}`)),
  drifted: false,
  startedAt: new Date(0),
  live: 200,
  ...overrides
})

describe("absences", () => {
  it("are counted after a whole, steady read from page 1, short by at most 1%", () => {
    assert.isUndefined(uncountable(read({})))
    assert.isUndefined(uncountable(read({}, 1, 202)))
  })

  it("are not counted after a resumed read, a moving listing, or a read short of its total", () => {
    assert.strictEqual(uncountable(read({}, 4)), "read from page 4 (resumed): absences not counted")
    assert.strictEqual(
      uncountable(read({ drifted: true })),
      "the listing changed while it was read: absences not counted"
    )
    assert.strictEqual(
      uncountable(read({}, 1, 203)),
      "the listing's total_count said 203 records but its pages held 200: absences not counted"
    )
  })
})
