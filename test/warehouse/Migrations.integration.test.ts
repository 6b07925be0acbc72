import { assert, describe, it, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import {
  migrate,
  migrateFrom,
  migrationsDirectory,
  sequenceProblem,
  splitStatements
} from "../../src/warehouse/Migrations.ts"
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

describe("migration numbering", () => {
  it("the shipped migrations have no gap but the retired numbers", () => {
    const files = readdirSync(migrationsDirectory).flatMap((file) => {
      const match = file.match(/^(\d+)_(.+)\.sql$/)
      return match === null ? [] : [[Number(match[1]), match[2]!] as const]
    })
    assert.isUndefined(sequenceProblem(files, new Set()))
  })

  it("refuses a gap, a number used twice, and a file older than the newest applied one", () => {
    assert.match(
      sequenceProblem(
        [
          [1, "a"],
          [2, "b"],
          [3, "c"],
          [7, "g"]
        ],
        new Set()
      )!,
      /0007_g leaves a gap: no migration numbered 6/
    )
    assert.match(
      sequenceProblem(
        [
          [1, "a"],
          [1, "again"]
        ],
        new Set()
      )!,
      /number 1 is used twice/
    )
    // A database that had 1, 2, 3 and 6 (4 and 5 retired); a new 0004 would never run.
    const stranded = sequenceProblem(
      [
        [1, "a"],
        [2, "b"],
        [3, "c"],
        [4, "late"],
        [6, "f"]
      ],
      new Set([1, 2, 3, 6])
    )
    assert.match(stranded!, /0004_late is older than the newest applied \(6\)/)
    assert.isUndefined(
      sequenceProblem(
        [
          [1, "a"],
          [2, "b"],
          [3, "c"],
          [6, "f"],
          [7, "g"]
        ],
        new Set([1, 2, 3, 6])
      )
    )
  })
})

layer(EmptyTestDatabase)("migrate with a gap", (it) => {
  it.effect("refuses to run anything, naming the file", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const directory = mkdtempSync(join(tmpdir(), "crm-sync-migrations-"))
      writeFileSync(join(directory, "0001_first.sql"), "CREATE TABLE gap_test_first (id int);\n")
      writeFileSync(join(directory, "0002_second.sql"), "CREATE TABLE gap_test_second (id int);\n")
      writeFileSync(join(directory, "0008_eighth.sql"), "CREATE TABLE gap_test_eighth (id int);\n")
      const failure = yield* Effect.flip(migrateFrom(directory))
      assert.match(failure.message, /0008_eighth leaves a gap: no migration numbered 3/)
      const [created] = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM information_schema.tables WHERE table_name LIKE 'gap_test_%'`
      assert.strictEqual(created!.n, 0, "nothing was applied")
      rmSync(directory, { recursive: true, force: true })
    })
  )
})
