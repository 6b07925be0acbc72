/**
 * What the status page's charts draw (Charts.ts), read with the status snapshot from tables that
 * already exist, in three aggregate queries whose rows follow the minutes, slots, jobs and shown
 * buckets, not the connections: requests per minute of the shown buckets (derived from
 * `job_runs`: requests are counted per run, not per minute), webhook events per minute over the
 * last hour with their lag (`webhook_inbox`), and the last day's runs per job in 10-minute slots.
 * Each resource's freshness comes from the report itself: its newest row, and the last success of
 * the job that reads it on a schedule, for the connection that had it longest ago.
 */
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { SqlClient } from "effect/sql/SqlClient"
import { AppConfig, type AppConfigShape } from "../config/AppConfig.ts"
import { bucketsFor, defaultWindow } from "../budget/Buckets.ts"
import { recordedUsers } from "../crm/Credentials.ts"
import { requestsPerMinute, runsPerSlot } from "../sync/JobRuns.ts"
import { JobNames } from "../sync/SyncJobs.ts"
import { eventsPerMinute } from "../webhooks/WebhookInbox.ts"
import type { BucketSeries, EventSeries, ResourceFreshness, RunSlot, RunStrips } from "./Charts.ts"
import { scheduledJobs } from "./LagState.ts"
import { oneLine } from "../observability/Text.ts"
import type { StatusReport } from "./StatusReport.ts"

export interface ChartData {
  /** When they were read (epoch ms): the report's time. */
  readonly now: number
  readonly buckets: ReadonlyArray<BucketSeries>
  readonly events: EventSeries
  readonly freshness: ReadonlyArray<ResourceFreshness>
  readonly runs: RunStrips
}

const MINUTE = 60_000
/** Buckets drawn, the fullest first (the page's table lists more). */
export const BUCKETS_CHARTED = 6
const SLOT = 10 * MINUTE
const SLOTS = 144

type Bucket = StatusReport["buckets"][number]

const fullness = (bucket: Bucket) => (bucket.limit > 0 ? bucket.used / bucket.limit : 0)

/** The buckets, or with more than `count` the `count` fullest. */
export const fullest = (buckets: ReadonlyArray<Bucket>, count: number): ReadonlyArray<Bucket> =>
  buckets.length <= count ? buckets : buckets.toSorted((a, b) => fullness(b) - fullness(a)).slice(0, count)

/** The job that reads each resource on a schedule; the others arrive by events (and reconciliation). */
const SCHEDULED_READS: Readonly<Record<string, string>> = {
  businesses: JobNames.poll,
  annuity_contracts: JobNames.crawl("annuity_contracts"),
  financial_accounts: JobNames.crawl("financial_accounts"),
  books: JobNames.reference,
  project_templates: JobNames.reference,
  users: JobNames.reference,
  teams: JobNames.reference
}

/** Each resource's newest row and scheduled read: the read's last success is its stalest connection's. */
export const freshness = (
  report: StatusReport,
  config: AppConfigShape,
  now: number
): ReadonlyArray<ResourceFreshness> => {
  const every = new Map(scheduledJobs(config, new Date(now)).map((job) => [job.job, job.interval_seconds]))
  const stalest = new Map<string, string>()
  for (const health of report.connection_health) {
    for (const job of health.jobs) {
      if (job.last_success === null) continue
      const known = stalest.get(job.job)
      if (known === undefined || job.last_success < known) stalest.set(job.job, job.last_success)
    }
  }
  return Object.entries(report.resources).map(([resource, status]) => {
    const job = SCHEDULED_READS[resource] ?? null
    const scheduled = job !== null && every.has(job)
    return {
      resource,
      rows: status.rows,
      newest_row: status.last_sync,
      last_read: scheduled ? (stalest.get(job) ?? null) : null,
      every_seconds: scheduled ? every.get(job)! : null,
      job: scheduled ? job : null
    }
  })
}

/**
 * The window each charted bucket is in, with the connections drawing on it. A window already over
 * (nothing sent since it reset: the next request opens the next one) is drawn as the hour up to
 * now, with nothing counted; so every chart, and the requests read for it, ends within the last hour.
 */
const bucketWindows = (report: StatusReport, config: AppConfigShape, users: ReadonlyMap<string, string>) => {
  const drawing = new Map<string, Array<string>>()
  const windowOf = new Map<string, number>()
  for (const connection of config.connections) {
    for (const spec of bucketsFor(connection, { userId: users.get(connection.name) })) {
      const names = drawing.get(spec.key) ?? []
      names.push(connection.name)
      drawing.set(spec.key, names)
      windowOf.set(spec.key, spec.windowMs)
    }
  }
  return fullest(report.buckets, BUCKETS_CHARTED).map((bucket) => {
    const window_ms = windowOf.get(bucket.bucket) ?? Duration.toMillis(defaultWindow)
    const now = Date.parse(report.generated_at)
    const resets = bucket.resets_at === null ? null : Date.parse(bucket.resets_at)
    const current = resets !== null && resets > now
    return {
      bucket,
      window_ms,
      start: current ? resets - window_ms : now - window_ms,
      used: current ? bucket.used : 0,
      connections: drawing.get(bucket.bucket) ?? []
    }
  })
}

/** The charts' data at the report's time (one query for the OAuth users, three aggregates). */
export const statusCharts = Effect.fn("StatusCharts.read")(function* (report: StatusReport, config: AppConfigShape) {
  const now = Date.parse(report.generated_at)
  const users = yield* recordedUsers
  const windows = bucketWindows(report, config, users)
  const since = Math.min(now - 60 * MINUTE, ...windows.map((window) => window.start))
  const requests = yield* requestsPerMinute(
    windows.flatMap((window) => window.connections.map((connection) => ({ connection, key: window.bucket.bucket }))),
    new Date(since).toISOString()
  )
  const buckets = windows.map((window): BucketSeries => {
    const per_minute: Array<number> = []
    for (const row of requests) {
      if (row.key !== window.bucket.bucket) continue
      // A clock minute counts in the window's minute holding its middle; the one the window began in, in its first.
      const minute = row.minute.getTime()
      if (minute + MINUTE <= window.start) continue
      const index = Math.max(0, Math.floor((minute + MINUTE / 2 - window.start) / MINUTE))
      per_minute[index] = (per_minute[index] ?? 0) + row.requests
    }
    return {
      bucket: window.bucket.bucket,
      scope: window.bucket.scope,
      limit: window.bucket.limit,
      learned_limit: window.bucket.learned_limit,
      used: window.used,
      start: window.start,
      window_ms: window.window_ms,
      per_minute: Array.from(per_minute, (value) => value ?? 0)
    }
  })

  const eventsStart = Math.floor(now / MINUTE) * MINUTE - 59 * MINUTE
  const received: Array<number> = Array(60).fill(0)
  const applied: Array<number> = Array(60).fill(0)
  const maxLag: Array<number | null> = Array(60).fill(null)
  for (const row of yield* eventsPerMinute(new Date(eventsStart).toISOString())) {
    const index = Math.round((row.minute.getTime() - eventsStart) / MINUTE)
    if (index < 0 || index >= 60) continue
    received[index] = row.received
    applied[index] = row.applied
    maxLag[index] = row.max_lag
  }

  const firstSlot = Math.floor(now / SLOT) - (SLOTS - 1)
  const byJob = new Map<string, Map<number, { -readonly [K in keyof RunSlot]: number }>>()
  for (const row of yield* runsPerSlot(new Date(firstSlot * SLOT).toISOString(), SLOT)) {
    const slots = byJob.get(row.job) ?? new Map()
    byJob.set(row.job, slots)
    const index = row.slot - firstSlot
    const slot = slots.get(index) ?? { slot: index, succeeded: 0, failed: 0, interrupted: 0, running: 0 }
    slots.set(index, slot)
    if (
      row.status === "succeeded" ||
      row.status === "failed" ||
      row.status === "interrupted" ||
      row.status === "running"
    ) {
      slot[row.status] += row.n
    }
  }
  const runs: RunStrips = {
    start: firstSlot * SLOT,
    slot_ms: SLOT,
    slots: SLOTS,
    jobs: [...byJob.entries()]
      .toSorted(([a], [b]) => a.localeCompare(b))
      .map(([job, slots]) => ({ job, slots: [...slots.values()].toSorted((a, b) => a.slot - b.slot) }))
  }

  return {
    now,
    buckets,
    events: { start: eventsStart, received, applied, max_lag: maxLag },
    freshness: freshness(report, config, now),
    runs
  } satisfies ChartData
})

/**
 * The charts of each status snapshot (StatusSnapshot's report), made once per report however many
 * pages ask, when the first asks. If their queries fail, the page is drawn without them (null).
 */
export class StatusCharts extends Context.Service<
  StatusCharts,
  { readonly of: (report: StatusReport) => Effect.Effect<ChartData | null> }
>()("crm-sync/observability/StatusCharts") {
  static readonly layer = Layer.effect(
    StatusCharts,
    Effect.gen(function* () {
      const config = yield* AppConfig
      const sql = yield* SqlClient
      const made = new WeakMap<StatusReport, Effect.Effect<ChartData | null>>()
      const of = Effect.fnUntraced(function* (report: StatusReport) {
        let charts = made.get(report)
        if (charts === undefined) {
          charts = yield* Effect.cached(
            statusCharts(report, config).pipe(
              Effect.provideService(SqlClient, sql),
              Effect.catch((error) =>
                Effect.logWarning("status page: cannot read the charts' data").pipe(
                  Effect.annotateLogs({ error: oneLine(error) }),
                  Effect.as(null)
                )
              )
            )
          )
          made.set(report, charts)
        }
        return yield* charts
      })
      return StatusCharts.of({ of })
    })
  )
}
