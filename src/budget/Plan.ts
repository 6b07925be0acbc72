/**
 * The hour's plan, with no I/O: given a connection's strictest bucket, its schedules and how much
 * each job has to read, how many requests per hour each job needs, whether they fit, how long a
 * full crawl takes at the budget it actually gets, and how old a change can be when it reaches the
 * warehouse. `crm-sync plan`, `/status` and the daemon's metrics all print this one computation.
 */
import { formatDuration } from "../observability/Text.ts"

/** One crawled resource: its listing's size and its schedule. */
export interface CrawlInput {
  readonly resource: string
  /** Records in the listing (the latest crawl's `total_count`, else the warehouse's rows). */
  readonly records: number
  readonly intervalMs: number
  /** The config key that sets `intervalMs`, named when the plan suggests a change. */
  readonly setting: string
}

export interface PlanInput {
  readonly connection: string
  readonly credential: string
  /** The strictest bucket: its key, the limit crm-sync budgets to, and whether that limit was learned. */
  readonly bucket: {
    readonly key: string
    readonly limit: number
    readonly configuredLimit: number
    readonly learned: boolean
    readonly windowMs: number
  }
  readonly poll: { readonly intervalMs: number; readonly requestsPerRun: number }
  readonly reference: { readonly intervalMs: number; readonly requestsPerRun: number }
  readonly reconcile: { readonly runsPerDay: number; readonly share: number }
  /** Requests per hour seen recently: the outbound writer's and the event processor's follow-up reads. */
  readonly outboundPerHour: number
  readonly followUpPerHour: number
  readonly crawls: ReadonlyArray<CrawlInput>
  readonly perPage: number
}

export interface JobDemand {
  readonly job: string
  readonly every: string
  readonly requests_per_run: number
  readonly requests_per_hour: number
}

export interface CrawlPlan {
  readonly resource: string
  readonly records: number
  readonly pages: number
  readonly interval: string
  /** How long one full crawl takes at the budget left for crawls; null: never (no budget is left). */
  readonly full_crawl_seconds: number | null
  /** The interval the crawl actually runs at: its schedule, or back to back when it takes longer. */
  readonly effective_interval_seconds: number | null
  readonly fits: boolean
}

export interface Freshness {
  readonly resource: string
  readonly via: "poll" | "crawl" | "webhook" | "reference"
  /** Worst-case age of a change when it reaches the warehouse; null where it depends on the CRM's sender. */
  readonly worst_case_seconds: number | null
  readonly note: string
}

export interface Suggestion {
  readonly setting: string
  readonly value: string
  readonly why: string
}

export interface ConnectionPlan {
  readonly connection: string
  readonly credential: string
  readonly bucket: string
  readonly limit_per_window: number
  readonly limit_learned: boolean
  readonly limit_per_hour: number
  readonly demand: ReadonlyArray<JobDemand>
  readonly demand_per_hour: number
  /** What the crawls get each hour once every other job has had its share. */
  readonly crawl_budget_per_hour: number
  readonly crawls: ReadonlyArray<CrawlPlan>
  readonly freshness: ReadonlyArray<Freshness>
  readonly fits: boolean
  readonly warnings: ReadonlyArray<string>
  readonly suggestions: ReadonlyArray<Suggestion>
}

const HOUR_MS = 3_600_000

/** Resources that arrive by webhook; tasks, meetings and notes can also be re-read by id. */
const webhookResources: ReadonlyArray<{ resource: string; repairable: boolean }> = [
  { resource: "tasks", repairable: true },
  { resource: "meetings", repairable: true },
  { resource: "notes", repairable: true },
  { resource: "clients", repairable: false },
  { resource: "prospects", repairable: false }
]

const referenceResources = ["books", "users", "teams", "project_templates"]

const perHour = (requestsPerRun: number, intervalMs: number) =>
  intervalMs <= 0 ? 0 : (requestsPerRun * HOUR_MS) / intervalMs

const round1 = (value: number) => Math.round(value * 10) / 10

/**
 * Finish times of crawls that start together and share `budgetPerHour` evenly (max-min fair):
 * while n crawls run each gets 1/n; when the smallest finishes its share goes to the rest.
 */
export const sharedFinishTimes = (pages: ReadonlyArray<number>, budgetPerHour: number): ReadonlyArray<number> => {
  if (budgetPerHour <= 0) return pages.map((n) => (n > 0 ? Number.POSITIVE_INFINITY : 0))
  const order = pages.map((n, index) => ({ n, index })).toSorted((a, b) => a.n - b.n)
  const finish = pages.map(() => 0)
  let elapsedMs = 0
  let done = 0
  for (const [position, { n, index }] of order.entries()) {
    const running = order.length - position
    elapsedMs += ((n - done) * running * HOUR_MS) / budgetPerHour
    done = n
    finish[index] = elapsedMs
  }
  return finish
}

/** Rounds an interval up to a setting a person would write: whole minutes below two hours, else whole hours. */
const settingFor = (ms: number): { readonly ms: number; readonly text: string } => {
  if (ms <= 2 * HOUR_MS) {
    const minutes = Math.max(1, Math.ceil(ms / 60_000))
    return { ms: minutes * 60_000, text: `${minutes} minutes` }
  }
  const hours = Math.ceil(ms / HOUR_MS)
  return { ms: hours * HOUR_MS, text: `${hours} hours` }
}

const baseDemand = (input: PlanInput, limitPerWindow: number): ReadonlyArray<JobDemand> => [
  {
    job: "poll:businesses",
    every: formatDuration(input.poll.intervalMs),
    requests_per_run: input.poll.requestsPerRun,
    requests_per_hour: round1(perHour(input.poll.requestsPerRun, input.poll.intervalMs))
  },
  {
    job: "reference",
    every: formatDuration(input.reference.intervalMs),
    requests_per_run: input.reference.requestsPerRun,
    requests_per_hour: round1(perHour(input.reference.requestsPerRun, input.reference.intervalMs))
  },
  {
    job: "reconcile",
    every: input.reconcile.runsPerDay === 1 ? "1/day" : `${input.reconcile.runsPerDay}/day`,
    requests_per_run: Math.floor(input.reconcile.share * limitPerWindow),
    requests_per_hour: round1((input.reconcile.runsPerDay * Math.floor(input.reconcile.share * limitPerWindow)) / 24)
  },
  { job: "outbound", every: "recent rate", requests_per_run: 0, requests_per_hour: round1(input.outboundPerHour) },
  {
    job: "webhook follow-up",
    every: "recent rate",
    requests_per_run: 0,
    requests_per_hour: round1(input.followUpPerHour)
  }
]

const finite = (value: number): number | null => (Number.isFinite(value) ? value : null)

const crawlPlans = (input: PlanInput, crawlBudgetPerHour: number): ReadonlyArray<CrawlPlan> => {
  const pages = input.crawls.map((crawl) => Math.max(1, Math.ceil(crawl.records / input.perPage)))
  const finish = sharedFinishTimes(pages, crawlBudgetPerHour)
  return input.crawls.map((crawl, index) => {
    const duration = finish[index] ?? 0
    return {
      resource: crawl.resource,
      records: crawl.records,
      pages: pages[index] ?? 0,
      interval: formatDuration(crawl.intervalMs),
      full_crawl_seconds: finite(Math.round(duration / 1000)),
      effective_interval_seconds: finite(Math.round(Math.max(crawl.intervalMs, duration) / 1000)),
      fits: duration <= crawl.intervalMs
    }
  })
}

const freshnessOf = (input: PlanInput, crawls: ReadonlyArray<CrawlPlan>, reconcileIntervalMs: number) => {
  const pollPass =
    (input.poll.requestsPerRun * HOUR_MS) / Math.max(1, input.bucket.limit * (HOUR_MS / input.bucket.windowMs))
  const rows: Array<Freshness> = [
    {
      resource: "businesses",
      via: "poll",
      worst_case_seconds: Math.round((input.poll.intervalMs + pollPass) / 1000),
      note: "changes by the updated_since poll; deletions only by the business crawl"
    }
  ]
  for (const crawl of crawls) {
    rows.push({
      resource: crawl.resource,
      via: "crawl",
      worst_case_seconds:
        crawl.full_crawl_seconds === null ? null : crawl.effective_interval_seconds! + crawl.full_crawl_seconds,
      note:
        crawl.full_crawl_seconds === null
          ? "never: no budget is left for crawls"
          : crawl.resource === "businesses"
            ? "deletions (no event, no filter): seen by absence from a full listing"
            : "no filter exists: changes and deletions by full listing"
    })
  }
  for (const { resource, repairable } of webhookResources) {
    rows.push({
      resource,
      via: "webhook",
      worst_case_seconds: null,
      note: repairable
        ? `seconds after the CRM sends; a lost delivery is repaired by reconciliation (every ${formatDuration(reconcileIntervalMs)})`
        : "seconds after the CRM sends; no read endpoint exists, so a lost delivery waits for the record's next event"
    })
  }
  for (const resource of referenceResources) {
    rows.push({
      resource,
      via: "reference",
      worst_case_seconds: Math.round(input.reference.intervalMs / 1000),
      note: "reference refresh"
    })
  }
  return rows
}

/**
 * The plan of one connection. Every job's demand is averaged over an hour of the strictest
 * bucket's limit (spec §8: the strictest bucket wins). Polls, the reference refresh,
 * reconciliation (amortized over the day its cron gives), the outbound writer and webhook
 * follow-up reads come first: they run at interactive or incremental priority, or once a day.
 * Crawls are bulk work and get what is left; crawls due at the same time share it evenly (a
 * smaller one finishes first and leaves its share to the others). A crawl that takes longer than
 * its interval runs back to back (the scheduler waits for the previous run to finish), so its
 * effective interval is its duration.
 */
export const planConnection = (input: PlanInput): ConnectionPlan => {
  const limitPerHour = (input.bucket.limit * HOUR_MS) / input.bucket.windowMs
  const others = baseDemand(input, input.bucket.limit)
  const othersPerHour = others.reduce((sum, job) => sum + job.requests_per_hour, 0)
  const crawlBudget = Math.max(0, limitPerHour - othersPerHour)
  const crawls = crawlPlans(input, crawlBudget)
  const crawlDemand: ReadonlyArray<JobDemand> = crawls.map((crawl, index) => ({
    job: `crawl:${crawl.resource}`,
    every: crawl.interval,
    requests_per_run: crawl.pages,
    requests_per_hour: round1(perHour(crawl.pages, input.crawls[index]!.intervalMs))
  }))
  const demand = [...others, ...crawlDemand]
  const demandPerHour = round1(demand.reduce((sum, job) => sum + job.requests_per_hour, 0))
  const warnings: Array<string> = []
  const suggestions: Array<Suggestion> = []
  if (othersPerHour > limitPerHour) {
    warnings.push(
      `polls, reference, reconciliation and writes alone need ${Math.round(othersPerHour)} requests/hour of ${Math.round(limitPerHour)}: crawls get nothing`
    )
    const pollFits = settingFor((input.poll.requestsPerRun * HOUR_MS) / Math.max(1, limitPerHour / 4))
    suggestions.push({
      setting: "schedules.businesses",
      value: pollFits.text,
      why: "keeps the poll to a quarter of the hour's budget"
    })
  }
  for (const crawl of crawls.filter((plan) => !plan.fits)) {
    const setting = input.crawls.find((c) => c.resource === crawl.resource)!.setting
    warnings.push(
      `${crawl.resource}: a full crawl takes ${formatDuration((crawl.full_crawl_seconds ?? Infinity) * 1000)} at the budget it gets, longer than ${setting} (${crawl.interval}); it runs back to back`
    )
  }
  // One suggestion per setting: the longest crawl under it decides.
  const bySetting = new Map<string, number>()
  for (const [index, crawl] of crawls.entries()) {
    if (crawl.fits) continue
    const setting = input.crawls[index]!.setting
    bySetting.set(setting, Math.max(bySetting.get(setting) ?? 0, (crawl.full_crawl_seconds ?? Infinity) * 1000))
  }
  for (const [setting, ms] of bySetting) {
    if (!Number.isFinite(ms)) continue
    suggestions.push({
      setting,
      value: settingFor(ms).text,
      why: "the shortest interval at which every crawl under this setting finishes before the next is due"
    })
  }
  const reconcileIntervalMs = input.reconcile.runsPerDay > 0 ? (24 * HOUR_MS) / input.reconcile.runsPerDay : Infinity
  return {
    connection: input.connection,
    credential: input.credential,
    bucket: input.bucket.key,
    limit_per_window: input.bucket.limit,
    limit_learned: input.bucket.learned,
    limit_per_hour: Math.round(limitPerHour),
    demand,
    demand_per_hour: demandPerHour,
    crawl_budget_per_hour: Math.round(crawlBudget),
    crawls,
    freshness: freshnessOf(input, crawls, reconcileIntervalMs),
    fits: warnings.length === 0,
    warnings,
    suggestions
  }
}
