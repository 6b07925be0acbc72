/**
 * The as-of functions of crm_history (docs/history.md, "Reading it"): the version valid at a
 * moment, boundaries included, and a plan that reads the validity indexes rather than the whole
 * table on a history laid out as the warehouse appends it (oldest versions first).
 */
import { assert, layer } from "@effect/vitest"
import { Data, Effect } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { TestDatabase } from "../support/TestDatabase.ts"

/** Fails a transaction on purpose, to roll it back, carrying what it read. */
class RolledBack extends Data.TaggedError("RolledBack")<{ readonly read: ReadonlyArray<string> }> {}

const ACCOUNTS = 3000
const DAYS = 30

/** Every index and scan a plan (EXPLAIN's JSON) reads, as "Node Type" or "Node Type on index". */
const scans = (plan: unknown): ReadonlyArray<string> => {
  if (typeof plan !== "object" || plan === null) return []
  if (Array.isArray(plan)) return plan.flatMap(scans)
  const node = plan as Record<string, unknown>
  const on = typeof node["Index Name"] === "string" ? node["Index Name"] : node["Relation Name"]
  const own =
    typeof node["Node Type"] === "string" && node["Node Type"].includes("Scan")
      ? [typeof on === "string" ? `${node["Node Type"]} on ${on}` : node["Node Type"]]
      : []
  return [...own, ...Object.values(node).flatMap(scans)]
}

/**
 * ACCOUNTS × DAYS daily versions of financial accounts: the ended ones day by day (as the rows'
 * updates end them), the last day's as the rows.
 */
const dailyHistory = Effect.gen(function* () {
  const sql = yield* SqlClient
  yield* sql.unsafe(`
    INSERT INTO crm_history.financial_accounts_ended
      (id, valid_from, valid_to, deleted, balance_in_cents, updated_at, source, synced_at)
    SELECT 'fa_' || lpad(i::text, 6, '0'), timestamptz '2026-01-01' + d * interval '1 day',
           timestamptz '2026-01-01' + (d + 1) * interval '1 day', false, i * 100 + d,
           timestamptz '2026-01-01' + d * interval '1 day', 'crawl', now()
    FROM generate_series(0, ${DAYS - 2}) AS d, generate_series(0, ${ACCOUNTS - 1}) AS i
    ORDER BY d, i`)
  yield* sql.unsafe(`
    INSERT INTO crm.financial_accounts (id, version_from, balance_in_cents, updated_at, source, raw)
    SELECT 'fa_' || lpad(i::text, 6, '0'), timestamptz '2026-01-01' + ${DAYS - 1} * interval '1 day', i * 100,
           timestamptz '2026-01-01' + ${DAYS - 1} * interval '1 day', 'crawl', '{}'
    FROM generate_series(0, ${ACCOUNTS - 1}) AS i`)
  yield* sql`VACUUM ANALYZE crm_history.financial_accounts_ended`
  yield* sql`VACUUM ANALYZE crm.financial_accounts`
})

layer(TestDatabase, { timeout: 60_000 })("History as of a moment", (it) => {
  it.effect("returns the version valid at the moment: from its valid_from, up to (not including) its valid_to", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      yield* sql`
        INSERT INTO crm_history.households_ended (id, valid_from, valid_to, deleted, name, source)
        VALUES ('hh_b', '2026-02-01T00:00:00Z', '2026-02-02T00:00:00Z', false, 'first', 'crawl'),
               ('hh_b', '2026-02-02T00:00:00Z', '2026-02-03T00:00:00Z', false, 'second', 'crawl'),
               ('hh_b', '2026-02-03T00:00:00Z', '2026-02-04T00:00:00Z', true, 'gone', 'crawl')`
      yield* sql`
        INSERT INTO crm.households (id, version_from, name, source) VALUES ('hh_b', '2026-02-04T00:00:00Z', 'back', 'crawl')`
      const nameAt = (moment: string) =>
        Effect.map(
          sql<{
            name: string
          }>`SELECT name FROM crm_history.households_as_of(${moment}::timestamptz) WHERE id = 'hh_b'`,
          (rows) => rows.map((row) => row.name)
        )
      assert.deepStrictEqual(yield* nameAt("2026-01-31T23:59:59.999999Z"), [])
      assert.deepStrictEqual(yield* nameAt("2026-02-01T00:00:00Z"), ["first"])
      assert.deepStrictEqual(yield* nameAt("2026-02-01T23:59:59.999999Z"), ["first"])
      assert.deepStrictEqual(yield* nameAt("2026-02-02T00:00:00Z"), ["second"])
      assert.deepStrictEqual(yield* nameAt("2026-02-03T12:00:00Z"), [])
      assert.deepStrictEqual(yield* nameAt("2026-02-04T00:00:00Z"), ["back"])
      assert.deepStrictEqual(yield* nameAt("2099-01-01T00:00:00Z"), ["back"])
    })
  )

  it.effect("reads the ended versions at one date through the validity indexes, not the whole table", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      yield* dailyHistory
      const moment = "2026-01-15T00:00:00Z"
      const [total] = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM crm_history.financial_accounts_as_of(${moment}::timestamptz)`
      assert.strictEqual(total?.n, ACCOUNTS)
      const explain = sql.unsafe<{ "QUERY PLAN": unknown }>(
        `EXPLAIN (FORMAT JSON) SELECT count(*) FROM crm_history.financial_accounts_as_of('${moment}')`
      )
      const [explained] = yield* explain
      // The rows are read whole (each is the current version of its record); the ended versions
      // only where they were valid at that moment.
      assert.notInclude(scans(explained?.["QUERY PLAN"]), "Seq Scan on financial_accounts_ended")
      // Without the GiST index (dropped in a transaction rolled back), and with sequential scans
      // costed out: the function's bounds must still reach both BRIN indexes.
      const brinOnly = yield* sql
        .withTransaction(
          Effect.gen(function* () {
            yield* sql`DROP INDEX crm_history.financial_accounts_valid`
            yield* sql`SET LOCAL enable_seqscan = off`
            const [plan] = yield* explain
            return yield* Effect.fail(new RolledBack({ read: scans(plan?.["QUERY PLAN"]) }))
          })
        )
        .pipe(Effect.catchTag("RolledBack", (rolledBack) => Effect.succeed(rolledBack.read)))
      assert.include(brinOnly, "Bitmap Index Scan on financial_accounts_from")
      assert.include(brinOnly, "Bitmap Index Scan on financial_accounts_to")
      assert.notInclude(brinOnly, "Seq Scan on financial_accounts_ended")
    })
  )
})
