import { assert, describe, it, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { migrate, splitStatements } from "../../src/warehouse/Migrations.ts"
import { EmptyTestDatabase } from "../support/TestDatabase.ts"

describe("splitStatements", () => {
  it("keeps semicolons inside dollar-quoted function bodies", () => {
    const statements = splitStatements(
      "-- header\nCREATE TABLE a (x int);\n\nCREATE FUNCTION f() RETURNS trigger AS $$\nBEGIN\n  RETURN NULL;\nEND\n$$ LANGUAGE plpgsql;\nSELECT 1;"
    )
    assert.strictEqual(statements.length, 3)
    assert.include(statements[1]!, "RETURN NULL;")
  })
})

layer(EmptyTestDatabase)("migrate", (it) => {
  it.effect("two concurrent runs both succeed, and a later run changes nothing", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const [first, second] = yield* Effect.all([migrate, migrate], { concurrency: 2 })
      const applied = first.length + second.length
      const files = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM crm_sync_migrations`
      assert.isAbove(applied, 0)
      assert.strictEqual(applied, files[0]!.n, "each migration applied exactly once across both runs")
      assert.isTrue(first.length === 0 || second.length === 0, "one run did everything, the other nothing")
      const again = yield* migrate
      assert.deepStrictEqual(again, [])
      const tables = yield* sql<{ table_name: string }>`
        SELECT table_name FROM information_schema.tables WHERE table_schema = 'crm_sync' ORDER BY table_name`
      assert.includeMembers(
        tables.map((row) => row.table_name),
        ["webhook_inbox", "outbox", "rate_windows", "cursors", "crawl_runs", "job_runs", "reconciliation_reports"]
      )
    })
  )
})
