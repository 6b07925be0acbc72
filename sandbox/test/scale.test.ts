/**
 * The sandbox at size: a million generated records start in-process and serve deep pages from
 * the indexes (no timing assertions: the point is that it works at this size within the test
 * timeout on a small machine; README.md has the measured numbers).
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { Sandbox } from "../src/Sandbox.ts"
import { api, sandboxLayer } from "./fixtures.ts"

layer(sandboxLayer({ records: 1_000_000 }), { excludeTestServices: true })("sandbox at 1M records", (it) => {
  it.effect("§2.1 / §4 rule 1: page 500 of 100 financial accounts has a full, correct envelope", () =>
    Effect.gen(function* () {
      const state = yield* (yield* Sandbox).admin.state
      assert.strictEqual(state.counts.financial_accounts, 600_000)
      const response = yield* api("/v1/financial_accounts?per_page=100&page=500")
      assert.strictEqual(response.status, 200)
      assert.strictEqual(response.json.data.length, 100)
      const { pagination } = response.json
      assert.strictEqual(pagination.current_page, 500)
      assert.strictEqual(pagination.per_page, 100)
      assert.isAbove(pagination.total_count, 50_000)
      assert.strictEqual(pagination.total_pages, Math.ceil(pagination.total_count / 100))
      const next = yield* api("/v1/financial_accounts?per_page=100&page=501")
      assert.isTrue(next.json.data[0].id > response.json.data[99].id)
    })
  )

  it.effect("§4 rule 4: updated_since and name queries over 100k businesses are served", () =>
    Effect.gen(function* () {
      const since = yield* api("/v1/businesses?updated_since=2024-12-01T00:00:00Z&per_page=100&page=3")
      assert.strictEqual(since.status, 200)
      assert.strictEqual(since.json.data.length, 100)
      const named = yield* api("/v1/businesses?name=North&per_page=5")
      assert.isAbove(named.json.pagination.total_count, 0)
      for (const business of named.json.data) assert.isTrue(business.name.startsWith("North"))
    })
  )
})
