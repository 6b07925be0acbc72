/**
 * The status page's charts as SVG strings: each draws its data (bars, ticks, a line) with text
 * labels beside the colours, says so when there is nothing to draw, and escapes names.
 */
import { assert, describe, it } from "@effect/vitest"
import {
  type BucketSeries,
  bucketChart,
  eventsChart,
  type EventSeries,
  freshnessChart,
  type ResourceFreshness,
  type RunStrips,
  runsChart,
  timeAgo
} from "../../src/admin/Charts.ts"

const NOW = Date.parse("2026-12-01T12:30:20Z")
const MINUTE = 60_000

const count = (svg: string, pattern: RegExp) => [...svg.matchAll(pattern)].length

const bucket = (overrides: Partial<BucketSeries> = {}): BucketSeries => ({
  bucket: "token:firm",
  scope: "token",
  limit: 1000,
  learned_limit: null,
  used: 420,
  start: Date.parse("2026-12-01T12:00:00Z"),
  window_ms: 60 * MINUTE,
  per_minute: Array.from({ length: 31 }, (_, minute) => (minute % 5 === 0 ? 60 : 0)),
  ...overrides
})

const events = (overrides: Partial<EventSeries> = {}): EventSeries => ({
  start: NOW - (NOW % MINUTE) - 59 * MINUTE,
  received: Array.from({ length: 60 }, (_, minute) => (minute > 50 ? 10 : 0)),
  applied: Array.from({ length: 60 }, (_, minute) => (minute > 51 ? 10 : 0)),
  max_lag: Array.from({ length: 60 }, (_, minute) => (minute > 51 ? minute / 10 : null)),
  ...overrides
})

const resource = (overrides: Partial<ResourceFreshness>): ResourceFreshness => ({
  resource: "businesses",
  rows: 10,
  newest_row: "2026-12-01T10:30:20.000Z",
  last_read: "2026-12-01T12:28:20.000Z",
  every_seconds: 300,
  job: "poll:businesses",
  ...overrides
})

const strips = (jobs: RunStrips["jobs"]): RunStrips => ({
  start: NOW - 24 * 60 * MINUTE,
  slot_ms: 10 * MINUTE,
  slots: 144,
  jobs
})

describe("timeAgo", () => {
  it("says how long ago, with the exact time on hover", () => {
    assert.strictEqual(
      timeAgo(NOW, "2026-12-01T12:27:20.000Z"),
      '<time datetime="2026-12-01T12:27:20.000Z" title="2026-12-01T12:27:20.000Z">3 min ago</time>'
    )
    assert.include(timeAgo(NOW, "2026-12-01T13:00:00.000Z"), ">in 30 min<")
    assert.strictEqual(timeAgo(NOW, null), "never")
  })
})

describe("bucketChart", () => {
  it("draws each minute's requests on the window's running total, against the limit", () => {
    const svg = bucketChart(bucket(), NOW)
    // Minutes 0, 5, ..., 30 sent requests: seven minutes with a bar of their own.
    assert.strictEqual(count(svg, /class="req"/g), 7)
    assert.include(svg, "limit 1,000")
    assert.include(svg, "420 counted")
    assert.notInclude(svg, "learned")
    assert.match(svg, /<title>[^<]*12:05[^<]*60 requests[^<]*120 so far[^<]*<\/title>/)
  })

  it("draws the learned ceiling as its own dashed, labelled line", () => {
    const svg = bucketChart(bucket({ learned_limit: 600 }), NOW)
    assert.match(svg, /<line[^>]*class="learned"[^>]*stroke-dasharray/)
    assert.include(svg, "learned ceiling 600")
  })

  it("zooms in on a window far below its limit, and says the limit is off the scale", () => {
    const svg = bucketChart(bucket({ limit: 100_000, used: 30, per_minute: [10, 20] }), NOW)
    assert.strictEqual(count(svg, /class="req"/g), 2)
    assert.include(svg, "limit 100,000 above the scale")
  })

  it("says when no request was sent in the window, and escapes the bucket's name", () => {
    const svg = bucketChart(bucket({ bucket: "ip:<egress>", used: 0, per_minute: [] }), NOW)
    assert.strictEqual(count(svg, /class="req"/g), 0)
    assert.include(svg, "no request")
    assert.include(svg, "ip:&#60;egress&#62;")
  })
})

describe("eventsChart", () => {
  it("draws received and applied events per minute, and the lag as a line", () => {
    const svg = eventsChart(events(), NOW)
    assert.strictEqual(count(svg, /class="received"/g), 9)
    assert.strictEqual(count(svg, /class="applied"/g), 8)
    assert.match(svg, /<polyline[^>]*class="lag"/)
    assert.include(svg, "received 90")
    assert.include(svg, "applied 80")
    assert.include(svg, "max lag 5.9 s")
  })

  it("tells a lag under a tenth of a second as such", () => {
    const svg = eventsChart(
      events({ max_lag: Array.from({ length: 60 }, (_, minute) => (minute > 51 ? 0.02 : null)) }),
      NOW
    )
    assert.include(svg, "max lag &#60; 0.1 s")
  })

  it("says when no event came in the hour", () => {
    const svg = eventsChart(events({ received: [], applied: [], max_lag: [] }), NOW)
    assert.include(svg, "no event received or applied in the last hour")
    assert.notInclude(svg, "<polyline")
  })
})

describe("freshnessChart", () => {
  it("draws a bar per resource that says ok, due or late in words and colour", () => {
    const svg = freshnessChart(
      [
        resource({}),
        resource({ resource: "annuity_contracts", last_read: "2026-12-01T12:22:20.000Z" }),
        resource({ resource: "financial_accounts", last_read: "2026-12-01T11:00:00.000Z" }),
        resource({ resource: "tasks", job: null, every_seconds: null, last_read: null })
      ],
      NOW
    )
    assert.strictEqual(count(svg, /class="fresh fresh-ok"/g), 1)
    assert.strictEqual(count(svg, /class="fresh fresh-due"/g), 1)
    assert.strictEqual(count(svg, /class="fresh fresh-late"/g), 1)
    assert.match(svg, /businesses[\s\S]*2 min ago[\s\S]*every 5 min[\s\S]*ok/)
    assert.match(svg, /financial_accounts[\s\S]*late/)
    assert.match(svg, /tasks[\s\S]*on events[\s\S]*newest row 2 h ago/)
  })

  it("says so for a resource with no rows yet", () => {
    const svg = freshnessChart([resource({ rows: 0, newest_row: null, last_read: null })], NOW)
    assert.include(svg, "no rows yet")
  })
})

describe("runsChart", () => {
  it("draws a tick per slot with runs, the worst outcome's shape and colour, and counts in words", () => {
    const svg = runsChart(
      strips([
        {
          job: "poll:businesses",
          slots: [
            { slot: 140, succeeded: 2, failed: 0, interrupted: 0, running: 0 },
            { slot: 141, succeeded: 1, failed: 1, interrupted: 0, running: 0 },
            { slot: 143, succeeded: 0, failed: 0, interrupted: 0, running: 1 }
          ]
        },
        { job: "reference", slots: [{ slot: 10, succeeded: 0, failed: 0, interrupted: 1, running: 0 }] }
      ]),
      NOW
    )
    assert.strictEqual(count(svg, /class="tick tick-/g), 4)
    assert.strictEqual(count(svg, /class="tick tick-succeeded"/g), 1)
    assert.strictEqual(count(svg, /class="tick tick-failed"/g), 1)
    assert.strictEqual(count(svg, /class="tick tick-running"/g), 1)
    assert.strictEqual(count(svg, /class="tick tick-interrupted"/g), 1)
    assert.include(svg, "5 runs, 1 failed")
    assert.match(svg, /<title>poll:businesses[^<]*1 succeeded, 1 failed<\/title>/)
  })

  it("says when no job ran in the day", () => {
    assert.include(runsChart(strips([]), NOW), "no job ran in the last 24 h")
  })
})
