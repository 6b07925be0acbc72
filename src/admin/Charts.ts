/**
 * The status page's charts, drawn as inline SVG by pure functions from data to markup (no script,
 * no library): the rate budget's requests per minute in the current window against its limit and
 * learned ceiling, webhook events received and applied per minute with their processing lag, each
 * resource's freshness against its schedule, and a day of job runs as ticks. Every colour has a
 * shape or a word beside it (a dashed line, a tick's height, "late"), so the charts read in grey
 * too; every time is "3 min ago" with the exact time on hover. Names are escaped: they are data.
 */
import { formatDuration } from "../observability/Text.ts"

/** Text safe inside HTML and SVG elements and attribute values. */
export const escapeHtml = (text: string): string => text.replace(/[&<>"']/g, (char) => `&#${char.charCodeAt(0)};`)

const e = escapeHtml
const MINUTE = 60_000

/** One bucket's current window: requests per minute since the window's start (index 0 is its first minute). */
export interface BucketSeries {
  readonly bucket: string
  readonly scope: string
  readonly limit: number
  readonly learned_limit: number | null
  /** The window's count as the budget keeps it. */
  readonly used: number
  /** The window's start (epoch ms) and length. */
  readonly start: number
  readonly window_ms: number
  readonly per_minute: ReadonlyArray<number>
}

/** Webhook events per minute over the last hour (index 0 is the minute starting at `start`, epoch ms). */
export interface EventSeries {
  readonly start: number
  readonly received: ReadonlyArray<number>
  readonly applied: ReadonlyArray<number>
  /** The longest time from receipt to applied (seconds) of the events applied in each minute. */
  readonly max_lag: ReadonlyArray<number | null>
}

export interface ResourceFreshness {
  readonly resource: string
  readonly rows: number
  /** When the newest row was written. */
  readonly newest_row: string | null
  /** When the job that reads it on a schedule last succeeded (for every connection); null: none does, or never. */
  readonly last_read: string | null
  readonly every_seconds: number | null
  readonly job: string | null
}

export interface RunSlot {
  /** The slot's index from `RunStrips.start`. */
  readonly slot: number
  readonly succeeded: number
  readonly failed: number
  readonly interrupted: number
  readonly running: number
}

export interface RunStrips {
  readonly start: number
  readonly slot_ms: number
  readonly slots: number
  readonly jobs: ReadonlyArray<{ readonly job: string; readonly slots: ReadonlyArray<RunSlot> }>
}

const isoOf = (ms: number) => new Date(ms).toISOString()
const clock = (ms: number) => isoOf(ms).slice(11, 16)
const n = (value: number) => Math.round(value).toLocaleString("en-US")
const px = (value: number) => String(Math.round(value * 10) / 10)
/** A lag in seconds: tenths below ten seconds (a processing lag is often under one). */
const lagWords = (seconds: number) =>
  seconds < 0.05 ? "< 0.1 s" : seconds < 10 ? `${seconds.toFixed(1)} s` : formatDuration(seconds * 1000)

/** "3 min ago" (or "in 18 min") at `now` (epoch ms), with the exact time on hover; "never" for none. */
export const timeAgo = (now: number, at: string | null): string => {
  if (at === null) return "never"
  const ms = Date.parse(at)
  const words = ms > now ? `in ${formatDuration(ms - now)}` : `${formatDuration(now - ms)} ago`
  return `<time datetime="${e(at)}" title="${e(at)}">${words}</time>`
}

/** The same as text, for SVG labels (hover shows the `<title>` of the element around). */
const ago = (now: number, ms: number) =>
  ms > now ? `in ${formatDuration(ms - now)}` : `${formatDuration(now - ms)} ago`

const svg = (width: number, height: number, label: string, body: string) =>
  `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img" aria-label="${e(label)}" style="max-width:100%;height:auto">` +
  `<title>${e(label)}</title>${body}</svg>`

const text = (x: number, y: number, content: string, attributes = "") =>
  `<text x="${px(x)}" y="${px(y)}"${attributes === "" ? "" : ` ${attributes}`}>${content}</text>`

const figure = (kind: string, caption: string, body: string, data = "") =>
  `<figure class="chart chart-${kind}"${data}><figcaption>${caption}</figcaption>${body}</figure>`

/** A round number at or above `value`: 1, 2 or 5 times a power of ten. */
const roundUp = (value: number) => {
  if (value <= 10) return 10
  const power = 10 ** Math.floor(Math.log10(value))
  return ([1, 2, 5, 10].map((step) => step * power).find((step) => step >= value) ?? 10 * power) as number
}

/**
 * A bucket's window: for each minute so far, a bar as high as the requests sent by its end, its
 * top (that minute's requests) darker; the limit as a solid line, the learned ceiling as a dashed
 * one, and the budget's own count (◆) at now. Far below its limit, the scale zooms in and says so.
 */
export const bucketChart = (series: BucketSeries, now: number): string => {
  const [W, H, left, right, top, bottom] = [372, 150, 46, 12, 16, 30]
  const plotW = W - left - right
  const plotH = H - top - bottom
  const minutes = Math.max(1, Math.ceil(series.window_ms / MINUTE))
  const nowIndex = Math.min(minutes - 1, Math.max(0, Math.floor((now - series.start) / MINUTE)))
  const running: Array<number> = []
  let total = 0
  for (let minute = 0; minute <= nowIndex; minute++) {
    total += series.per_minute[minute] ?? 0
    running.push(total)
  }
  const highest = Math.max(total, series.used)
  const ceiling = series.learned_limit ?? series.limit
  const zoomed = highest * 4 < series.limit
  const max = zoomed ? roundUp(highest * 1.25) : Math.max(series.limit, highest)
  const y = (value: number) => top + plotH - (Math.min(value, max) / max) * plotH
  const x = (minute: number) => left + (minute / minutes) * plotW
  const barW = Math.max(1, plotW / minutes - 1)
  const parts: Array<string> = []
  parts.push(
    `<rect x="${left}" y="${top}" width="${plotW}" height="${plotH}" fill="#fff" stroke="#dde1e8"/>`,
    text(left - 4, top + 4, n(max), 'text-anchor="end" class="axis"'),
    text(left - 4, top + plotH, "0", 'text-anchor="end" class="axis"')
  )
  running.forEach((sum, minute) => {
    const sent = series.per_minute[minute] ?? 0
    if (sum === 0) return
    const at = series.start + minute * MINUTE
    const before = sum - sent
    const label = `${clock(at)}–${clock(at + MINUTE)} UTC (${ago(now, at)}): ${n(sent)} requests this minute, ${n(sum)} so far in the window`
    parts.push(
      `<g><title>${e(label)}</title>` +
        (before > 0
          ? `<rect class="earlier" x="${px(x(minute))}" y="${px(y(before))}" width="${px(barW)}" height="${px(y(0) - y(before))}" fill="#b6d4fe"/>`
          : "") +
        (sent > 0
          ? `<rect class="req" x="${px(x(minute))}" y="${px(y(sum))}" width="${px(barW)}" height="${px(Math.max(1, y(before) - y(sum)))}" fill="#2f81f7"/>`
          : "") +
        `</g>`
    )
  })
  const line = (value: number, kind: string, label: string, dashed: boolean, colour: string) =>
    `<line class="${kind}" x1="${left}" x2="${left + plotW}" y1="${px(y(value))}" y2="${px(y(value))}" stroke="${colour}" stroke-width="1.5"${dashed ? ' stroke-dasharray="6 4"' : ""}/>` +
    text(left + plotW - 4, y(value) - 3, e(label), `text-anchor="end" class="label" fill="${colour}"`)
  const offScale: Array<string> = []
  if (series.limit <= max) parts.push(line(series.limit, "limit", `limit ${n(series.limit)}`, false, "#cf222e"))
  else offScale.push(`limit ${n(series.limit)} above the scale`)
  if (series.learned_limit !== null) {
    if (series.learned_limit <= max) {
      parts.push(line(series.learned_limit, "learned", `learned ceiling ${n(series.learned_limit)}`, true, "#9a6700"))
    } else offScale.push(`learned ceiling ${n(series.learned_limit)} above the scale`)
  }
  const nowX = x(nowIndex) + barW / 2
  parts.push(
    `<g class="counted"><title>${e(`the budget counted ${n(series.used)} requests in this window`)}</title>` +
      `<path d="M${px(nowX)} ${px(y(series.used) - 5)}l5 5l-5 5l-5 -5z" fill="#1d2430"/></g>`,
    text(left + 4, top + 12, e([`◆ ${n(series.used)} counted`, ...offScale].join(" · ")), 'class="label"'),
    text(left, H - bottom + 14, e(`began ${ago(now, series.start)}`), 'class="axis"'),
    text(
      left + plotW,
      H - bottom + 14,
      e(`resets ${ago(now, series.start + series.window_ms)}`),
      'text-anchor="end" class="axis"'
    )
  )
  if (total === 0 && series.used === 0) {
    parts.push(
      text(left + plotW / 2, top + plotH / 2, "no request in this window", 'text-anchor="middle" class="muted"')
    )
  }
  const share = ceiling > 0 ? series.used / ceiling : 0
  const caption = `<b>${e(series.bucket)}</b> <span class="muted">${e(series.scope)}</span> · ${n(series.used)} of ${n(ceiling)}${series.learned_limit === null ? "" : " (learned)"} · <span class="${share >= 0.9 ? "bad" : share >= 0.7 ? "warn" : "ok"}">${Math.round(share * 100)}%</span>`
  return figure(
    "budget",
    caption,
    svg(W, H, `${series.bucket}: requests per minute in this window against its limit`, parts.join("")),
    ` data-bucket="${e(series.bucket)}"`
  )
}

/**
 * The last hour of webhook events, a column per minute: received as an outlined bar, applied as a
 * filled one inside it; below, the longest processing lag of the events applied in each minute.
 */
export const eventsChart = (series: EventSeries, now: number): string => {
  const [W, H, left, right] = [720, 200, 46, 12]
  const [countTop, countH, lagTop, lagH] = [22, 88, 136, 40]
  const plotW = W - left - right
  const minutes = 60
  const colW = plotW / minutes
  const x = (minute: number) => left + minute * colW
  const received = series.received.reduce((sum, value) => sum + value, 0)
  const applied = series.applied.reduce((sum, value) => sum + value, 0)
  const lags = series.max_lag.flatMap((value) => (value === null ? [] : [value]))
  const maxLag = lags.length === 0 ? 0 : Math.max(...lags)
  const maxCount = roundUp(Math.max(1, ...series.received, ...series.applied))
  const yCount = (value: number) => countTop + countH - (value / maxCount) * countH
  const lagScale = Math.max(1, maxLag)
  const yLag = (value: number) => lagTop + lagH - (value / lagScale) * lagH
  const parts: Array<string> = [
    `<rect x="${left}" y="${countTop}" width="${plotW}" height="${countH}" fill="#fff" stroke="#dde1e8"/>`,
    `<rect x="${left}" y="${lagTop}" width="${plotW}" height="${lagH}" fill="#fff" stroke="#dde1e8"/>`,
    text(left - 4, countTop + 4, n(maxCount), 'text-anchor="end" class="axis"'),
    text(left - 4, countTop + countH, "0", 'text-anchor="end" class="axis"'),
    text(left - 4, lagTop + 4, e(lagWords(lagScale)), 'text-anchor="end" class="axis"'),
    text(left - 4, lagTop + lagH, "0", 'text-anchor="end" class="axis"'),
    text(left, 14, e(`▭ received ${n(received)} · ▮ applied ${n(applied)} per minute, last hour`), 'class="label"'),
    text(
      left,
      lagTop - 6,
      e(lags.length === 0 ? "lag: nothing applied" : `— max lag ${lagWords(maxLag)} (receipt to applied)`),
      'class="label"'
    ),
    text(left, H - 8, "60 min ago", 'class="axis"'),
    text(left + plotW / 2, H - 8, "30 min ago", 'text-anchor="middle" class="axis"'),
    text(left + plotW, H - 8, "now", 'text-anchor="end" class="axis"')
  ]
  for (let minute = 0; minute < minutes; minute++) {
    const got = series.received[minute] ?? 0
    const done = series.applied[minute] ?? 0
    if (got === 0 && done === 0) continue
    const at = series.start + minute * MINUTE
    const lag = series.max_lag[minute] ?? null
    const label = `${clock(at)} UTC (${ago(now, at)}): ${n(got)} received, ${n(done)} applied${lag === null ? "" : `, max lag ${lagWords(lag)}`}`
    parts.push(
      `<g><title>${e(label)}</title>` +
        (got > 0
          ? `<rect class="received" x="${px(x(minute) + 0.5)}" y="${px(yCount(got))}" width="${px(colW - 1)}" height="${px(yCount(0) - yCount(got))}" fill="none" stroke="#57606a"/>`
          : "") +
        (done > 0
          ? `<rect class="applied" x="${px(x(minute) + colW * 0.25)}" y="${px(yCount(done))}" width="${px(colW * 0.5)}" height="${px(yCount(0) - yCount(done))}" fill="#2f81f7"/>`
          : "") +
        `</g>`
    )
  }
  const points = series.max_lag.flatMap((lag, minute) =>
    lag === null || minute >= minutes ? [] : [[x(minute) + colW / 2, yLag(lag)] as const]
  )
  if (points.length > 0) {
    parts.push(
      `<polyline class="lag" points="${points.map(([px1, py]) => `${px(px1)},${px(py)}`).join(" ")}" fill="none" stroke="#8250df" stroke-width="1.5"/>`,
      ...points.map(([cx, cy]) => `<circle cx="${px(cx)}" cy="${px(cy)}" r="2" fill="#8250df"/>`)
    )
  }
  if (received === 0 && applied === 0) {
    parts.push(
      text(
        left + plotW / 2,
        countTop + countH / 2,
        "no event received or applied in the last hour",
        'text-anchor="middle" class="muted"'
      )
    )
  }
  return figure(
    "events",
    `<b>Webhook events</b> · ${n(received)} received, ${n(applied)} applied in the last hour`,
    svg(W, H, "webhook events received and applied per minute, and their processing lag", parts.join(""))
  )
}

type Freshness = "ok" | "due" | "late"

const FRESHNESS: Record<Freshness, { readonly colour: string; readonly mark: string }> = {
  ok: { colour: "#1a7f37", mark: "●" },
  due: { colour: "#bf8700", mark: "▲" },
  late: { colour: "#cf222e", mark: "✕" }
}

/** How many schedule intervals the bar's track spans. */
const TRACK_INTERVALS = 3

/**
 * A row per resource: how long since it was last known current (the later of its newest row and
 * its scheduled read's last success) against its schedule, on a track three intervals long marked
 * at one ("due") and two ("late", as the connections' health counts it). A resource only events
 * bring has no schedule: its newest row's age is told in words.
 */
export const freshnessChart = (resources: ReadonlyArray<ResourceFreshness>, now: number): string => {
  const [W, rowH, top, labelW, trackW] = [1000, 22, 20, 170, 280]
  const trackX = labelW
  const textX = trackX + trackW + 12
  const H = top + resources.length * rowH + 6
  const parts: Array<string> = [
    text(trackX + trackW / TRACK_INTERVALS, 12, "due", 'text-anchor="middle" class="axis"'),
    text(trackX + (2 * trackW) / TRACK_INTERVALS, 12, "late", 'text-anchor="middle" class="axis"')
  ]
  resources.forEach((resource, index) => {
    const rowY = top + index * rowH
    const mid = rowY + rowH / 2
    const newest = resource.newest_row === null ? null : Date.parse(resource.newest_row)
    const read = resource.last_read === null ? null : Date.parse(resource.last_read)
    const current = Math.max(newest ?? -Infinity, read ?? -Infinity)
    parts.push(text(trackX - 10, mid + 4, e(resource.resource), 'text-anchor="end"'))
    const newestWords = newest === null ? "no rows yet" : `newest row ${ago(now, newest)}`
    if (resource.every_seconds === null || resource.job === null || !Number.isFinite(current)) {
      const why = resource.job === null ? "on events" : `${resource.job} never succeeded`
      parts.push(
        `<line x1="${trackX}" x2="${trackX + trackW}" y1="${mid}" y2="${mid}" stroke="#d0d7de" stroke-dasharray="2 3"/>`,
        text(textX, mid + 4, e(`○ ${why} · ${newestWords}`), 'class="muted"')
      )
      return
    }
    const age = Math.max(0, (now - current) / 1000)
    const intervals = age / resource.every_seconds
    const state: Freshness = intervals > 2 ? "late" : intervals > 1 ? "due" : "ok"
    const style = FRESHNESS[state]
    const width = Math.max(2, (Math.min(intervals, TRACK_INTERVALS) / TRACK_INTERVALS) * trackW)
    const words = `${style.mark} ${state} · read ${formatDuration(age * 1000)} ago by ${resource.job} · every ${formatDuration(resource.every_seconds * 1000)} · ${newestWords}`
    parts.push(
      `<g><title>${e(`${resource.resource}: current as of ${isoOf(current)}`)}</title>` +
        `<rect x="${trackX}" y="${rowY + 5}" width="${trackW}" height="${rowH - 10}" fill="#eceef2"/>` +
        `<rect class="fresh fresh-${state}" x="${trackX}" y="${rowY + 5}" width="${px(width)}" height="${rowH - 10}" fill="${style.colour}"/></g>`,
      text(textX, mid + 4, e(words), `fill="${state === "ok" ? "#1d2430" : style.colour}"`)
    )
  })
  for (const mark of [1, 2]) {
    const markX = trackX + (mark * trackW) / TRACK_INTERVALS
    parts.push(
      `<line x1="${px(markX)}" x2="${px(markX)}" y1="${top - 4}" y2="${H - 4}" stroke="#57606a" stroke-dasharray="3 3"/>`
    )
  }
  return figure(
    "freshness",
    `<b>Freshness</b> · each resource against its schedule`,
    svg(W, H, "each resource's freshness against its schedule", parts.join(""))
  )
}

type Outcome = "failed" | "interrupted" | "running" | "succeeded"

/** Worst first; a tick's height says which as well as its colour. */
const OUTCOMES: ReadonlyArray<{ readonly outcome: Outcome; readonly colour: string; readonly height: number }> = [
  { outcome: "failed", colour: "#cf222e", height: 20 },
  { outcome: "interrupted", colour: "#bf8700", height: 15 },
  { outcome: "running", colour: "#2f81f7", height: 11 },
  { outcome: "succeeded", colour: "#1a7f37", height: 7 }
]

const outcomeWords = (slot: RunSlot) =>
  (["succeeded", "failed", "interrupted", "running"] as const)
    .filter((outcome) => slot[outcome] > 0)
    .map((outcome) => `${slot[outcome]} ${outcome}`)
    .join(", ")

/**
 * A strip per job over the last day, a tick per slot that had runs: coloured and sized by its
 * worst outcome (a failure is the tallest, a success the shortest), the counts on hover and, per
 * job, in words.
 */
export const runsChart = (strips: RunStrips, now: number): string => {
  const [labelW, slotW, countsW, rowH, top] = [200, 5, 170, 26, 8]
  const stripW = strips.slots * slotW
  const W = labelW + stripW + countsW
  const H = top + Math.max(1, strips.jobs.length) * rowH + 26
  const parts: Array<string> = []
  strips.jobs.forEach((strip, index) => {
    const baseY = top + (index + 1) * rowH - 4
    parts.push(
      text(labelW - 10, baseY - 3, e(strip.job), 'text-anchor="end"'),
      `<line x1="${labelW}" x2="${labelW + stripW}" y1="${baseY}" y2="${baseY}" stroke="#d0d7de"/>`
    )
    let runs = 0
    let failed = 0
    for (const slot of strip.slots) {
      runs += slot.succeeded + slot.failed + slot.interrupted + slot.running
      failed += slot.failed
      const worst = OUTCOMES.find((kind) => slot[kind.outcome] > 0)
      if (worst === undefined || slot.slot < 0 || slot.slot >= strips.slots) continue
      const at = strips.start + slot.slot * strips.slot_ms
      const label = `${strip.job}, ${clock(at)}–${clock(at + strips.slot_ms)} UTC (${ago(now, at)}): ${outcomeWords(slot)}`
      const fill = worst.outcome === "running" ? `fill="#fff" stroke="${worst.colour}"` : `fill="${worst.colour}"`
      parts.push(
        `<rect class="tick tick-${worst.outcome}" x="${labelW + slot.slot * slotW + 0.5}" y="${baseY - worst.height}" width="${slotW - 1.5}" height="${worst.height}" ${fill}><title>${e(label)}</title></rect>`
      )
    }
    parts.push(
      text(
        labelW + stripW + 10,
        baseY - 3,
        e(`${runs} ${runs === 1 ? "run" : "runs"}${failed > 0 ? `, ${failed} failed` : ""}`),
        failed > 0 ? 'class="label" fill="#cf222e"' : 'class="label"'
      )
    )
  })
  if (strips.jobs.length === 0) {
    parts.push(
      text(labelW + stripW / 2, top + rowH / 2 + 4, "no job ran in the last 24 h", 'text-anchor="middle" class="muted"')
    )
  }
  const axisY = H - 8
  const hours = (strips.slots * strips.slot_ms) / 3_600_000
  for (const fraction of [0, 0.25, 0.5, 0.75, 1]) {
    const label = fraction === 1 ? "now" : `${Math.round(hours * (1 - fraction))} h ago`
    const anchor = fraction === 0 ? "start" : fraction === 1 ? "end" : "middle"
    parts.push(text(labelW + fraction * stripW, axisY, label, `text-anchor="${anchor}" class="axis"`))
  }
  const legend = OUTCOMES.map(
    (kind) =>
      `<span class="legend"><svg width="8" height="${kind.height}" aria-hidden="true"><rect width="8" height="${kind.height}" ${kind.outcome === "running" ? `fill="#fff" stroke="${kind.colour}"` : `fill="${kind.colour}"`}/></svg> ${kind.outcome}</span>`
  ).join(" ")
  return figure(
    "runs",
    `<b>Job runs</b> · last 24 h, a tick per ${formatDuration(strips.slot_ms)} with runs (the worst outcome): ${legend}`,
    svg(W, H, "job runs of the last 24 hours", parts.join(""))
  )
}
