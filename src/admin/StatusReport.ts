/**
 * The `status` report: what the warehouse holds and how fresh it is, the rate budget's windows,
 * and the inbox and outbox by status. Read straight from PostgreSQL, so it describes every
 * process sharing the database, not just this one. Secrets never appear: connections are shown
 * by name, URL and credential kind only.
 */
import { promisify } from "node:util"
import { gzip } from "node:zlib"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Ref from "effect/Ref"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import { SqlClient } from "effect/sql/SqlClient"
import { AppConfig, type AppConfigShape } from "../config/AppConfig.ts"
import { bucketKey } from "../budget/Buckets.ts"
import { bucketWindows } from "../budget/RateBudget.ts"
import { grantGaps, needingReauthorization, recordedUsers } from "../crm/Credentials.ts"
import { outboxCounts } from "../outbound/Outbox.ts"
import { latestCursors } from "../sync/Cursors.ts"
import { latestRuns } from "../sync/JobRuns.ts"
import { DatabaseInfo, type DatabaseInfoShape } from "../warehouse/Database.ts"
import { historyStats } from "../warehouse/History.ts"
import { tableStats } from "../warehouse/Warehouse.ts"
import { inboxCounts } from "../webhooks/WebhookInbox.ts"
import { reasonText, recentRefusals } from "../webhooks/WebhookRefusals.ts"
import type { ConnectionPlan } from "../budget/Plan.ts"
import { planReport } from "./PlanReport.ts"
import {
  type ConnectionHealth,
  connectionHealth,
  type HealthSummary,
  summarize as summarizeHealth
} from "./ConnectionHealth.ts"
import { formatDuration } from "../observability/Text.ts"

export interface ResourceStatus {
  readonly rows: number
  readonly deleted: number
  readonly last_sync: string | null
  readonly cursor: string | null
  /** Resources with a history (crm_history): its versions, and those that ended in the last day (its growth). */
  readonly history?: { readonly versions: number; readonly last_day: number }
}

export interface BucketStatus {
  readonly bucket: string
  readonly scope: string
  readonly used: number
  readonly limit: number
  readonly resets_at: string | null
  readonly blocked_until: string | null
  /** The ceiling learned from 429s below the limit (other consumers' use), while it holds. */
  readonly learned_limit: number | null
}

export interface StatusReport {
  /** When this report was made (over HTTP it may be up to SNAPSHOT_TTL old). */
  readonly generated_at: string
  readonly config: {
    readonly origin: string
    readonly connections: ReadonlyArray<{ name: string; base_url: string; credential: string; egress: string }>
    readonly webhook_endpoints: ReadonlyArray<string>
  }
  readonly database: DatabaseInfoShape
  /** How many configured connections are healthy, late, failing, need re-authorization or have not synced yet. */
  readonly summary: HealthSummary
  /** Each configured connection's state, why, and its scheduled jobs; the unhealthy first. */
  readonly connection_health: ReadonlyArray<ConnectionHealth>
  readonly resources: Record<string, ResourceStatus>
  readonly buckets: ReadonlyArray<BucketStatus>
  readonly inbox: Record<string, number>
  readonly outbox: Record<string, number>
  readonly connections_needing_reauthorization: ReadonlyArray<string>
  /**
   * Per connection, the latest time range in which the CRM refused its grant (`until` null: still
   * refused): the CRM sent no webhook events then, so a reconciliation must repair that range.
   */
  readonly grant_gaps: ReadonlyArray<{ connection: string; from: string; until: string | null }>
  /** Webhook deliveries refused before storing, per endpoint and reason, whose latest is within a day. */
  readonly webhook_refusals: ReadonlyArray<{
    endpoint: string
    reason: string
    count: number
    first_at: string
    last_at: string
  }>
  readonly last_jobs: ReadonlyArray<{
    job: string
    connection: string | null
    status: string
    finished_at: string | null
  }>
  /** Per connection, whether the schedules fit the rate budget (`crm-sync plan` has the whole plan). */
  readonly plan: ReadonlyArray<ConnectionPlan>
}

const counts = (rows: ReadonlyArray<{ status: string; n: number }>) =>
  Object.fromEntries(rows.map((row) => [row.status, row.n]))

const iso = (value: unknown): string | null =>
  value === null || value === undefined ? null : value instanceof Date ? value.toISOString() : String(value)

/** Refusals older than this (their latest) are no longer shown. */
const REFUSALS_SHOWN = Duration.days(1)

/**
 * The budget's windows, one per real CRM bucket: an OAuth connection's requests made before its
 * user was known (`connect`'s own) drew on `token:<connection>`, which the user's bucket replaced.
 */
const currentWindows = (config: AppConfigShape) =>
  Effect.gen(function* () {
    const users = yield* recordedUsers
    const replaced = new Set(
      config.connections.flatMap((connection) =>
        connection.credential === "oauth" && users.has(connection.name) ? [bucketKey("token", connection.name)] : []
      )
    )
    const windows = yield* bucketWindows(config.budget.learned_ceiling_ttl)
    return windows.filter((window) => !replaced.has(window.bucket))
  })

/**
 * The report; `only`: of that connection alone (its health and plan are the only ones made);
 * `plans`: the connections' plans when the caller has them (else they are made).
 */
export const statusReport = Effect.fn("StatusReport.make")(function* (
  config: AppConfigShape,
  database: DatabaseInfoShape,
  only?: string,
  plans?: ReadonlyArray<ConnectionPlan>
) {
  // Taken before anything is read: every figure of the report is at least as new as this.
  const now = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
  const cursors = yield* latestCursors
  const resources: Record<string, ResourceStatus> = {}
  for (const table of yield* tableStats) {
    resources[table.table] = {
      rows: table.rows,
      deleted: table.deleted,
      last_sync: iso(table.last_sync),
      cursor: iso(cursors.find((cursor) => cursor.resource === table.table)?.cursor)
    }
  }
  for (const { resource, versions, last_day } of yield* historyStats) {
    const held = resources[resource]
    if (held !== undefined) resources[resource] = { ...held, history: { versions, last_day } }
  }
  const windows = yield* currentWindows(config)
  const inbox = yield* inboxCounts
  const outbox = yield* outboxCounts
  const reauth = yield* needingReauthorization
  const gaps = yield* grantGaps
  const refusals = yield* recentRefusals(REFUSALS_SHOWN)
  const jobs = yield* latestRuns
  const health = yield* connectionHealth(
    only === undefined ? config : { ...config, connections: config.connections.filter((c) => c.name === only) },
    reauth,
    now
  )
  const report = {
    generated_at: new Date(now).toISOString(),
    config: {
      origin: config.origin,
      connections: config.connections.map((connection) => ({
        name: connection.name,
        base_url: connection.base_url.href,
        credential: connection.credential,
        egress: connection.egress
      })),
      webhook_endpoints: config.webhooks.endpoints.map((endpoint) => `/webhooks/${endpoint.name}`)
    },
    database,
    summary: summarizeHealth(health),
    connection_health: health,
    resources,
    buckets: windows.map((window) => ({
      bucket: window.bucket,
      scope: window.scope,
      used: window.used,
      limit: window.request_limit,
      resets_at: iso(window.resets_at),
      blocked_until: iso(window.blocked_until),
      learned_limit: window.learned_limit
    })),
    inbox: counts(inbox),
    outbox: counts(outbox),
    connections_needing_reauthorization: reauth,
    grant_gaps: gaps.map((gap) => ({
      connection: gap.connection,
      from: iso(gap.started_at)!,
      until: iso(gap.ended_at)
    })),
    webhook_refusals: refusals.map((row) => ({
      endpoint: row.endpoint,
      reason: row.reason,
      count: row.count,
      first_at: iso(row.first_at)!,
      last_at: iso(row.last_at)!
    })),
    last_jobs: jobs.map((job) => ({ ...job, finished_at: iso(job.finished_at) })),
    plan: plans ?? (yield* planReport(config, only))
  } satisfies StatusReport
  return only === undefined ? report : forConnection(report, only)
})

const pad = (text: string, width: number) => text.padEnd(width)

const summarize = (byStatus: Record<string, number>) =>
  Object.keys(byStatus).length === 0
    ? "empty"
    : Object.entries(byStatus)
        .map(([status, n]) => `${status} ${n}`)
        .join(", ")

/** "3 min ago" from the report's time; "-" for never. */
const ago = (now: string, at: string | null) =>
  at === null ? "-" : `${formatDuration(Math.max(0, Date.parse(now) - Date.parse(at)))} ago`

/** "endpoint client-created: 14 deliveries refused, bad signature, last 2 min ago", one per endpoint and reason. */
export const refusalLines = (report: StatusReport): ReadonlyArray<string> =>
  report.webhook_refusals.map(
    (row) =>
      `endpoint ${row.endpoint}: ${row.count} ${row.count === 1 ? "delivery" : "deliveries"} refused, ` +
      `${reasonText(row.reason)}, last ${ago(report.generated_at, row.last_at)}`
  )

/** The time range of each connection's refused grant, and what it means for the warehouse. */
export const gapLines = (report: StatusReport): ReadonlyArray<string> =>
  report.grant_gaps.map((gap) =>
    gap.until === null
      ? `connection ${gap.connection}: grant refused since ${gap.from}: no webhook events since then; ` +
        `run \`crm-sync connect ${gap.connection}\` (it subscribes again), then reconcile`
      : `connection ${gap.connection}: no webhook events from ${gap.from} to ${gap.until} (grant refused): ` +
        `reconcile repairs tasks, meetings and notes of that range; clients and prospects changed then need a backfill`
  )

/**
 * With no connection in this config, the connections whose jobs the warehouse has run: another
 * process (`crm-sync demo`, a daemon with another config) syncs into this database.
 */
const unconfiguredLine = (report: StatusReport) => {
  const seen = [...new Set(report.last_jobs.flatMap((job) => (job.connection === null ? [] : [job.connection])))]
  return seen.length === 0
    ? "connections none configured"
    : `connections none in this config; the warehouse has jobs of ${seen.toSorted().join(", ")}, configured where they run`
}

/**
 * The report narrowed to one connection: its configuration, health, jobs, plan, grant gaps and
 * re-authorization; the summary, warehouse, budget, inbox and outbox stay whole.
 */
export const forConnection = (report: StatusReport, name: string): StatusReport => ({
  ...report,
  config: { ...report.config, connections: report.config.connections.filter((c) => c.name === name) },
  connection_health: report.connection_health.filter((health) => health.connection === name),
  connections_needing_reauthorization: report.connections_needing_reauthorization.filter((c) => c === name),
  grant_gaps: report.grant_gaps.filter((gap) => gap.connection === name),
  last_jobs: report.last_jobs.filter((job) => job.connection === name),
  plan: report.plan.filter((plan) => plan.connection === name)
})

/** With more connections than this, the text lists only those that are not healthy. */
const LISTED_IN_FULL = 10

const STATE_WORDS: Record<keyof StatusReport["summary"], string> = {
  connections: "connections",
  healthy: "healthy",
  late: "late",
  failing: "failing",
  needs_reauthorization: "needing re-authorization",
  not_synced: "not synced yet"
}

/** "300 connections: 250 healthy, 20 late, 20 failing, 10 needing re-authorization, 0 not synced yet". */
export const summaryLine = (summary: StatusReport["summary"]): string =>
  `${summary.connections} ${summary.connections === 1 ? "connection" : "connections"}: ` +
  (["healthy", "late", "failing", "needs_reauthorization", "not_synced"] as const)
    .map((state) => `${summary[state]} ${STATE_WORDS[state]}`)
    .join(", ")

/** The summary, then one line per connection that is not healthy, with its reasons. */
const healthLines = (report: StatusReport): ReadonlyArray<string> =>
  report.config.connections.length === 0
    ? []
    : [
        `health      ${summaryLine(report.summary)}`,
        ...report.connection_health
          .filter((health) => health.state !== "healthy")
          .map(
            (health) =>
              `${pad(health.state === "needs_reauthorization" ? "reauth" : health.state, 12)}${health.connection}: ${health.reasons.join("; ")}`
          )
      ]

/** The human-readable form printed by `crm-sync status`. */
export const renderStatus = (report: StatusReport): string => {
  const lines: Array<string> = []
  lines.push(`config      ${report.config.origin}`)
  lines.push(`database    ${report.database.kind}: ${report.database.location}`)
  if (report.config.connections.length === 0) lines.push(unconfiguredLine(report))
  // Hundreds of connections: only those that are not healthy, in full.
  const many = report.config.connections.length > LISTED_IN_FULL
  const listed = new Set(
    report.connection_health.flatMap((health) => (many && health.state === "healthy" ? [] : [health.connection]))
  )
  const shown = (name: string | null) => !many || name === null || listed.has(name)
  for (const line of healthLines(report)) lines.push(line)
  if (many) {
    lines.push(
      `connections ${report.config.connections.length - listed.size} healthy not listed: crm-sync status --connection NAME shows one`
    )
  }
  for (const connection of report.config.connections.filter((c) => shown(c.name))) {
    const reauth = report.connections_needing_reauthorization.includes(connection.name)
      ? "  NEEDS RE-AUTHORIZATION"
      : ""
    lines.push(
      `connection  ${connection.name}: ${connection.base_url} (${connection.credential}, egress ${connection.egress})${reauth}`
    )
  }
  lines.push("")
  lines.push(`${pad("resource", 34)}${pad("rows", 10)}${pad("deleted", 9)}${pad("last write", 16)}cursor`)
  for (const [name, resource] of Object.entries(report.resources)) {
    lines.push(
      `${pad(name, 34)}${pad(String(resource.rows), 10)}${pad(String(resource.deleted), 9)}${pad(ago(report.generated_at, resource.last_sync), 16)}${resource.cursor ?? "-"}`
    )
  }
  const histories = Object.entries(report.resources).flatMap(([name, resource]) =>
    resource.history === undefined ? [] : [`${name} ${resource.history.versions} (+${resource.history.last_day}/day)`]
  )
  if (histories.length > 0) lines.push(`history versions: ${histories.join(", ")}`)
  lines.push("")
  if (report.buckets.length === 0) lines.push("rate budget: no requests sent yet")
  // A bucket's name may be long (`token:oauth:<app>:<user>`): the column is as wide as the longest.
  const bucketWidth = Math.max(40, ...report.buckets.map((bucket) => bucket.bucket.length + 2))
  for (const bucket of report.buckets) {
    const blocked =
      (bucket.blocked_until === null ? "" : `  blocked until ${bucket.blocked_until}`) +
      (bucket.learned_limit === null ? "" : `  learned ceiling ${bucket.learned_limit} (others use the rest)`)
    lines.push(
      `bucket ${pad(bucket.bucket, bucketWidth)}${bucket.used}/${bucket.limit}  resets ${bucket.resets_at ?? "-"}${blocked}`
    )
  }
  lines.push("")
  for (const plan of report.plan.filter((p) => shown(p.connection) || !p.fits)) {
    lines.push(
      plan.fits
        ? `plan        ${plan.connection}: the schedules fit the budget (${Math.round(plan.demand_per_hour)} of ${plan.limit_per_hour} requests/hour)`
        : `plan        ${plan.connection}: WARNING ${plan.warnings.join("; ")} (see crm-sync plan)`
    )
  }
  for (const line of gapLines(report)) lines.push(`gap         ${line}`)
  lines.push(`inbox       ${summarize(report.inbox)}`)
  for (const line of refusalLines(report)) lines.push(`refused     ${line}`)
  lines.push(`outbox      ${summarize(report.outbox)}`)
  for (const job of report.last_jobs.filter((j) => shown(j.connection))) {
    lines.push(
      `job         ${job.job}${job.connection ? ` (${job.connection})` : ""}: ${job.status} ${job.finished_at === null ? "" : ago(report.generated_at, job.finished_at)}`
    )
  }
  return lines.join("\n")
}

/** How old a report served over HTTP may be before a request starts making a fresh one. */
export const SNAPSHOT_TTL = Duration.seconds(5)

/**
 * How old the plans in a report served over HTTP may be: a plan reads a few queries per
 * connection and follows hourly rates, so it is remade less often than the rest.
 */
export const PLAN_TTL = Duration.minutes(5)

/** How long the admin routes wait, at start, for the first report before they are served without it. */
export const FIRST_REPORT_WAIT = Duration.seconds(3)

/** How old a report may be and still be served while a fresh one is made; older, a request waits for it. */
export const SNAPSHOT_STALE = Duration.minutes(1)

/**
 * The report served over HTTP (`/status`, the status page): made at most once every SNAPSHOT_TTL
 * however many callers ask, so its cost to the database — a count over every table, each
 * connection's jobs — does not grow with them (16 concurrent callers once slowed webhook
 * acknowledgements 12-fold). A caller is answered from the last report while a fresh one is made
 * in the background (stale-while-revalidate), so its answer does not wait on those queries however
 * many connections there are; only a report older than SNAPSHOT_STALE (nobody asked for a minute)
 * is waited for. The first one is started with the layer. Its plans are remade every PLAN_TTL.
 */
export class StatusSnapshot extends Context.Service<
  StatusSnapshot,
  { readonly current: Effect.Effect<StatusReport, unknown> }
>()("crm-sync/observability/StatusSnapshot") {
  static readonly layer = Layer.effect(
    StatusSnapshot,
    Effect.gen(function* () {
      const config = yield* AppConfig
      const database = yield* DatabaseInfo
      const shared = yield* SqlClient
      const scope = yield* Effect.scope
      // Its queries on a session of their own where the database offers one: with hundreds of
      // connections the pool is busy with their jobs, and the first report waited 0.8 s for it.
      const sql =
        database.dedicated === undefined
          ? shared
          : yield* Effect.catch(database.dedicated("status"), () => Effect.succeed(shared))
      // The plans (one per connection: slow with hundreds) are made in the background every
      // PLAN_TTL; a report made before the first are ready has none, and never waits for them.
      const plans = yield* Effect.cachedWithTTL(planReport(config), PLAN_TTL)
      const latestPlans = yield* Ref.make<ReadonlyArray<ConnectionPlan> | undefined>(undefined)
      const planning = Effect.forkIn(Effect.ignore(Effect.flatMap(plans, (made) => Ref.set(latestPlans, made))), scope)
      yield* planning
      // Single-flight: concurrent callers within SNAPSHOT_TTL share one making of the report.
      const make = yield* Effect.cachedWithTTL(
        Effect.gen(function* () {
          const made = yield* Ref.get(latestPlans)
          if (made !== undefined) yield* planning
          return yield* statusReport(config, database, undefined, made ?? [])
        }).pipe(Effect.provideService(SqlClient, sql)),
        SNAPSHOT_TTL
      )
      const latest = yield* Ref.make<StatusReport | undefined>(undefined)
      // A report is served once its gzipped JSON is ready (made here, off the requests' path).
      const zip = (report: StatusReport) => Effect.ignore(Effect.tryPromise(() => gzipJson(report)))
      const fresh = Effect.tap(make, (report) => Effect.andThen(zip(report), Ref.set(latest, report)))
      const inBackground = Effect.forkIn(Effect.ignore(fresh), scope)
      // The admin routes are served once the first report is made, or FIRST_REPORT_WAIT has passed
      // (a database that does not answer must not keep `/readyz` from saying so): the first
      // `/status` of a daemon starting 500 connections waited 0.6 s for it otherwise.
      const first = yield* inBackground
      yield* Effect.ignore(Effect.timeout(Fiber.await(first), FIRST_REPORT_WAIT))
      const current = Effect.gen(function* () {
        const now = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
        const last = yield* Ref.get(latest)
        const age = last === undefined ? Infinity : now - Date.parse(last.generated_at)
        if (last === undefined || age > Duration.toMillis(SNAPSHOT_STALE)) return yield* fresh
        if (age > Duration.toMillis(SNAPSHOT_TTL)) yield* inBackground
        return last
      })
      return StatusSnapshot.of({ current })
    })
  )
}

/** The query of a request's URL (`?connection=NAME&page=2`). */
export const queryOf = Effect.map(
  HttpServerRequest.HttpServerRequest,
  (request) => new URL(request.url, "http://admin.invalid").searchParams
)

/** 404 for a connection the config does not name. */
export const unknownConnection = (name: string) =>
  HttpServerResponse.text(`no connection named ${name} in this config\n`, { status: 404 })

const gzipAsync = promisify(gzip)

/** The whole report as JSON, written once per report however many callers ask for it (it grows with the connections). */
const written = new WeakMap<StatusReport, string>()
const wholeJson = (report: StatusReport) => {
  const known = written.get(report)
  if (known !== undefined) return known
  const json = JSON.stringify(report)
  written.set(report, json)
  return json
}

/**
 * The whole report's JSON gzipped, once per report, on libuv's thread pool: at 500 connections the
 * JSON is 2.4 MB, and writing it to every caller held the event loop (and `/readyz` behind it) for
 * tens of milliseconds each time; gzipped it is a few percent of that. Level 1: 8 ms for 2.6 MB,
 * 3% of its size (level 6: 20 ms, 2.7%).
 */
const zipped = new WeakMap<StatusReport, Promise<Uint8Array>>()
const gzipJson = (report: StatusReport) => {
  let known = zipped.get(report)
  if (known === undefined) zipped.set(report, (known = gzipAsync(wholeJson(report), { level: 1 })))
  return known
}

/** Whether the caller takes a gzipped body (`Accept-Encoding: gzip`, as browsers, curl --compressed and fetch send). */
const acceptsGzip = Effect.map(HttpServerRequest.HttpServerRequest, (request) =>
  /\bgzip\b/.test(request.headers["accept-encoding"] ?? "")
)

/**
 * `GET /status`: the same report as `crm-sync status --json` (at most SNAPSHOT_TTL old, or being
 * remade), gzipped for callers that accept it; `?connection=NAME` narrows it to that connection
 * (the summary stays whole).
 */
export const StatusRoute = HttpRouter.use(
  Effect.fnUntraced(function* (router) {
    const snapshot = yield* StatusSnapshot
    yield* router.add(
      "GET",
      "/status",
      Effect.gen(function* () {
        const report = yield* snapshot.current
        const name = (yield* queryOf).get("connection")
        if (name === null && (yield* acceptsGzip)) {
          const body = yield* Effect.tryPromise(() => gzipJson(report))
          return HttpServerResponse.uint8Array(body, {
            contentType: "application/json",
            headers: { "content-encoding": "gzip", vary: "accept-encoding" }
          })
        }
        if (name === null) return HttpServerResponse.text(wholeJson(report), { contentType: "application/json" })
        if (!report.config.connections.some((connection) => connection.name === name)) return unknownConnection(name)
        return HttpServerResponse.jsonUnsafe(forConnection(report, name))
      }).pipe(Effect.catch(() => Effect.succeed(HttpServerResponse.text("status unavailable\n", { status: 503 }))))
    )
  })
)
