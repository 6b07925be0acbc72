/**
 * The history of clients (crm_history.clients) when their deliveries arrive out of order: a late
 * `client.updated` (signed before the current version began) becomes a version in the middle, and
 * the versions after it carry the fields it names that no later delivery named, so reordered
 * deliveries give the history of the same deliveries in order; a replay adds nothing; the chains
 * stay whole and the current version is the row (test/support/HistoryChains.ts).
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { Warehouse } from "../../src/warehouse/Warehouse.ts"
import { eventFixture } from "../fixtures/Fixtures.ts"
import { historyProblems } from "../support/HistoryChains.ts"
import { TestDatabase } from "../support/TestDatabase.ts"

const TestWarehouse = Warehouse.layer.pipe(Layer.provideMerge(TestDatabase))

/** The world's client as it stood at each signed time: every delivery carries the whole record. */
interface Delivery {
  readonly signedAt: string
  readonly changed: ReadonlyArray<string>
  readonly fields: Record<string, unknown>
}

const base: Delivery = {
  signedAt: "2026-01-01T00:00:00.000Z",
  changed: ["name", "tier", "status"],
  fields: { name: "Ann", tier: "silver", status: "active" }
}
const d1: Delivery = {
  signedAt: "2026-01-02T00:00:00.000Z",
  changed: ["tier"],
  fields: { name: "Ann", tier: "gold", status: "active" }
}
const d2: Delivery = {
  signedAt: "2026-01-03T00:00:00.000Z",
  changed: ["status"],
  fields: { name: "Ann", tier: "gold", status: "inactive" }
}
const d3: Delivery = {
  signedAt: "2026-01-04T00:00:00.000Z",
  changed: ["tier", "name"],
  fields: { name: "Anne", tier: "platinum", status: "inactive" }
}

const record = (id: string, fields: Record<string, unknown>) => ({
  ...(eventFixture("client.updated").client as Record<string, unknown>),
  id,
  ...fields
})

const asDelivery = (id: string, delivery: Delivery) => ({
  record: record(id, delivery.fields),
  signedAt: delivery.signedAt,
  changedFields: delivery.changed
})

/** Writes the deliveries of client `id` as one batch. */
const deliver = (id: string, ...deliveries: ReadonlyArray<Delivery>) =>
  Effect.flatMap(Warehouse, (warehouse) =>
    warehouse.writeClients(
      deliveries.map((delivery) => asDelivery(id, delivery)),
      { source: "webhook" }
    )
  )

/** Each delivery of client `id` in a batch of its own, in the order given. */
const deliverEach = (id: string, ...deliveries: ReadonlyArray<Delivery>) =>
  Effect.forEach(deliveries, (delivery) => deliver(id, delivery), { discard: true })

interface Version {
  readonly valid_from: string
  readonly valid_to: string | null
  readonly is_current: boolean
  readonly name: string | null
  readonly tier: string | null
  readonly status: string | null
}

const versions = (id: string) =>
  Effect.flatMap(
    SqlClient,
    (sql) => sql<Version>`
      SELECT to_char(valid_from AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS valid_from,
             to_char(valid_to AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS valid_to,
             is_current, name, tier, status
      FROM crm_history.clients WHERE id = ${id} ORDER BY valid_from`
  )

const version = (from: string, to: string | null, name: string, tier: string, status: string): Version => ({
  valid_from: `${from}T00:00:00.000000`,
  valid_to: to === null ? null : `${to}T00:00:00.000000`,
  is_current: to === null,
  name,
  tier,
  status
})

/** The four deliveries applied in order: one version each. */
const inOrder: ReadonlyArray<Version> = [
  version("2026-01-01", "2026-01-02", "Ann", "silver", "active"),
  version("2026-01-02", "2026-01-03", "Ann", "gold", "active"),
  version("2026-01-03", "2026-01-04", "Ann", "gold", "inactive"),
  version("2026-01-04", null, "Anne", "platinum", "inactive")
]

/** What the chain checks (and the chaos verdict) find wrong with crm_history.clients. */
const chainProblems = Effect.flatMap(SqlClient, (sql) =>
  Effect.map(sql.unsafe<{ id: string; problem: string }>(historyProblems("clients")), (rows) =>
    rows.map((p) => `${p.id}: ${p.problem}`)
  )
)

layer(TestWarehouse)("History of clients delivered out of order", (it) => {
  it.effect("a late delivery lands in the middle: reordered deliveries give the history of the in-order ones", () =>
    Effect.gen(function* () {
      yield* deliverEach("cli_in", base, d1, d2, d3)
      assert.deepStrictEqual(yield* versions("cli_in"), inOrder)
      // Newest first, then each older one: every one is late but the first.
      yield* deliverEach("cli_back", base, d3, d2, d1)
      assert.deepStrictEqual(yield* versions("cli_back"), inOrder)
      yield* deliverEach("cli_mixed", base, d2, d1, d3)
      assert.deepStrictEqual(yield* versions("cli_mixed"), inOrder)
      assert.deepStrictEqual(yield* chainProblems, [])
    })
  )

  it.effect("several late deliveries of a client in one batch, with a newer one, are placed too", () =>
    Effect.gen(function* () {
      yield* deliverEach("cli_batch", base, d2)
      yield* deliver("cli_batch", d3, d1)
      assert.deepStrictEqual(yield* versions("cli_batch"), inOrder)
      yield* deliverEach("cli_batch2", base, d3)
      yield* deliver("cli_batch2", d2, d1)
      assert.deepStrictEqual(yield* versions("cli_batch2"), inOrder)
      assert.deepStrictEqual(yield* chainProblems, [])
    })
  )

  it.effect("a replay, late or not, adds nothing and changes no version", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      yield* deliverEach("cli_replay", base, d3, d1, d2)
      const written = () =>
        sql<{ n: number; synced: string }>`
          SELECT count(*)::int AS n, max(synced_at)::text AS synced FROM crm_history.clients WHERE id = 'cli_replay'`
      const before = yield* written()
      yield* deliverEach("cli_replay", d1, d2, d3, base)
      yield* deliver("cli_replay", d2, d1, base)
      assert.deepStrictEqual(yield* versions("cli_replay"), inOrder)
      assert.deepStrictEqual(yield* written(), before)
      assert.deepStrictEqual(yield* chainProblems, [])
    })
  )

  it.effect("a late delivery that changes nothing adds no version; one the later versions repeat merges them", () =>
    Effect.gen(function* () {
      yield* deliverEach("cli_same", base, d1, d3)
      // Status was "active" at 01-02 already: the late delivery names a value the version holds.
      yield* deliver("cli_same", {
        signedAt: "2026-01-02T12:00:00.000Z",
        changed: ["status"],
        fields: { name: "Ann", tier: "gold", status: "active" }
      })
      assert.deepStrictEqual(yield* versions("cli_same"), [
        version("2026-01-01", "2026-01-02", "Ann", "silver", "active"),
        version("2026-01-02", "2026-01-04", "Ann", "gold", "active"),
        version("2026-01-04", null, "Anne", "platinum", "active")
      ])
      // In order, d1 then a delivery naming tier "gold" again would be one version: so here.
      yield* deliverEach("cli_repeat", base, { ...d1, signedAt: "2026-01-03T00:00:00.000Z" })
      yield* deliver("cli_repeat", d1)
      assert.deepStrictEqual(yield* versions("cli_repeat"), [
        version("2026-01-01", "2026-01-02", "Ann", "silver", "active"),
        version("2026-01-02", null, "Ann", "gold", "active")
      ])
      assert.deepStrictEqual(yield* chainProblems, [])
    })
  )

  it.effect("a field a later delivery named keeps its value in the later versions, and the row agrees", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      yield* deliverEach("cli_named", base, d3)
      // Names status again with the value it holds: no version, but the row's status is now as of 01-05.
      yield* deliver("cli_named", {
        signedAt: "2026-01-05T00:00:00.000Z",
        changed: ["status"],
        fields: { name: "Anne", tier: "platinum", status: "active" }
      })
      yield* deliver("cli_named", { ...d1, changed: ["tier", "status"], fields: { ...d1.fields, status: "vip" } })
      assert.deepStrictEqual(yield* versions("cli_named"), [
        version("2026-01-01", "2026-01-02", "Ann", "silver", "active"),
        version("2026-01-02", "2026-01-04", "Ann", "gold", "vip"),
        version("2026-01-04", null, "Anne", "platinum", "active")
      ])
      const [row] = yield* sql<{ tier: string; status: string }>`
        SELECT tier, status FROM crm.clients WHERE id = 'cli_named'`
      assert.deepStrictEqual(row, { tier: "platinum", status: "active" })
      assert.deepStrictEqual(yield* chainProblems, [])
    })
  )

  it.effect("a version closed since keeps the fields named in it, by the field times it was written with", () =>
    Effect.gen(function* () {
      const gold: Delivery = { ...d1, signedAt: "2026-01-03T00:00:00.000Z" }
      yield* deliverEach("cli_closed", base, gold, d3)
      yield* deliver("cli_closed", {
        signedAt: "2026-01-02T00:00:00.000Z",
        changed: ["tier", "status"],
        fields: { name: "Ann", tier: "bronze", status: "vip" }
      })
      assert.deepStrictEqual(yield* versions("cli_closed"), [
        version("2026-01-01", "2026-01-02", "Ann", "silver", "active"),
        version("2026-01-02", "2026-01-03", "Ann", "bronze", "vip"),
        version("2026-01-03", "2026-01-04", "Ann", "gold", "vip"),
        version("2026-01-04", null, "Anne", "platinum", "vip")
      ])
      assert.deepStrictEqual(yield* chainProblems, [])
    })
  )

  it.effect("a creation stays as today; a delivery older than every version is not placed before them", () =>
    Effect.gen(function* () {
      yield* Effect.flatMap(Warehouse, (warehouse) =>
        warehouse.writeClients([{ record: record("cli_new", base.fields), signedAt: null, changedFields: null }], {
          source: "webhook"
        })
      )
      yield* deliver("cli_new", d1)
      const rows = yield* versions("cli_new")
      assert.deepStrictEqual(
        rows.map((v) => [v.tier, v.is_current]),
        [
          ["silver", false],
          ["gold", true]
        ]
      )
      assert.deepStrictEqual(yield* chainProblems, [])
    })
  )
})
