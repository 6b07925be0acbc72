/**
 * The status page: the `status` report as one server-rendered HTML page that someone who has never
 * seen crm-sync can read in a minute — each job's last success and whether it is overdue, the
 * warehouse's rows, the rate budget's buckets as bars, the inbox and outbox with the age of their
 * oldest waiting item, what needs a person (dead deliveries, refused writes, connections to
 * re-authorize) with the command that retries it, and the latest job runs. No script, no build
 * step: it refreshes itself every 15 seconds. Everything that comes from the CRM or the database
 * is escaped, since names and error messages are user data.
 */
import * as Effect from "effect/Effect"
import { SqlClient } from "effect/sql/SqlClient"
import { oldestWaitingRow, rowsNeedingAPerson } from "../outbound/Outbox.ts"
import { jobHealth, recentRuns } from "../sync/JobRuns.ts"
import { deadDeliveries, oldestWaitingDelivery } from "../webhooks/WebhookInbox.ts"
import { gapLines, refusalLines, type StatusReport } from "./StatusReport.ts"
import { formatDuration } from "./Text.ts"

export interface JobHealth {
  readonly job: string
  readonly connection: string | null
  readonly last_success: string | null
  readonly last_status: string
  /** How often the job is meant to run, when it runs on an interval. */
  readonly every_seconds: number | null
}

export interface StatusDetails {
  readonly now: string
  readonly oldest_inbox_waiting: string | null
  readonly oldest_outbox_waiting: string | null
  readonly dead: ReadonlyArray<{
    hook_id: string
    endpoint: string
    event_type: string | null
    error: string | null
    at: string
  }>
  readonly outbox_problems: ReadonlyArray<{
    id: string
    operation: string
    /** The record the row would create, as a person knows it (its name or title), if it has one. */
    record: string | null
    status: string
    error: string | null
    at: string
  }>
  readonly runs: ReadonlyArray<{
    job: string
    connection: string | null
    status: string
    started_at: string
    seconds: number | null
    error: string | null
  }>
  readonly jobs: ReadonlyArray<JobHealth>
}

const iso = (value: Date | string | null | undefined): string | null =>
  value === null || value === undefined ? null : value instanceof Date ? value.toISOString() : String(value)

/** What the page shows beyond the `status` report, read from the same tables. */
export const statusDetails = Effect.fn("StatusPage.details")(function* (intervals: Readonly<Record<string, number>>) {
  const sql = yield* SqlClient
  const [clock] = yield* sql<{ now: Date }>`SELECT now() AS now`
  const inboxWaiting = yield* oldestWaitingDelivery
  const outboxWaiting = yield* oldestWaitingRow
  const dead = yield* deadDeliveries(20)
  const problems = yield* rowsNeedingAPerson(20)
  const runs = yield* recentRuns(15)
  const jobs = yield* jobHealth
  return {
    now: iso(clock!.now)!,
    oldest_inbox_waiting: iso(inboxWaiting),
    oldest_outbox_waiting: iso(outboxWaiting),
    dead: dead.map((row) => ({ ...row, at: iso(row.at)! })),
    outbox_problems: problems.map((row) => ({ ...row, at: iso(row.at)! })),
    runs: runs.map((row) => ({ ...row, started_at: iso(row.started_at)! })),
    jobs: jobs.map((row) => ({
      ...row,
      last_success: iso(row.last_success),
      every_seconds: intervals[row.job] ?? intervals[row.job.split(":")[0] === "crawl" ? "crawl" : row.job] ?? null
    }))
  } satisfies StatusDetails
})

/** Text safe inside HTML elements and attribute values. */
export const escapeHtml = (text: string): string => text.replace(/[&<>"']/g, (char) => `&#${char.charCodeAt(0)};`)

const e = (value: string | number | null | undefined) =>
  value === null || value === undefined ? "—" : escapeHtml(String(value))

/** "42 s", "7 min", "3 h 12 min", "2 d 2 h". */
export const age = (seconds: number): string => formatDuration(Math.max(0, seconds) * 1000)

const secondsSince = (now: string, at: string | null) =>
  at === null ? null : (Date.parse(now) - Date.parse(at)) / 1000

/** A job is late when its last success is older than twice its interval (one missed turn is slack). */
const jobState = (job: JobHealth, now: string): "ok" | "late" | "failed" | "never" => {
  if (job.last_status === "failed") return "failed"
  const since = secondsSince(now, job.last_success)
  if (since === null) return "never"
  return job.every_seconds !== null && since > 2 * job.every_seconds ? "late" : "ok"
}

const STYLE = `
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d2430;background:#f7f8fa}
h1{font-size:20px;margin:0 0 4px}h2{font-size:15px;margin:28px 0 8px;text-transform:uppercase;letter-spacing:.04em;color:#4a5466}
table{border-collapse:collapse;background:#fff;border:1px solid #dde1e8;min-width:50%;margin-bottom:12px}
th,td{padding:5px 10px;border-bottom:1px solid #eceef2;text-align:left;vertical-align:top}
th{background:#f0f2f5;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#1a7f37}.late,.never,.warn{color:#9a6700;font-weight:600}.failed,.bad{color:#cf222e;font-weight:600}
.bar{width:220px;height:12px;background:#eceef2;border-radius:6px;overflow:hidden;display:inline-block;vertical-align:middle}
.bar span{display:block;height:100%;background:#2f81f7}.bar span.hot{background:#cf222e}
code{background:#eceef2;padding:1px 4px;border-radius:4px}.muted{color:#6b7385}
.alert{background:#fff1f0;border:1px solid #f5c2c0;padding:8px 12px;margin:8px 0;border-radius:6px}`

const table = (head: ReadonlyArray<string>, rows: ReadonlyArray<string>, empty: string) =>
  rows.length === 0
    ? `<p class="muted">${empty}</p>`
    : `<table><tr>${head.map((cell) => `<th>${cell}</th>`).join("")}</tr>${rows.join("")}</table>`

const byStatus = (counts: Record<string, number>) =>
  Object.keys(counts).length === 0
    ? "empty"
    : Object.entries(counts)
        .map(([status, n]) => `${e(status)} <b>${n}</b>`)
        .join(", ")

const alerts = (report: StatusReport) => [
  ...report.connections_needing_reauthorization.map(
    (name) =>
      `<div class="alert">Connection <b>${e(name)}</b> needs re-authorization: run <code>crm-sync connect ${e(name)}</code>.</div>`
  ),
  ...gapLines(report).map((line) => `<div class="alert">${e(line)}</div>`),
  ...refusalLines(report).map((line) => `<div class="alert">Webhook ${e(line)}.</div>`),
  ...(report.plan ?? [])
    .filter((plan) => !plan.fits)
    .map(
      (plan) =>
        `<div class="alert">Connection <b>${e(plan.connection)}</b>: ${e(plan.warnings.join("; "))} (<code>crm-sync plan</code>).</div>`
    )
]

const jobRows = (details: StatusDetails) =>
  details.jobs.map((job) => {
    const state = jobState(job, details.now)
    const since = secondsSince(details.now, job.last_success)
    return `<tr><td>${e(job.job)}</td><td>${e(job.connection)}</td><td>${e(job.last_success)}</td>
      <td class="n ${state}">${since === null ? "never" : age(since)}</td>
      <td class="n">${job.every_seconds === null ? "—" : age(job.every_seconds)}</td><td class="${state}">${state}</td></tr>`
  })

const resourceRows = (report: StatusReport, now: string) =>
  Object.entries(report.resources).map(([name, resource]) => {
    const since = secondsSince(now, resource.last_sync)
    return `<tr><td>${e(name)}</td><td class="n">${resource.rows - resource.deleted}</td><td class="n">${resource.deleted}</td>
      <td>${e(resource.last_sync)}</td><td class="n">${since === null ? "—" : age(since)}</td><td>${e(resource.cursor)}</td></tr>`
  })

const bucketRows = (report: StatusReport) =>
  report.buckets.map((bucket) => {
    const share = bucket.limit > 0 ? Math.min(1, bucket.used / bucket.limit) : 0
    const blocked =
      (bucket.blocked_until === null ? "" : ` <span class="bad">blocked until ${e(bucket.blocked_until)}</span>`) +
      (bucket.learned_limit === null
        ? ""
        : ` <span class="warn">learned ceiling ${e(bucket.learned_limit)}: other consumers use the rest</span>`)
    return `<tr><td>${e(bucket.bucket)}</td><td>${e(bucket.scope)}</td>
      <td><span class="bar" title="${e(bucket.used)} of ${e(bucket.limit)}"><span class="${share >= 0.9 ? "hot" : ""}" style="width:${Math.round(share * 100)}%"></span></span>
      ${bucket.used} / ${bucket.limit}${blocked}</td><td>${e(bucket.resets_at)}</td></tr>`
  })

/** The whole page. */
export const renderStatusPage = (report: StatusReport, details: StatusDetails): string => {
  const waiting = (at: string | null) => (at === null ? "" : ` — oldest waiting ${age(secondsSince(details.now, at)!)}`)
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="15">
<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,"><title>crm-sync status</title><style>${STYLE}</style></head>
<body>
<h1>crm-sync</h1>
<p class="muted">${e(report.config.connections.length)} connection(s): ${report.config.connections.map((c) => `${e(c.name)} (${e(c.credential)})`).join(", ") || "none"}
· database ${e(report.database.kind)} · as of ${e(details.now)} · refreshes every 15 s</p>
${alerts(report).join("\n")}
<h2>Jobs</h2>
${table(["job", "connection", "last success", "age", "every", "state"], jobRows(details), "No job has run yet.")}
<h2>Warehouse</h2>
${table(["resource", "rows", "deleted", "last write", "age", "cursor"], resourceRows(report, details.now), "No tables.")}
<h2>Rate budget</h2>
${table(["bucket", "scope", "used this window", "resets"], bucketRows(report), "No request sent yet.")}
<h2>Inbox and outbox</h2>
<p>Webhook inbox: ${byStatus(report.inbox)}${waiting(details.oldest_inbox_waiting)}</p>
<p>Outbox: ${byStatus(report.outbox)}${waiting(details.oldest_outbox_waiting)}</p>
<h2>Needs a person</h2>
${table(
  ["delivery", "endpoint", "event", "why", "retry with"],
  details.dead.map(
    (
      row
    ) => `<tr><td>${e(row.hook_id)}</td><td>${e(row.endpoint)}</td><td>${e(row.event_type)}</td><td>${e(row.error)}</td>
      <td><code>crm-sync webhooks replay ${e(row.hook_id)}</code></td></tr>`
  ),
  "No dead deliveries."
)}
${table(
  ["outbox row", "operation", "record", "status", "why", "retry with"],
  details.outbox_problems.map(
    (
      row
    ) => `<tr><td>${e(row.id)}</td><td>${e(row.operation)}</td><td>${e(row.record)}</td><td class="bad">${e(row.status)}</td><td>${e(row.error)}</td>
      <td><code>crm-sync outbox retry ${e(row.id)}</code></td></tr>`
  ),
  "No refused or failed writes."
)}
<h2>Latest runs</h2>
${table(
  ["job", "connection", "started", "took", "outcome"],
  details.runs.map(
    (run) => `<tr><td>${e(run.job)}</td><td>${e(run.connection)}</td><td>${e(run.started_at)}</td>
      <td class="n">${run.seconds === null ? "running" : age(run.seconds)}</td>
      <td class="${run.status === "failed" ? "failed" : run.status === "succeeded" ? "ok" : ""}">${e(run.status)}${run.error === null ? "" : `: ${e(run.error)}`}</td></tr>`
  ),
  "No runs yet."
)}
</body></html>`
}
