/**
 * PlanReport: gathers what the plan (src/budget/Plan.ts) needs for every configured connection —
 * listing sizes from the latest crawls (else the warehouse's rows), requests per poll and per
 * reference refresh from recent job runs, the outbound writer's and the event processor's recent
 * request rates, the reconcile cron's runs per day — and renders the result for `crm-sync plan`.
 */
import * as Cron from "effect/Cron"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import type { AppConfigShape, Connection } from "../config/AppConfig.ts"
import { bucketsFor, strictest } from "../budget/Buckets.ts"
import { type ConnectionPlan, type CrawlInput, planConnection } from "../budget/Plan.ts"
import { formatDuration } from "../observability/Text.ts"
import { learnedCeilings } from "../budget/RateBudget.ts"
import { recordedUsers } from "../crm/Credentials.ts"
import { attemptsLastDay } from "../outbound/Outbox.ts"
import { lastListingTotal } from "../sync/CrawlRuns.ts"
import { averagePollRequests } from "../sync/JobRuns.ts"
import { liveRows } from "../warehouse/Warehouse.ts"
import { receivedLastDay } from "../webhooks/WebhookInbox.ts"

/** Page size of every listing crm-sync reads (spec §8: maximum 100). */
const PER_PAGE = 100
/** Assumed before a job has run: one page per poll, and me + books + project templates per refresh. */
const DEFAULT_POLL_REQUESTS = 1
const DEFAULT_REFERENCE_REQUESTS = 3

/** The crawled resources and the setting that schedules each. */
const crawled: ReadonlyArray<{ readonly resource: string; readonly setting: "crawl" | "business_crawl" }> = [
  { resource: "businesses", setting: "business_crawl" },
  { resource: "annuity_contracts", setting: "crawl" },
  { resource: "financial_accounts", setting: "crawl" }
]

/** Occurrences of a cron expression in the 24 hours after `from` (at least 0, at most 1,440). */
export const runsPerDay = (expression: string, from: Date): number =>
  Result.match(Cron.parse(expression, "UTC"), {
    onFailure: () => 0,
    onSuccess: (cron) => {
      const end = from.getTime() + 86_400_000
      let at = from
      let runs = 0
      while (runs < 1_440) {
        at = Cron.next(cron, at)
        if (at.getTime() > end) break
        runs++
      }
      return runs
    }
  })

const averageRequests = (averages: ReadonlyMap<string, number>, connection: string, fallback: number) => {
  const avg = averages.get(connection)
  return avg === undefined ? fallback : Math.max(1, Math.round(avg * 10) / 10)
}

/**
 * What every connection's plan reads alike (a table's live rows, the transcript deliveries of the
 * last day), read once per report rather than once per connection: each is a count.
 */
interface Shared {
  readonly liveRows: Map<string, number>
  followUps: number | undefined
  /** Requests per run of the last 20 polls and reference refreshes, by connection. */
  readonly polls: ReadonlyMap<string, number>
  readonly references: ReadonlyMap<string, number>
}

/** Records in a listing: the latest crawl's total, else the warehouse's live rows. */
const listingSize = (connection: string, resource: string, shared: Shared) =>
  Effect.gen(function* () {
    const total = yield* lastListingTotal(connection, resource)
    if (total !== null) return total
    const known = shared.liveRows.get(resource)
    if (known !== undefined) return known
    const rows = yield* liveRows(resource)
    shared.liveRows.set(resource, rows)
    return rows
  })

/** Requests per hour over the last day: outbox attempts of this connection, and transcript reads. */
const recentRates = (connection: string, isFirst: boolean, shared: Shared) =>
  Effect.gen(function* () {
    const outbound = yield* attemptsLastDay(connection, isFirst)
    shared.followUps ??= yield* receivedLastDay("meeting.transcript_ready")
    return { outboundPerHour: outbound / 24, followUpPerHour: shared.followUps / 24 }
  })

/** The plan input of one connection, read from the database. */
const inputFor = (
  config: AppConfigShape,
  connection: Connection,
  now: Date,
  userId: string | undefined,
  shared: Shared
) =>
  Effect.gen(function* () {
    // The buckets the client draws on (an OAuth grant's user's, once known), each at the ceiling
    // the budget learned for it (others spend the rest), while it holds.
    const specs = bucketsFor(connection, { userId })
    const learned = yield* learnedCeilings(
      specs.map((spec) => spec.key),
      config.budget.learned_ceiling_ttl
    )
    const effective = specs.map((spec) => ({
      ...spec,
      limit: Math.min(spec.limit, learned.get(spec.key) ?? spec.limit)
    }))
    const bucket = strictest(effective)
    const configured = specs.find((spec) => spec.key === bucket.key)!
    const crawls: Array<CrawlInput> = []
    for (const { resource, setting } of crawled) {
      crawls.push({
        resource,
        records: yield* listingSize(connection.name, resource, shared),
        intervalMs: Duration.toMillis(config.schedules[setting]),
        setting: `schedules.${setting}`
      })
    }
    const rates = yield* recentRates(connection.name, config.connections[0]?.name === connection.name, shared)
    return planConnection({
      connection: connection.name,
      credential: connection.credential,
      bucket: {
        key: bucket.key,
        limit: bucket.limit,
        configuredLimit: configured.limit,
        learned: learned.has(bucket.key),
        windowMs: bucket.windowMs
      },
      poll: {
        intervalMs: Duration.toMillis(config.schedules.businesses),
        requestsPerRun: averageRequests(shared.polls, connection.name, DEFAULT_POLL_REQUESTS)
      },
      reference: {
        intervalMs: Duration.toMillis(config.schedules.reference),
        requestsPerRun: averageRequests(shared.references, connection.name, DEFAULT_REFERENCE_REQUESTS)
      },
      reconcile: { runsPerDay: runsPerDay(config.schedules.reconcile, now), share: config.budget.reconcile_share },
      ...rates,
      crawls,
      perPage: PER_PAGE
    })
  })

/** Every configured connection's plan (`only`: that connection's alone). */
export const planReport = Effect.fn("PlanReport.make")(function* (config: AppConfigShape, only?: string) {
  const now = new Date(yield* Effect.clockWith((clock) => clock.currentTimeMillis))
  const plans: Array<ConnectionPlan> = []
  const users = yield* recordedUsers
  const planned = config.connections.filter((connection) => only === undefined || connection.name === only)
  const names = planned.map((connection) => connection.name)
  const shared: Shared = {
    liveRows: new Map(),
    followUps: undefined,
    polls: yield* averagePollRequests("poll:businesses", names),
    references: yield* averagePollRequests("reference", names)
  }
  for (const connection of planned) {
    plans.push(yield* inputFor(config, connection, now, users.get(connection.name), shared))
  }
  return plans
})

const number = new Intl.NumberFormat("en-US")

const renderOne = (plan: ConnectionPlan): ReadonlyArray<string> => {
  const lines: Array<string> = []
  const learned = plan.limit_learned ? " (learned from 429s)" : ""
  lines.push(
    `connection ${plan.connection} (${plan.credential}): strictest bucket ${plan.bucket}, ` +
      `${number.format(plan.limit_per_window)} requests per window${learned} = ${number.format(plan.limit_per_hour)}/hour`
  )
  lines.push("")
  lines.push(`  ${"job".padEnd(30)}${"every".padEnd(14)}${"per run".padStart(10)}${"per hour".padStart(12)}`)
  for (const job of plan.demand) {
    lines.push(
      `  ${job.job.padEnd(30)}${job.every.padEnd(14)}${(job.requests_per_run === 0 ? "-" : number.format(job.requests_per_run)).padStart(10)}${number.format(job.requests_per_hour).padStart(12)}`
    )
  }
  lines.push(
    `  ${"total".padEnd(54)}${number.format(plan.demand_per_hour).padStart(12)} of ${number.format(plan.limit_per_hour)}`
  )
  lines.push("")
  lines.push(`  crawls get ${number.format(plan.crawl_budget_per_hour)} requests/hour once the other jobs have theirs:`)
  for (const crawl of plan.crawls) {
    lines.push(
      `  ${crawl.resource.padEnd(30)}${number.format(crawl.records)} records, ${number.format(crawl.pages)} pages: ` +
        `a full crawl takes ${formatDuration((crawl.full_crawl_seconds ?? Infinity) * 1000)} (every ${crawl.interval})${crawl.fits ? "" : "  DOES NOT FIT"}`
    )
  }
  lines.push("")
  lines.push("  freshness (worst-case age of a change when it reaches the warehouse):")
  for (const row of plan.freshness) {
    const age =
      row.worst_case_seconds !== null
        ? formatDuration(row.worst_case_seconds * 1000)
        : row.via === "webhook"
          ? "seconds"
          : "never"
    lines.push(`  ${row.resource.padEnd(30)}${row.via.padEnd(10)}${age.padEnd(10)}${row.note}`)
  }
  lines.push("")
  if (plan.fits) lines.push("  the schedules fit the budget")
  for (const warning of plan.warnings) lines.push(`  WARNING ${warning}`)
  for (const suggestion of plan.suggestions) {
    lines.push(`  set ${suggestion.setting} to "${suggestion.value}": ${suggestion.why}`)
  }
  return lines
}

/** The human-readable form printed by `crm-sync plan`. */
export const renderPlan = (plans: ReadonlyArray<ConnectionPlan>): string =>
  plans.length === 0 ? "no connection configured" : plans.map((plan) => renderOne(plan).join("\n")).join("\n\n")
