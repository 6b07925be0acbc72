/**
 * Option `recordServed`: each request-log entry of a 2xx listing of businesses, annuity contracts
 * or financial accounts names the records it served (id and content number, the contents held
 * once each), the answer's `X-Request-Id` beside them; a truncated body served nothing whole.
 */
import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { admin, api, sandboxLayer } from "./fixtures.ts"

const lastEntry = (path: string) =>
  Effect.gen(function* () {
    const entries = yield* (yield* admin).requests({ path })
    return entries.at(-1)!
  })

layer(sandboxLayer({ recordServed: true }), { excludeTestServices: true })("sandbox served records", (it) => {
  describe("recordServed", () => {
    it.effect("served: a listing's records by id and content, the same content numbered once", () =>
      Effect.gen(function* () {
        const a = yield* admin
        const first = yield* api("/v1/financial_accounts?per_page=5")
        const entry = yield* lastEntry("/v1/financial_accounts")
        assert.strictEqual(entry.request_id, first.headers["x-request-id"])
        assert.strictEqual(entry.served?.resource, "financial_accounts")
        const contents = yield* a.servedContents
        const served = entry.served!.records.map(([id, content]) => [id, JSON.parse(contents[content]!)])
        assert.deepStrictEqual(
          served,
          first.json.data.map((record: { id: string }) => [record.id, record])
        )
        yield* api("/v1/financial_accounts?per_page=5")
        const again = yield* lastEntry("/v1/financial_accounts")
        assert.deepStrictEqual(again.served, entry.served)
        assert.strictEqual((yield* a.servedContents).length, contents.length)
        // A record changed in between: a new content for it alone.
        const businesses = yield* api("/v1/businesses?per_page=3")
        assert.strictEqual((yield* lastEntry("/v1/businesses")).served?.records.length, businesses.json.data.length)
      })
    )

    it.effect("served: nothing for a truncated body, an error, or a route that is not a history listing", () =>
      Effect.gen(function* () {
        const a = yield* admin
        yield* a.addFault({ kind: "truncate", path: "/v1/annuity_contracts", times: 1 })
        yield* api("/v1/annuity_contracts?per_page=5")
        const truncated = yield* lastEntry("/v1/annuity_contracts")
        assert.deepStrictEqual(truncated.faults, ["truncate"])
        assert.strictEqual(truncated.served, null)
        yield* a.addFault({ kind: "status", status: 503, path: "/v1/annuity_contracts", times: 1 })
        yield* api("/v1/annuity_contracts?per_page=5")
        assert.strictEqual((yield* lastEntry("/v1/annuity_contracts")).served, null)
        yield* api("/v1/annuity_contracts?per_page=5")
        assert.strictEqual((yield* lastEntry("/v1/annuity_contracts")).served?.records.length, 5)
        yield* api("/v1/books")
        assert.strictEqual((yield* lastEntry("/v1/books")).served, null)
      })
    )
  })
})

layer(sandboxLayer(), { excludeTestServices: true })("sandbox served records off", (it) => {
  it.effect("served: not recorded unless the option is on", () =>
    Effect.gen(function* () {
      yield* api("/v1/financial_accounts?per_page=5")
      assert.strictEqual((yield* lastEntry("/v1/financial_accounts")).served, null)
      assert.deepStrictEqual(yield* (yield* admin).servedContents, [])
    })
  )
})
