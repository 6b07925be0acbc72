/**
 * The status page: the `status` report as one server-rendered HTML page that someone who has never
 * seen crm-sync can read in a minute — first the connections' summary (healthy, late, failing,
 * needing re-authorization, not synced yet) and the connections, the unhealthy first, a page of
 * PAGE_SIZE at a time (`?page=N`) or one alone (`?connection=NAME`), then each listed connection's
 * jobs with their last success and whether it is overdue, the
 * warehouse's rows, the rate budget's buckets as bars, the inbox and outbox with the age of their
 * oldest waiting item, what needs a person (dead deliveries, refused writes, connections to
 * re-authorize) with the command that retries it, and the latest job runs. Above them, "at a
 * glance", the charts (Charts.ts, inline SVG): the fullest buckets' requests this window, webhook
 * events per minute with their lag, each resource's freshness and a day of job runs. Times read
 * "3 min ago", the exact time on hover. No script, no build step: it refreshes itself every 15
 * seconds. Everything that comes from the CRM or the database is escaped, since names and error
 * messages are user data.
 */
import * as Effect from "effect/Effect"
import { SqlClient } from "effect/sql/SqlClient"
import { oldestWaitingRow, rowsNeedingAPerson } from "../outbound/Outbox.ts"
import { recentRuns } from "../sync/JobRuns.ts"
import { deadDeliveries, oldestWaitingDelivery } from "../webhooks/WebhookInbox.ts"
import { bucketChart, escapeHtml, eventsChart, freshnessChart, runsChart, timeAgo } from "./Charts.ts"
import type { ConnectionHealth } from "./ConnectionHealth.ts"
import { BUCKETS_CHARTED, type ChartData, fullest } from "./StatusCharts.ts"
import { forConnection, gapLines, refusalLines, type StatusReport } from "./StatusReport.ts"
import { formatDuration } from "../observability/Text.ts"

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
}

/** What the page lists: one connection (`?connection=NAME`), or a page of them (`?page=N`, from 1). */
export interface PageView {
  readonly connection?: string | undefined
  readonly page?: number | undefined
}

/** Connections per page. */
export const PAGE_SIZE = 50
/** Each listed connection's jobs are shown when the page lists at most this many connections. */
const JOBS_SHOWN_UP_TO = 5
/** Alerts and buckets shown before "and N more". */
const ALERTS_SHOWN = 10
const BUCKETS_SHOWN = 20

const iso = (value: Date | string | null | undefined): string | null =>
  value === null || value === undefined ? null : value instanceof Date ? value.toISOString() : String(value)

/** What the page shows beyond the `status` report, read from the same tables (the runs: of `connection`'s jobs, if given). */
export const statusDetails = Effect.fn("StatusPage.details")(function* (connection?: string) {
  const sql = yield* SqlClient
  const [clock] = yield* sql<{ now: Date }>`SELECT now() AS now`
  const inboxWaiting = yield* oldestWaitingDelivery
  const outboxWaiting = yield* oldestWaitingRow
  const dead = yield* deadDeliveries(20)
  const problems = yield* rowsNeedingAPerson(20)
  const runs = yield* recentRuns(15, connection)
  return {
    now: iso(clock!.now)!,
    oldest_inbox_waiting: iso(inboxWaiting),
    oldest_outbox_waiting: iso(outboxWaiting),
    dead: dead.map((row) => ({ ...row, at: iso(row.at)! })),
    outbox_problems: problems.map((row) => ({ ...row, at: iso(row.at)! })),
    runs: runs.map((row) => ({ ...row, started_at: iso(row.started_at)! }))
  } satisfies StatusDetails
})

export { escapeHtml }

const e = (value: string | number | null | undefined) =>
  value === null || value === undefined ? "—" : escapeHtml(String(value))

/** "42 s", "7 min", "3 h 12 min", "2 d 2 h". */
export const age = (seconds: number): string => formatDuration(Math.max(0, seconds) * 1000)

const secondsSince = (now: string, at: string | null) =>
  at === null ? null : (Date.parse(now) - Date.parse(at)) / 1000

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
.summary{font-size:16px;background:#fff;border:1px solid #dde1e8;padding:10px 14px;border-radius:6px;display:inline-block}
.filter{margin:0 0 8px}.filter input{font:inherit;padding:2px 6px}.pager{margin:4px 0 12px}
.alert{background:#fff1f0;border:1px solid #f5c2c0;padding:8px 12px;margin:8px 0;border-radius:6px}
time{text-decoration:underline dotted #8c959f}.charts{display:flex;flex-wrap:wrap;gap:12px}
figure.chart{margin:0 0 12px;background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:8px 10px;width:fit-content;max-width:100%}
figure.chart figcaption{margin:0 0 4px}figure.chart svg{display:block;font:11px system-ui,sans-serif}
svg text{fill:#1d2430}svg text.axis,svg text.muted{fill:#6b7385}svg text.label{font-weight:600}
.legend{white-space:nowrap;margin-left:8px}figure.chart .legend svg{display:inline-block;vertical-align:baseline}`

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

/** At most ALERTS_SHOWN, then how many more (the connections' table lists every one). */
const capped = (lines: ReadonlyArray<string>) =>
  lines.length <= ALERTS_SHOWN
    ? lines
    : [...lines.slice(0, ALERTS_SHOWN), `<p class="muted">and ${lines.length - ALERTS_SHOWN} more like these.</p>`]

/** One alert per connection to re-authorize; with more than a few, one alert naming them all. */
const reauthorizationAlerts = (names: ReadonlyArray<string>) =>
  names.length <= 3
    ? names.map(
        (name) =>
          `<div class="alert">Connection <b>${e(name)}</b> needs re-authorization: run <code>crm-sync connect ${e(name)}</code>.</div>`
      )
    : [
        `<div class="alert"><b>${names.length}</b> connections need re-authorization: run <code>crm-sync connect NAME</code> for each of ${names
          .slice(0, ALERTS_SHOWN)
          .map((name) => e(name))
          .join(", ")}${names.length > ALERTS_SHOWN ? ` and ${names.length - ALERTS_SHOWN} more (below)` : ""}.</div>`
      ]

const alerts = (report: StatusReport) =>
  capped([
    ...reauthorizationAlerts(report.connections_needing_reauthorization),
    ...gapLines(report).map((line) => `<div class="alert">${e(line)}</div>`),
    ...refusalLines(report).map((line) => `<div class="alert">Webhook ${e(line)}.</div>`),
    ...(report.plan ?? [])
      .filter((plan) => !plan.fits)
      .map(
        (plan) =>
          `<div class="alert">Connection <b>${e(plan.connection)}</b>: ${e(plan.warnings.join("; "))} (<code>crm-sync plan</code>).</div>`
      )
  ])

const STATE_LABELS: Record<ConnectionHealth["state"], string> = {
  needs_reauthorization: "needing re-authorization",
  failing: "failing",
  late: "late",
  not_synced: "not synced yet",
  healthy: "healthy"
}

const STATE_CLASSES: Record<ConnectionHealth["state"], string> = {
  needs_reauthorization: "failed",
  failing: "failed",
  late: "late",
  not_synced: "never",
  healthy: "ok"
}

/** The summary reads from the good news to what needs a person. */
const SUMMARY_ORDER: ReadonlyArray<ConnectionHealth["state"]> = [
  "healthy",
  "late",
  "failing",
  "needs_reauthorization",
  "not_synced"
]

/** The counts that lead the page: how many connections are in each state. */
const summaryBlock = (report: StatusReport) =>
  `<p class="summary" id="summary"><b>${report.summary.connections}</b> connection(s): ${SUMMARY_ORDER.map(
    (state) =>
      `<span class="${report.summary[state] > 0 ? STATE_CLASSES[state] : "muted"}"><b>${report.summary[state]}</b> ${STATE_LABELS[state]}</span>`
  ).join(" · ")}</p>`

const connectionLink = (name: string) => `<a href="?connection=${encodeURIComponent(name)}">${e(name)}</a>`

const connectionRows = (list: ReadonlyArray<ConnectionHealth>, now: string) =>
  list.map((health) => {
    const since = secondsSince(now, health.last_success)
    return `<tr><td>${connectionLink(health.connection)}</td><td class="${STATE_CLASSES[health.state]}">${STATE_LABELS[health.state]}</td>
      <td>${health.reasons.map((reason) => e(reason)).join("<br>") || "—"}</td><td class="n">${since === null ? "never" : timeAgo(Date.parse(now), health.last_success)}</td></tr>`
  })

/** "« previous · page 2 of 6 · next »", links where there is somewhere to go. */
const pager = (page: number, pages: number) =>
  pages <= 1
    ? ""
    : `<p class="pager">${page > 1 ? `<a href="?page=${page - 1}">« previous</a>` : "« previous"} · page ${page} of ${pages} · ${
        page < pages ? `<a href="?page=${page + 1}">next »</a>` : "next »"
      }</p>`

const filterForm = (connection: string | undefined) =>
  `<form method="get" class="filter"><label>Connection <input name="connection" value="${e(connection ?? "")}" placeholder="name"></label>
  <button type="submit">Show</button>${connection === undefined ? "" : ` <a href="?">all connections</a>`}</form>`

/** The connections listed: the one asked for, or the page's PAGE_SIZE (worst first, as the report orders them). */
const listed = (report: StatusReport, view: PageView) => {
  if (view.connection !== undefined) {
    return { list: report.connection_health.filter((h) => h.connection === view.connection), page: 1, pages: 1 }
  }
  const pages = Math.max(1, Math.ceil(report.connection_health.length / PAGE_SIZE))
  const page = Math.min(pages, Math.max(1, Math.floor(view.page ?? 1)))
  return { list: report.connection_health.slice((page - 1) * PAGE_SIZE, page * PAGE_SIZE), page, pages }
}

const jobRows = (list: ReadonlyArray<ConnectionHealth>, now: string) =>
  list.flatMap((health) =>
    health.jobs.map(
      (job) => `<tr><td>${e(job.job)}</td><td>${e(health.connection)}</td>
      <td class="n ${job.state}">${timeAgo(Date.parse(now), job.last_success)}</td>
      <td class="n">${age(job.every_seconds)}</td><td class="${job.state}">${job.state}${job.last_error === null ? "" : `: ${e(job.last_error)}`}</td></tr>`
    )
  )

/** The connections' section: the filter, the table, the pager, and the listed connections' jobs when few. */
const connectionsSection = (report: StatusReport, details: StatusDetails, view: PageView) => {
  const { list, page, pages } = listed(report, view)
  const jobs =
    list.length <= JOBS_SHOWN_UP_TO
      ? `<h2>Jobs</h2>\n${table(["job", "connection", "last success", "every", "state"], jobRows(list, details.now), "No scheduled job.")}`
      : `<p class="muted">Pick a connection to see its jobs.</p>`
  return `<h2>Connections</h2>
${filterForm(view.connection)}
${table(["connection", "state", "why", "last success"], connectionRows(list, details.now), view.connection === undefined ? "No connection configured." : `No connection named ${e(view.connection)} in this config.`)}
${pager(page, pages)}
${jobs}`
}

const resourceRows = (report: StatusReport, now: string) =>
  Object.entries(report.resources).map(
    ([
      name,
      resource
    ]) => `<tr><td>${e(name)}</td><td class="n">${resource.rows - resource.deleted}</td><td class="n">${resource.deleted}</td>
      <td class="n">${resource.last_sync === null ? "—" : timeAgo(Date.parse(now), resource.last_sync)}</td><td>${e(resource.cursor)}</td>
      <td class="n">${resource.history?.versions ?? "—"}</td><td class="n">${resource.history?.last_day ?? "—"}</td></tr>`
  )

/** The buckets, or with many the BUCKETS_SHOWN fullest, and a line saying how many are left out. */
const shownBuckets = (report: StatusReport) => ({
  buckets: fullest(report.buckets, BUCKETS_SHOWN),
  note:
    report.buckets.length <= BUCKETS_SHOWN
      ? ""
      : `<p class="muted">The ${BUCKETS_SHOWN} fullest of ${report.buckets.length} buckets; <code>/status</code> has every one.</p>`
})

const bucketRows = (buckets: StatusReport["buckets"], now: number) =>
  buckets.map((bucket) => {
    const share = bucket.limit > 0 ? Math.min(1, bucket.used / bucket.limit) : 0
    const blocked =
      (bucket.blocked_until === null
        ? ""
        : ` <span class="bad">blocked until ${timeAgo(now, bucket.blocked_until)}</span>`) +
      (bucket.learned_limit === null
        ? ""
        : ` <span class="warn">learned ceiling ${e(bucket.learned_limit)}: other consumers use the rest</span>`)
    return `<tr><td>${e(bucket.bucket)}</td><td>${e(bucket.scope)}</td>
      <td><span class="bar" title="${e(bucket.used)} of ${e(bucket.limit)}"><span class="${share >= 0.9 ? "hot" : ""}" style="width:${Math.round(share * 100)}%"></span></span>
      ${bucket.used} / ${bucket.limit}${blocked}</td><td>${bucket.resets_at === null ? "—" : timeAgo(now, bucket.resets_at)}</td></tr>`
  })

/** The charts, the operator's first look: budget, events, freshness, runs. */
const glance = (report: StatusReport, charts: ChartData | undefined) => {
  if (charts === undefined) return ""
  const more =
    report.buckets.length > BUCKETS_CHARTED
      ? `<p class="muted">The ${BUCKETS_CHARTED} fullest of ${report.buckets.length} buckets.</p>`
      : ""
  const budget =
    charts.buckets.length === 0
      ? `<p class="muted">Rate budget: no request sent yet.</p>`
      : `<div class="charts">${charts.buckets.map((bucket) => bucketChart(bucket, charts.now)).join("")}</div>${more}`
  return `<section id="glance"><h2>At a glance</h2>
<p class="muted">Requests per minute are each finished job run's requests spread over the minutes it ran; the budget's own count (◆) also holds running jobs, webhook reads and writes.</p>
${budget}
${eventsChart(charts.events, charts.now)}
${freshnessChart(charts.freshness, charts.now)}
${runsChart(charts.runs, charts.now)}</section>`
}

/** The whole page; `charts`: the snapshot's charts, drawn at the top when there are any. */
export const renderStatusPage = (
  report: StatusReport,
  details: StatusDetails,
  view: PageView = {},
  charts?: ChartData
): string => {
  const now = Date.parse(details.now)
  const waiting = (at: string | null) => (at === null ? "" : ` — the oldest waiting arrived ${timeAgo(now, at)}`)
  const budget = shownBuckets(report)
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="15">
<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,"><title>crm-sync status</title><style>${STYLE}</style></head>
<body>
<h1>crm-sync</h1>
<p class="muted">database ${e(report.database.kind)} · as of ${e(details.now)} · refreshes every 15 s</p>
${summaryBlock(report)}
${alerts(view.connection === undefined ? report : forConnection(report, view.connection)).join("\n")}
${glance(report, charts)}
${connectionsSection(report, details, view)}
<h2>Warehouse</h2>
${table(["resource", "rows", "deleted", "last write", "cursor", "versions", "versions/day"], resourceRows(report, details.now), "No tables.")}
<h2>Rate budget</h2>
${table(["bucket", "scope", "used this window", "resets"], bucketRows(budget.buckets, now), "No request sent yet.")}
${budget.note}
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
<h2>Latest runs${view.connection === undefined ? "" : ` of ${e(view.connection)}`}</h2>
${table(
  ["job", "connection", "started", "took", "outcome"],
  details.runs.map(
    (run) => `<tr><td>${e(run.job)}</td><td>${e(run.connection)}</td><td>${timeAgo(now, run.started_at)}</td>
      <td class="n">${run.seconds === null ? "running" : age(run.seconds)}</td>
      <td class="${run.status === "failed" ? "failed" : run.status === "succeeded" ? "ok" : ""}">${e(run.status)}${run.error === null ? "" : `: ${e(run.error)}`}</td></tr>`
  ),
  "No runs yet."
)}
</body></html>`
}
