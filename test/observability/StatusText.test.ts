/** `crm-sync status` as text: what a user reads when the config names no connection; the budget's buckets. */
import { assert, describe, it } from "@effect/vitest"
import { renderStatus, type StatusReport } from "../../src/admin/StatusReport.ts"

const report = (jobs: StatusReport["last_jobs"]): StatusReport => ({
  generated_at: "2026-11-26T03:00:00.000Z",
  config: { origin: "defaults", connections: [], webhook_endpoints: [] },
  database: { kind: "embedded", location: ".crm-sync/data" },
  summary: { connections: 0, healthy: 0, late: 0, failing: 0, needs_reauthorization: 0, not_synced: 0 },
  connection_health: [],
  resources: {},
  buckets: [],
  inbox: {},
  outbox: {},
  connections_needing_reauthorization: [],
  grant_gaps: [],
  webhook_refusals: [],
  last_jobs: jobs,
  plan: []
})

const job = (connection: string | null) => ({
  job: "poll:businesses",
  connection,
  status: "succeeded",
  finished_at: "2026-11-26T02:59:00.000Z"
})

/** A token bucket's status row. */
const bucket = (name: string, used: number) => ({
  bucket: name,
  scope: "token",
  used,
  limit: 500,
  resets_at: null,
  blocked_until: null,
  learned_limit: null
})

describe("renderStatus", () => {
  it("says no connection is configured when the warehouse has none either", () => {
    assert.include(renderStatus(report([job(null)])), "connections none configured\n")
  })

  it("names the connections another process syncs into this warehouse (the demo's, from another shell)", () => {
    const text = renderStatus(report([job("sandbox"), job("firm"), job("sandbox"), job(null)]))
    assert.include(
      text,
      "connections none in this config; the warehouse has jobs of firm, sandbox, configured where they run\n"
    )
  })

  it("keeps a long bucket name apart from its count", () => {
    const long = "token:oauth:crm-sync-partner-app-0123456789abcdef:usr_000042"
    const text = renderStatus({ ...report([]), buckets: [bucket("token:firm", 3), bucket(long, 120)] })
    const lines = text.split("\n").filter((line) => line.startsWith("bucket "))
    assert.deepStrictEqual(
      lines.map((line) => line.split(/ {2,}/).slice(0, 2)),
      [
        ["bucket token:firm", "3/500"],
        [`bucket ${long}`, "120/500"]
      ]
    )
    // The counts line up in one column.
    assert.strictEqual(lines[0]!.indexOf("3/500"), lines[1]!.indexOf("120/500"))
  })
})

describe("refusals and grant gaps in status", () => {
  const base = report([])
  it("one line per endpoint and reason, with the count, the reason in words and how long ago", () => {
    const text = renderStatus({
      ...base,
      webhook_refusals: [
        {
          endpoint: "client-created",
          reason: "bad_signature",
          count: 14,
          first_at: "2026-11-26T02:00:00.000Z",
          last_at: "2026-11-26T02:58:00.000Z"
        },
        {
          endpoint: "default",
          reason: "stale_timestamp",
          count: 1,
          first_at: "2026-11-26T01:00:00.000Z",
          last_at: "2026-11-26T01:00:00.000Z"
        }
      ]
    })
    assert.include(text, "refused     endpoint client-created: 14 deliveries refused, bad signature, last 2 min ago\n")
    assert.include(text, "refused     endpoint default: 1 delivery refused, stale timestamp, last 2 h ago")
  })

  it("a refused grant's range: open while refused, closed once connected again", () => {
    const text = renderStatus({
      ...base,
      grant_gaps: [
        { connection: "firm", from: "2026-11-26T01:00:00.000Z", until: null },
        { connection: "other", from: "2026-11-25T01:00:00.000Z", until: "2026-11-25T03:00:00.000Z" }
      ]
    })
    assert.include(text, "gap         connection firm: grant refused since 2026-11-26T01:00:00.000Z: no webhook events")
    assert.include(
      text,
      "gap         connection other: no webhook events from 2026-11-25T01:00:00.000Z to 2026-11-25T03:00:00.000Z (grant refused)"
    )
  })
})
