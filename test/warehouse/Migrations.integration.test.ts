import { assert, describe, it, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { readdirSync, readFileSync } from "node:fs"
import { migrate, migrationsDirectory, splitStatements } from "../../src/warehouse/Migrations.ts"
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

/** Runs the statements of every migration file whose number is in `[from, to]`, as `migrate` would. */
const applyFiles = (from: number, to: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const files = readdirSync(migrationsDirectory)
      .filter((file) => {
        const id = Number(file.match(/^(\d+)_/)?.[1])
        return id >= from && id <= to
      })
      .toSorted()
    for (const file of files) {
      for (const statement of splitStatements(readFileSync(`${migrationsDirectory}${file}`, "utf8"))) {
        yield* sql.unsafe(statement)
      }
    }
  })

layer(EmptyTestDatabase)("0009_crawl_sightings", (it) => {
  it.effect("carries over what crawl_presence knew: sightings by run, misses with their counts", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      yield* applyFiles(1, 8)
      const [run] = yield* sql<{ id: number }>`
        INSERT INTO crm_sync.crawl_runs (connection, resource, source, status)
        VALUES ('default', 'financial_accounts', 'crawl', 'complete') RETURNING id::int AS id`
      // fa_3 was last seen by a run since pruned: it counts as seen by the newest run left.
      yield* sql`
        INSERT INTO crm_sync.crawl_presence (connection, resource, id, last_seen_run, misses) VALUES
          ('default', 'financial_accounts', 'fa_1', ${run!.id}, 0),
          ('default', 'financial_accounts', 'fa_2', ${run!.id}, 1),
          ('default', 'financial_accounts', 'fa_3', ${run!.id + 100}, 0),
          ('default', 'financial_accounts', 'fa_4', ${run!.id}, 2)`
      yield* applyFiles(9, 9)
      const sightings = yield* sql<{ run_id: number; ids: ReadonlyArray<string> }>`
        SELECT run_id::int AS run_id, ids FROM crm_sync.crawl_sightings`
      assert.deepStrictEqual(sightings, [{ run_id: run!.id, ids: ["fa_1", "fa_3"] }])
      const misses = yield* sql<{
        id: string
        misses: number
      }>`SELECT id, misses FROM crm_sync.crawl_misses ORDER BY id`
      assert.deepStrictEqual(misses, [
        { id: "fa_2", misses: 1 },
        { id: "fa_4", misses: 2 }
      ])
      const [presence] = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM information_schema.tables
        WHERE table_schema = 'crm_sync' AND table_name = 'crawl_presence'`
      assert.strictEqual(presence!.n, 0)
    })
  )
})
