/**
 * One owner per table (docs/architecture.md, "Who owns which table"): only the owning module holds
 * SQL that names a table; every other module calls it.
 */
import { assert, describe, it } from "@effect/vitest"
import { srcModules, strangers } from "./Ownership.ts"

describe("table ownership", () => {
  it("only a table's owner names it in SQL", () => {
    assert.deepStrictEqual(strangers(srcModules()), [])
  })

  it("sees a stranger's query, and not a comment or a plain string", () => {
    assert.deepStrictEqual(
      strangers([
        { path: "src/observability/X.ts", text: "const q = sql`SELECT * FROM crm_sync.outbox`" },
        { path: "src/observability/Y.ts", text: "/** reads crm_sync.outbox */\n// and crm.tasks\nconst x = 1" },
        { path: "src/sync/Z.ts", text: 'sql`UPDATE crm."tasks" SET x = 1`' },
        { path: "src/observability/H.ts", text: "sql`SELECT count(*) FROM crm_history.financial_accounts`" },
        { path: "src/warehouse/History.ts", text: 'sql`SELECT 1 FROM crm_history."clients"`' },
        { path: "src/outbound/Outbox.ts", text: "sql`SELECT 1 FROM crm_sync.outbox`" },
        { path: "src/observability/M.ts", text: 'Metric.gauge("x", { description: "rows of crm_sync.outbox" })' }
      ]),
      ["src/observability/X.ts: crm_sync.outbox", "src/sync/Z.ts: crm.*", "src/observability/H.ts: crm_history.*"]
    )
  })
})
