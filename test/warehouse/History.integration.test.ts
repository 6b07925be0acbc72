/**
 * The history of schema `crm_history` as the warehouse writes it: a version per content change,
 * nothing for a replay or a re-read, late snapshots placed in the middle, tombstones for deletions
 * and a new version for an undeletion, versions chained without gap or overlap, the current
 * version equal to the current row; the as-of functions and the daily balance view read it.
 */
import { assert, layer } from "@effect/vitest"
import { DateTime, Duration, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { HistorySettings, historyStats } from "../../src/warehouse/History.ts"
import { Warehouse } from "../../src/warehouse/Warehouse.ts"
import { type JsonObject, resourceFixture } from "../fixtures/Fixtures.ts"
import { HISTORY_TABLES, historyProblems } from "../support/HistoryChains.ts"
import { TestDatabase } from "../support/TestDatabase.ts"

const TestWarehouse = Warehouse.layer.pipe(Layer.provideMerge(TestDatabase))

const account = (id: string, updatedAt: string, balance: number, overrides: JsonObject = {}): JsonObject => ({
  ...resourceFixture("financial_account"),
  id,
  updated_at: updatedAt,
  balance_in_cents: balance,
  ...overrides
})

interface Version {
  readonly valid_from: string
  readonly valid_to: string | null
  readonly is_current: boolean
  readonly deleted: boolean
  readonly balance_in_cents: string | null
}

const versions = (id: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    return yield* sql<Version>`
      SELECT to_char(valid_from AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS valid_from,
             to_char(valid_to AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS valid_to,
             is_current, deleted, balance_in_cents::text AS balance_in_cents
      FROM crm_history.financial_accounts WHERE id = ${id} ORDER BY valid_from`
  })

/** The balances of an id's versions, oldest first, with a † for a tombstone. */
const balances = (id: string) =>
  Effect.map(versions(id), (rows) => rows.map((v) => (v.deleted ? `†${v.balance_in_cents}` : v.balance_in_cents)))

/** What the chaos verdict finds wrong with a history table (test/support/HistoryChains.ts). */
const chainProblems = (table: (typeof HISTORY_TABLES)[number]) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const problems = yield* sql.unsafe<{ id: string; problem: string }>(historyProblems(table))
    return problems.map((p) => `${p.id}: ${p.problem}`)
  })

const business = (updatedAt: string, name: string) => ({
  ...resourceFixture("business"),
  id: "bus_h",
  updated_at: updatedAt,
  name
})

/** The names of business bus_h's versions, oldest first. */
const businessNames = Effect.gen(function* () {
  const sql = yield* SqlClient
  const rows = yield* sql<{
    name: string
  }>`SELECT name FROM crm_history.businesses WHERE id = 'bus_h' ORDER BY valid_from`
  return rows.map((row) => row.name)
})

const withHousehold = (id: string, name: string | null) =>
  account(id, "2026-01-01T00:00:00Z", 1, { household_id: "hh_h", name })

const at = (iso: string) => DateTime.makeUnsafe(iso)

/** An annuity contract fixture with this id, time and status. */
const contract = (id: string, updatedAt: string, status: string) => ({
  ...resourceFixture("annuity_contract"),
  id,
  updated_at: updatedAt,
  status
})

layer(TestWarehouse)("History", (it) => {
  it.effect("adds a version per content change, and nothing for a replay or a re-read", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      const write = (records: ReadonlyArray<JsonObject>) =>
        warehouse.upsert("financial_accounts", records, { source: "crawl" })
      yield* write([account("fa_a", "2026-01-01T00:00:00Z", 100)])
      yield* write([account("fa_a", "2026-01-02T00:00:00Z", 200)])
      yield* write([account("fa_a", "2026-01-02T00:00:00Z", 200)])
      yield* write([account("fa_a", "2026-01-01T00:00:00Z", 100)])
      assert.deepStrictEqual(yield* versions("fa_a"), [
        {
          valid_from: "2026-01-01T00:00:00.000000",
          valid_to: "2026-01-02T00:00:00.000000",
          is_current: false,
          deleted: false,
          balance_in_cents: "100"
        },
        {
          valid_from: "2026-01-02T00:00:00.000000",
          valid_to: null,
          is_current: true,
          deleted: false,
          balance_in_cents: "200"
        }
      ])
      assert.deepStrictEqual(yield* chainProblems("financial_accounts"), [])
      // Each version's content_hash is the md5 of its raw, the ended one's computed as it is read.
      const sql = yield* SqlClient
      const hashes = yield* sql<{ hashed: boolean; stored: string | null }>`
        SELECT v.content_hash = md5(v.raw::text) AS hashed, e.content_hash AS stored
        FROM crm_history.financial_accounts AS v
        LEFT JOIN crm_history.financial_accounts_ended AS e ON e.id = v.id AND e.valid_from = v.valid_from
        WHERE v.id = 'fa_a' ORDER BY v.valid_from`
      assert.deepStrictEqual(hashes, [
        { hashed: true, stored: null },
        { hashed: true, stored: null }
      ])
    })
  )

  it.effect("puts a late, older snapshot between its neighbours; the current row stays the newest", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      const write = (records: ReadonlyArray<JsonObject>) =>
        warehouse.upsert("financial_accounts", records, { source: "webhook" })
      yield* write([account("fa_late", "2026-01-01T00:00:00Z", 1)])
      yield* write([account("fa_late", "2026-01-03T00:00:00Z", 3)])
      const result = yield* write([account("fa_late", "2026-01-02T00:00:00Z", 2)])
      assert.strictEqual(result.skipped, 1, "the forward-only guard still refuses it")
      yield* write([account("fa_late", "2026-01-02T00:00:00Z", 2)])
      assert.deepStrictEqual(yield* balances("fa_late"), ["1", "2", "3"])
      const [v1, v2, v3] = yield* versions("fa_late")
      assert.strictEqual(v1?.valid_to, "2026-01-02T00:00:00.000000")
      assert.strictEqual(v2?.valid_to, "2026-01-03T00:00:00.000000")
      assert.isTrue(v3?.is_current)
      // Older than every version: it opens the chain.
      yield* write([account("fa_late", "2025-12-31T00:00:00Z", 0)])
      assert.deepStrictEqual(yield* balances("fa_late"), ["0", "1", "2", "3"])
      const row = yield* warehouse.row("financial_accounts", "fa_late")
      assert.strictEqual(row._tag === "Some" ? String(row.value.balance_in_cents) : null, "3")
      assert.deepStrictEqual(yield* chainProblems("financial_accounts"), [])
    })
  )

  it.effect("keeps every snapshot of a batch delivered out of order", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      yield* warehouse.upsert(
        "financial_accounts",
        [
          account("fa_batch", "2026-02-03T00:00:00Z", 3),
          account("fa_batch", "2026-02-01T00:00:00Z", 1),
          account("fa_batch", "2026-02-02T00:00:00Z", 2),
          account("fa_batch", "2026-02-01T00:00:00Z", 1)
        ],
        { source: "webhook" }
      )
      assert.deepStrictEqual(yield* balances("fa_batch"), ["1", "2", "3"])
      assert.deepStrictEqual(yield* chainProblems("financial_accounts"), [])
    })
  )

  it.effect("closes the chain with a tombstone on deletion and opens a version on undeletion", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      const write = (records: ReadonlyArray<JsonObject>) =>
        warehouse.upsert("financial_accounts", records, { source: "crawl" })
      yield* write([account("fa_del", "2026-03-01T00:00:00Z", 1)])
      yield* warehouse.markDeleted("financial_accounts", ["fa_del"], at("2026-03-05T00:00:00Z"), { source: "crawl" })
      yield* warehouse.markDeleted("financial_accounts", ["fa_del"], at("2026-03-06T00:00:00Z"), { source: "crawl" })
      assert.deepStrictEqual(yield* balances("fa_del"), ["1", "†1"])
      // A snapshot older than the deletion: the row stays deleted, the history gets it before the
      // tombstone, which now holds the last fields known before the deletion (the snapshot's).
      yield* write([account("fa_del", "2026-03-03T00:00:00Z", 2)])
      assert.deepStrictEqual(yield* balances("fa_del"), ["1", "2", "†2"])
      const [, , tombstone] = yield* versions("fa_del")
      assert.strictEqual(tombstone?.valid_from, "2026-03-05T00:00:00.000000")
      // A crawl sees it again: a new version, after the tombstone.
      yield* warehouse.undelete("financial_accounts", ["fa_del"], { source: "crawl" })
      assert.deepStrictEqual(yield* balances("fa_del"), ["1", "2", "†2", "2"])
      assert.deepStrictEqual(yield* chainProblems("financial_accounts"), [])

      // Deleted again, then a newer snapshot brings it back from its own time.
      yield* warehouse.markDeleted("financial_accounts", ["fa_back"], at("2026-03-05T00:00:00Z"), { source: "webhook" })
      yield* write([account("fa_back", "2026-03-07T00:00:00Z", 7)])
      const back = yield* versions("fa_back")
      assert.deepStrictEqual(
        back.map((v) => [v.valid_from, v.deleted]),
        [
          ["2026-03-05T00:00:00.000000", true],
          ["2026-03-07T00:00:00.000000", false]
        ]
      )
      assert.deepStrictEqual(yield* chainProblems("financial_accounts"), [])
    })
  )

  it.effect("follows businesses, households and clients", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      const sql = yield* SqlClient
      yield* warehouse.upsert("businesses", [business("2026-01-01T00:00:00Z", "A")], { source: "poll" })
      yield* warehouse.upsert("businesses", [business("2026-01-02T00:00:00Z", "B")], { source: "poll" })
      yield* warehouse.upsert("businesses", [business("2026-01-02T00:00:00Z", "B")], { source: "poll" })
      assert.deepStrictEqual(yield* businessNames, ["A", "B"])
      // A household is seen inside an account; a sighting that adds nothing adds no version.
      yield* warehouse.upsert("financial_accounts", [withHousehold("fa_hh1", "Smith")], { source: "crawl" })
      yield* warehouse.upsert("financial_accounts", [withHousehold("fa_hh2", "Smith")], { source: "crawl" })
      const households = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM crm_history.households WHERE id = 'hh_h'`
      assert.strictEqual(households[0]?.n, 1)

      const client = (tier: string, signedAt: string) =>
        warehouse.writeClients([{ record: { id: "cli_h", tier }, signedAt, changedFields: ["tier"] }], {
          source: "webhook"
        })
      yield* client("silver", "2026-01-01T00:00:00Z")
      yield* client("gold", "2026-01-02T00:00:00Z")
      yield* client("gold", "2026-01-02T00:00:00Z")
      const tiers = yield* sql<{
        tier: string
      }>`SELECT tier FROM crm_history.clients WHERE id = 'cli_h' ORDER BY valid_from`
      assert.deepStrictEqual(
        tiers.map((row) => row.tier),
        ["silver", "gold"]
      )
      for (const table of ["businesses", "households", "clients"] as const)
        assert.deepStrictEqual(yield* chainProblems(table), [])
    })
  )

  it.effect("the chain checks see a gap, an overlap and a repeated version", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      const sql = yield* SqlClient
      const write = (records: ReadonlyArray<JsonObject>) =>
        warehouse.upsert("annuity_contracts", records, { source: "crawl" })
      for (const id of ["ac_gap", "ac_repeat", "ac_row"]) {
        yield* write([contract(id, "2026-01-01T00:00:00Z", "active")])
        yield* write([contract(id, "2026-01-02T00:00:00Z", "surrendered")])
      }
      assert.deepStrictEqual(yield* chainProblems("annuity_contracts"), [])
      yield* sql`UPDATE crm_history.annuity_contracts_ended SET valid_to = '2026-01-01T12:00:00Z' WHERE id = 'ac_gap'`
      yield* sql`UPDATE crm_history.annuity_contracts_ended AS h SET content_hash = md5(r.raw::text)
                 FROM crm.annuity_contracts AS r WHERE h.id = 'ac_repeat' AND r.id = h.id`
      yield* sql`UPDATE crm.annuity_contracts SET version_from = '2026-01-01T18:00:00Z' WHERE id = 'ac_row'`
      const problems = yield* chainProblems("annuity_contracts")
      assert.deepStrictEqual(problems.map((line) => line.replace(/ at .*/, "")).toSorted(), [
        "ac_gap: versions with a gap or an overlap",
        "ac_repeat: a version repeating the one before",
        "ac_row: versions with a gap or an overlap"
      ])
      yield* sql`DELETE FROM crm.annuity_contracts WHERE id IN ('ac_gap', 'ac_repeat', 'ac_row')`
      yield* sql`DELETE FROM crm_history.annuity_contracts_ended WHERE id IN ('ac_gap', 'ac_repeat', 'ac_row')`
    })
  )

  it.effect("counts each resource's versions, and those that ended in the last day, for status", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      const sql = yield* SqlClient
      const now = Date.now()
      const hoursAgo = (hours: number) => new Date(now - hours * 3_600_000).toISOString()
      yield* warehouse.upsert("financial_accounts", [account("fa_stats", hoursAgo(3), 1)], {
        source: "crawl"
      })
      yield* warehouse.upsert("financial_accounts", [account("fa_stats", hoursAgo(2), 2)], {
        source: "crawl"
      })
      const [count] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM crm_history.financial_accounts`
      const [ended] = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM crm_history.financial_accounts_ended WHERE valid_to > now() - interval '1 day'`
      const stats = yield* historyStats
      const accounts = stats.find((row) => row.resource === "financial_accounts")
      assert.strictEqual(accounts?.versions, count?.n)
      assert.isAtLeast(ended?.n ?? 0, 1)
      assert.strictEqual(accounts?.last_day, ended?.n)
      assert.deepStrictEqual(stats.map((row) => row.resource).toSorted(), [
        "annuity_contracts",
        "businesses",
        "clients",
        "financial_accounts",
        "households"
      ])
    })
  )

  it.effect("prunes the versions that ended before the retention, and keeps the chains whole", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      const write = (records: ReadonlyArray<JsonObject>) =>
        warehouse.upsert("financial_accounts", records, { source: "crawl" })
      yield* write([account("fa_prune", "2020-01-01T00:00:00Z", 1)])
      yield* write([account("fa_prune", "2020-02-01T00:00:00Z", 2)])
      yield* write([account("fa_prune", "2020-03-01T00:00:00Z", 3)])
      const pruned = yield* warehouse.pruneHistory(Duration.days(30))
      assert.isAtLeast(pruned, 2)
      assert.deepStrictEqual(yield* balances("fa_prune"), ["3"])
      assert.deepStrictEqual(yield* chainProblems("financial_accounts"), [])
    })
  )

  it.effect("answers as of a moment, and day by day for balances", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      const sql = yield* SqlClient
      const write = (records: ReadonlyArray<JsonObject>) =>
        warehouse.upsert("financial_accounts", records, { source: "crawl" })
      yield* write([account("fa_asof", "2026-04-01T10:00:00Z", 10, { household_id: "hh_asof" })])
      yield* write([account("fa_asof", "2026-04-01T20:00:00Z", 11, { household_id: "hh_asof" })])
      yield* write([account("fa_asof", "2026-04-03T12:00:00Z", 30, { household_id: "hh_asof" })])
      const asOf = yield* sql<{ balance_in_cents: string }>`
        SELECT balance_in_cents::text AS balance_in_cents
        FROM crm_history.financial_accounts_as_of('2026-04-02T00:00:00Z') WHERE id = 'fa_asof'`
      assert.deepStrictEqual(asOf, [{ balance_in_cents: "11" }])
      const before =
        yield* sql`SELECT 1 FROM crm_history.financial_accounts_as_of('2026-03-31T00:00:00Z') WHERE id = 'fa_asof'`
      assert.strictEqual(before.length, 0)
      const daily = yield* sql<{ day: string; balance_in_cents: string }>`
        SELECT to_char(day, 'YYYY-MM-DD') AS day, balance_in_cents::text AS balance_in_cents
        FROM crm_history.financial_account_balances_daily
        WHERE financial_account_id IN (SELECT id FROM crm.financial_accounts WHERE household_id = 'hh_asof')
          AND day <= '2026-04-04'
        ORDER BY day`
      assert.deepStrictEqual(daily, [
        { day: "2026-04-01", balance_in_cents: "11" },
        { day: "2026-04-02", balance_in_cents: "11" },
        { day: "2026-04-03", balance_in_cents: "30" },
        { day: "2026-04-04", balance_in_cents: "30" }
      ])
    })
  )
})

layer(
  Warehouse.layer.pipe(
    Layer.provide(Layer.succeed(HistorySettings, { resources: new Set(["businesses"] as const) })),
    Layer.provideMerge(TestDatabase)
  )
)("History, for the configured resources only", (it) => {
  it.effect("keeps no ended version of a resource whose history is off: only the row", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      yield* warehouse.upsert("financial_accounts", [account("fa_off", "2026-01-01T00:00:00Z", 1)], { source: "crawl" })
      yield* warehouse.upsert("financial_accounts", [account("fa_off", "2026-01-02T00:00:00Z", 2)], { source: "crawl" })
      assert.deepStrictEqual(yield* balances("fa_off"), ["2"])
      yield* warehouse.upsert("businesses", [business("2026-01-01T00:00:00Z", "A")], { source: "poll" })
      yield* warehouse.upsert("businesses", [business("2026-01-02T00:00:00Z", "B")], { source: "poll" })
      assert.deepStrictEqual(yield* businessNames, ["A", "B"])
    })
  )
})
