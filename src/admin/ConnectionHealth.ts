/**
 * ConnectionHealth: one word per connection for an operator watching hundreds of them, from what
 * the warehouse records — each scheduled job's runs (JobRuns) against its schedule (LagState's
 * `scheduledJobs`), and the grants the CRM refused (Credentials). In order of precedence:
 *
 * - `needs_reauthorization`: the CRM refused the connection's grant; `crm-sync connect` again.
 * - `failing`: a job's runs have failed since its last success (its latest error is the reason).
 * - `late`: a job's last success is older than twice its interval (one missed turn is slack).
 * - `not_synced`: no job of the connection has succeeded yet (a new connection, a daemon starting).
 * - `healthy`: none of the above.
 *
 * The status report carries the summary (how many of each) and the list, unhealthy first.
 */
import * as Effect from "effect/Effect"
import type { AppConfigShape } from "../config/AppConfig.ts"
import { jobStates } from "../sync/JobRuns.ts"
import { scheduledJobs, stateHorizon } from "./LagState.ts"
import { formatDuration } from "../observability/Text.ts"

export type HealthState = "needs_reauthorization" | "failing" | "late" | "not_synced" | "healthy"

/** The states, worst first: the order of the summary and of the list. */
export const HealthStates: ReadonlyArray<HealthState> = [
  "needs_reauthorization",
  "failing",
  "late",
  "not_synced",
  "healthy"
]

export type JobState = "ok" | "late" | "failed" | "never"

export interface ScheduledJobHealth {
  readonly job: string
  /** Seconds between runs the schedule asks for. */
  readonly every_seconds: number
  readonly last_success: string | null
  /** The latest run's status (`running` while one runs); null: never ran. */
  readonly last_status: string | null
  /** Runs failed since the last success, and the latest one's error. */
  readonly failures: number
  readonly last_error: string | null
  readonly state: JobState
}

export interface ConnectionHealth {
  readonly connection: string
  readonly state: HealthState
  /** Why it is not healthy, one line each (empty when healthy). */
  readonly reasons: ReadonlyArray<string>
  /** The latest success of any of its jobs. */
  readonly last_success: string | null
  readonly jobs: ReadonlyArray<ScheduledJobHealth>
}

export type HealthSummary = { readonly connections: number } & Record<HealthState, number>

const iso = (value: Date | null): string | null => (value === null ? null : value.toISOString())

/** A job's state at `now` (epoch ms): failed since its last success, late (older than twice its interval), never, ok. */
export const jobState = (
  job: { readonly every_seconds: number; readonly last_success: string | null; readonly failures: number },
  now: number
): JobState => {
  if (job.failures > 0) return "failed"
  if (job.last_success === null) return "never"
  return now - Date.parse(job.last_success) > 2 * job.every_seconds * 1000 ? "late" : "ok"
}

const ago = (now: number, at: string) => formatDuration(Math.max(0, now - Date.parse(at)))

/** The connection's state and reasons from its jobs' states. */
export const classify = (
  connection: string,
  jobs: ReadonlyArray<ScheduledJobHealth>,
  refused: boolean,
  now: number
): ConnectionHealth => {
  const failed = jobs.filter((job) => job.state === "failed")
  const late = jobs.filter((job) => job.state === "late")
  const reasons = [
    ...(refused ? [`the CRM refused its grant: run crm-sync connect ${connection}`] : []),
    ...failed.map(
      (job) =>
        `${job.job} failed ${job.failures === 1 ? "once" : `${job.failures} times`} since its last success` +
        (job.last_error === null ? "" : `: ${job.last_error}`)
    ),
    ...late.map(
      (job) =>
        `${job.job} last succeeded ${ago(now, job.last_success!)} ago (every ${formatDuration(job.every_seconds * 1000)})`
    )
  ]
  const successes = jobs.flatMap((job) => (job.last_success === null ? [] : [job.last_success]))
  const synced = successes.length > 0
  const state: HealthState = refused
    ? "needs_reauthorization"
    : failed.length > 0
      ? "failing"
      : late.length > 0
        ? "late"
        : synced
          ? "healthy"
          : "not_synced"
  return {
    connection,
    state,
    reasons: state === "not_synced" ? ["no job has succeeded yet"] : reasons,
    last_success: synced ? successes.toSorted().at(-1)! : null,
    jobs
  }
}

/** Worst first, then by name. */
export const byUrgency = (a: ConnectionHealth, b: ConnectionHealth) =>
  HealthStates.indexOf(a.state) - HealthStates.indexOf(b.state) || a.connection.localeCompare(b.connection)

/** How many connections are in each state. */
export const summarize = (list: ReadonlyArray<ConnectionHealth>): HealthSummary => {
  const counts: Record<string, number> = Object.fromEntries(HealthStates.map((state) => [state, 0]))
  for (const health of list) counts[health.state] = (counts[health.state] ?? 0) + 1
  return { connections: list.length, ...counts } as HealthSummary
}

/**
 * The health of every configured connection at `now` (epoch ms), worst first; `refused`: the
 * connections whose grant needs re-authorization.
 */
export const connectionHealth = Effect.fn("ConnectionHealth.read")(function* (
  config: AppConfigShape,
  refused: ReadonlyArray<string>,
  now: number
) {
  const scheduled = scheduledJobs(config, new Date(now))
  const rows = yield* jobStates(scheduled, stateHorizon(scheduled))
  const byKey = new Map(rows.map((row) => [`${row.job}\u0000${row.connection}`, row]))
  const refusedSet = new Set(refused)
  const perConnection = Map.groupBy(scheduled, (job) => job.connection)
  return config.connections
    .map((connection) => {
      const jobs = (perConnection.get(connection.name) ?? []).map((job): ScheduledJobHealth => {
        const row = byKey.get(`${job.job}\u0000${job.connection}`)
        const facts = {
          job: job.job,
          every_seconds: job.interval_seconds,
          last_success: iso(row?.last_success ?? null),
          last_status: row?.last_status ?? null,
          failures: row?.failures ?? 0,
          last_error: row?.last_error ?? null
        }
        return { ...facts, state: jobState(facts, now) }
      })
      return classify(connection.name, jobs, refusedSet.has(connection.name), now)
    })
    .toSorted(byUrgency)
})
