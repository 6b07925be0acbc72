import { assert, describe, it } from "@effect/vitest"
import { type PlanInput, planConnection, sharedFinishTimes } from "../../src/budget/Plan.ts"
import { runsPerDay } from "../../src/admin/PlanReport.ts"

const HOUR = 3_600_000

/** A personal-token connection on spec §8's limits with the default schedules. */
const personal = (accounts: number, contracts = 0): PlanInput => ({
  connection: "firm",
  credential: "personal",
  bucket: { key: "token:firm", limit: 1_000, configuredLimit: 1_000, learned: false, windowMs: HOUR },
  poll: { intervalMs: 5 * 60_000, requestsPerRun: 1 },
  reference: { intervalMs: 24 * HOUR, requestsPerRun: 3 },
  reconcile: { runsPerDay: 1, share: 0.25 },
  outboundPerHour: 0,
  followUpPerHour: 0,
  crawls: [
    { resource: "annuity_contracts", records: contracts, intervalMs: 6 * HOUR, setting: "schedules.crawl" },
    { resource: "financial_accounts", records: accounts, intervalMs: 6 * HOUR, setting: "schedules.crawl" }
  ],
  perPage: 100
})

describe("Plan", () => {
  it("a million accounts on a personal token: a crawl takes about ten hours, the 6-hour schedule is flagged", () => {
    const plan = planConnection(personal(1_000_000))
    assert.isFalse(plan.fits)
    assert.strictEqual(plan.limit_per_hour, 1_000)
    const accounts = plan.crawls.find((crawl) => crawl.resource === "financial_accounts")!
    assert.strictEqual(accounts.pages, 10_000)
    assert.isFalse(accounts.fits)
    const hours = accounts.full_crawl_seconds! / 3_600
    assert.isTrue(hours > 10 && hours < 10.5, `${hours} h`)
    // Back to back: the crawl's effective interval is its duration, not the 6 hours configured.
    assert.strictEqual(accounts.effective_interval_seconds, accounts.full_crawl_seconds)
    assert.match(
      plan.warnings.join("\n"),
      /financial_accounts: a full crawl takes 10 h \d+ min .*schedules\.crawl \(6 h\)/
    )
    assert.deepStrictEqual(
      plan.suggestions.map((s) => [s.setting, s.value]),
      [["schedules.crawl", "11 hours"]]
    )
    // Poll 12/h, reference 0.1/h, reconcile 250 a day: what the crawls get is the rest.
    assert.strictEqual(plan.crawl_budget_per_hour, 978)
    const businesses = plan.freshness.find((row) => row.resource === "businesses")!
    assert.strictEqual(businesses.via, "poll")
    assert.isTrue(businesses.worst_case_seconds! >= 300 && businesses.worst_case_seconds! < 310)
  })

  it("a small firm fits, and says so", () => {
    const plan = planConnection(personal(20_000, 5_000))
    assert.isTrue(plan.fits)
    assert.deepStrictEqual(plan.warnings, [])
    assert.deepStrictEqual(plan.suggestions, [])
    assert.isTrue(plan.crawls.every((crawl) => crawl.fits))
    assert.isTrue(plan.demand_per_hour < plan.limit_per_hour)
  })

  it("when the other jobs take the whole budget, crawls never finish and the poll interval is named", () => {
    const input = personal(10_000)
    const plan = planConnection({ ...input, poll: { intervalMs: 60_000, requestsPerRun: 20 } })
    assert.isFalse(plan.fits)
    assert.strictEqual(plan.crawl_budget_per_hour, 0)
    assert.isNull(plan.crawls[1]!.full_crawl_seconds)
    assert.include(
      plan.suggestions.map((s) => s.setting),
      "schedules.businesses"
    )
  })

  it("a learned ceiling is what the plan budgets to", () => {
    const input = personal(400_000)
    const configured = planConnection(input)
    const learned = planConnection({ ...input, bucket: { ...input.bucket, limit: 600, learned: true } })
    assert.isTrue(configured.crawls[1]!.fits)
    assert.isFalse(learned.crawls[1]!.fits)
    assert.isTrue(learned.limit_learned)
  })

  it("crawls that start together share the budget; the smaller one leaves its share to the other", () => {
    // 100 requests/hour: 50 pages each for the first hour, then the larger alone.
    const [small, large] = sharedFinishTimes([50, 150], 100)
    assert.strictEqual(small, HOUR)
    assert.strictEqual(large, 2 * HOUR)
    assert.deepStrictEqual(sharedFinishTimes([10], 0), [Number.POSITIVE_INFINITY])
  })

  it("counts a cron expression's runs per day", () => {
    const from = new Date("2026-01-01T12:00:00Z")
    assert.strictEqual(runsPerDay("0 3 * * *", from), 1)
    assert.strictEqual(runsPerDay("0 */6 * * *", from), 4)
    assert.strictEqual(runsPerDay("not a cron", from), 0)
  })
})
