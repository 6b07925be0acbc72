/**
 * Conformance of the rate limits of spec §8 (with small limits and a 10-second window so the
 * tests are quick): three buckets per request, limits by credential kind, fixed windows that
 * begin at the first request, the strictest bucket winning, and the 429 of §7.
 */
import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { Sandbox } from "../src/Sandbox.ts"
import { expectRequests } from "../src/testing.ts"
import { admin, api, sandboxLayer } from "./fixtures.ts"

const limits = {
  personal: { token: 5, company: 8, ip: 12 },
  oauth: { user: 3, app: 4, ip: 12 }
}

/** n GETs of /v1/me from one address; the statuses. */
const hit = (n: number, token: string | undefined, ip: string) =>
  Effect.forEach(Array.from({ length: n }), () =>
    Effect.map(api("/v1/me", { token, headers: { "x-sandbox-client-ip": ip } }), (response) => response)
  )

const statuses = (responses: ReadonlyArray<{ readonly status: number }>) => responses.map((r) => r.status)

const fresh = Effect.gen(function* () {
  const a = yield* admin
  yield* a.reset
  return a
})

layer(sandboxLayer({ window: "10s", limits }), { excludeTestServices: true })("sandbox rate limits", (it) => {
  describe("§8 buckets", () => {
    it.effect("§8: a personal token's bucket admits its limit per window, then 429 naming `token`", () =>
      Effect.gen(function* () {
        const a = yield* fresh
        const { token } = yield* a.createToken({ userId: "usr_00000001" })
        const responses = yield* hit(6, token, "10.0.0.1")
        assert.deepStrictEqual(statuses(responses), [200, 200, 200, 200, 200, 429])
        const limited = responses[5]!
        assert.strictEqual(limited.json.error, "rate_limited")
        assert.strictEqual(limited.json.limit, "token")
        assert.isString(limited.json.detail)
        assert.match(limited.headers["retry-after"]!, /^\d+$/)
        const retryAfter = Number(limited.headers["retry-after"])
        assert.isTrue(retryAfter >= 1 && retryAfter <= 10)
        yield* expectRequests(a, { path: "/v1/me", status: 429 }, 1)
        const [entry] = yield* a.requests({ status: 429 })
        assert.strictEqual(entry!.rate_limited, "token")
      })
    )

    it.effect("§8: the company bucket is shared by every personal token of the company", () =>
      Effect.gen(function* () {
        const a = yield* fresh
        const first = yield* a.createToken({ userId: "usr_00000001" })
        const second = yield* a.createToken({ userId: "usr_00000002" })
        assert.deepStrictEqual(statuses(yield* hit(5, first.token, "10.0.1.1")), [200, 200, 200, 200, 200])
        const responses = yield* hit(4, second.token, "10.0.1.2")
        assert.deepStrictEqual(statuses(responses), [200, 200, 200, 429])
        assert.strictEqual(responses[3]!.json.limit, "company")
        // another company's tokens have their own company bucket
        const other = yield* a.createToken({ userId: "usr_00000005" })
        assert.deepStrictEqual(statuses(yield* hit(1, other.token, "10.0.1.3")), [200])
      })
    )

    it.effect("§8: the IP bucket counts every request from one address, whatever the credential", () =>
      Effect.gen(function* () {
        const a = yield* fresh
        const tokens = yield* Effect.forEach(["usr_00000001", "usr_00000005", "usr_00000009"], (userId) =>
          a.createToken({ userId })
        )
        for (const token of tokens) {
          assert.deepStrictEqual(statuses(yield* hit(4, token.token, "192.0.2.7")), [200, 200, 200, 200])
        }
        const limited = yield* hit(1, tokens[0]!.token, "192.0.2.7")
        assert.strictEqual(limited[0]!.status, 429)
        assert.strictEqual(limited[0]!.json.limit, "ip")
        // the same token from another egress address still passes
        assert.deepStrictEqual(statuses(yield* hit(1, tokens[0]!.token, "192.0.2.8")), [200])
      })
    )

    it.effect("§8: unauthenticated requests count against the IP bucket", () =>
      Effect.gen(function* () {
        yield* fresh
        const responses = yield* hit(13, undefined, "198.51.100.1")
        assert.deepStrictEqual(
          statuses(responses).slice(0, 12),
          Array.from({ length: 12 }, () => 401)
        )
        assert.strictEqual(responses[12]!.status, 429)
        assert.strictEqual(responses[12]!.json.limit, "ip")
      })
    )

    it.effect("§8: OAuth tokens have their own limits: per user of the app, then per app and company", () =>
      Effect.gen(function* () {
        const a = yield* fresh
        const app = (yield* a.apps)[0]!
        const connect = (userId: string) => a.connect({ clientId: app.client_id, userId, companyId: "cmp_00000001" })
        const alice = yield* connect("usr_00000001")
        const responses = yield* hit(4, alice.access_token, "10.0.2.1")
        assert.deepStrictEqual(statuses(responses), [200, 200, 200, 429])
        assert.strictEqual(responses[3]!.json.limit, "token")
        // a refreshed token of the same user shares the user's bucket
        const again = yield* connect("usr_00000001")
        assert.strictEqual((yield* hit(1, again.access_token, "10.0.2.1"))[0]!.status, 429)
        const bob = yield* connect("usr_00000002")
        const bobs = yield* hit(2, bob.access_token, "10.0.2.2")
        assert.deepStrictEqual(statuses(bobs), [200, 429])
        assert.strictEqual(bobs[1]!.json.limit, "company")
      })
    )

    it.effect("the admin's bucket list shows an address's limit for the credential kind that used it", () =>
      Effect.gen(function* () {
        const a = yield* fresh
        yield* a.setRateLimits({ oauth: { ip: 9 } })
        const app = (yield* a.apps)[0]!
        const carol = yield* a.connect({ clientId: app.client_id, userId: "usr_00000003", companyId: "cmp_00000001" })
        yield* hit(1, carol.access_token, "10.0.9.1")
        const { token } = yield* a.createToken({ userId: "usr_00000001" })
        yield* hit(1, token, "10.0.9.2")
        const buckets = yield* a.rateLimits
        const limitFor = (key: string) => buckets.find((bucket) => bucket.key === key)?.limit
        assert.strictEqual(limitFor("ip:10.0.9.1"), 9)
        assert.strictEqual(limitFor("ip:10.0.9.2"), 12)
        yield* a.setRateLimits({ oauth: { ip: 12 } })
      })
    )
  })

  describe("§8 windows", () => {
    it.effect("§8: a window is fixed and begins at the bucket's first request", () =>
      Effect.gen(function* () {
        const a = yield* fresh
        const { token } = yield* a.createToken({ userId: "usr_00000001" })
        yield* hit(1, token, "10.0.3.1")
        yield* a.advanceClock("6s")
        // four more requests 6 s into the window fill it
        assert.deepStrictEqual(statuses(yield* hit(5, token, "10.0.3.1")), [200, 200, 200, 200, 429])
        yield* a.advanceClock("3s")
        const late = yield* hit(1, token, "10.0.3.1")
        assert.strictEqual(late[0]!.status, 429)
        assert.isTrue(Number(late[0]!.headers["retry-after"]) <= 1, "about 1 s left of the first window")
        yield* a.advanceClock("1s")
        // 10 s after the first request a new window opens with a full allowance
        assert.deepStrictEqual(statuses(yield* hit(5, token, "10.0.3.1")), [200, 200, 200, 200, 200])
      })
    )

    it.effect("§8: Retry-After is the whole seconds until the window ends, rounded up", () =>
      Effect.gen(function* () {
        const a = yield* fresh
        const { token } = yield* a.createToken({ userId: "usr_00000001" })
        yield* hit(5, token, "10.0.4.1")
        yield* a.advanceClock("2500ms")
        const limited = (yield* hit(1, token, "10.0.4.1"))[0]!
        const retryAfter = Number(limited.headers["retry-after"])
        assert.isTrue(retryAfter === 8 || retryAfter === 7, `retry-after ${retryAfter}`)
      })
    )

    it.effect("§8: rejected requests do not count: the next window admits the full limit", () =>
      Effect.gen(function* () {
        const a = yield* fresh
        const { token } = yield* a.createToken({ userId: "usr_00000001" })
        yield* hit(5, token, "10.0.5.1")
        assert.deepStrictEqual(statuses(yield* hit(3, token, "10.0.5.1")), [429, 429, 429])
        const buckets = yield* a.rateLimits
        const bucket = buckets.find((b) => b.key.startsWith("token:"))!
        assert.strictEqual(bucket.used, 5)
        assert.strictEqual(bucket.limit, 5)
        yield* a.advanceClock("10s")
        assert.deepStrictEqual(statuses(yield* hit(5, token, "10.0.5.1")), [200, 200, 200, 200, 200])
      })
    )

    it.effect("§8: when several buckets are full, the strictest (the one freeing up last) is named", () =>
      Effect.gen(function* () {
        const a = yield* fresh
        const early = yield* a.createToken({ userId: "usr_00000001" })
        const late = yield* a.createToken({ userId: "usr_00000002" })
        yield* hit(3, early.token, "10.0.6.1") // company bucket opens at 0 s
        yield* a.advanceClock("4s")
        yield* hit(5, late.token, "10.0.6.2") // late's token bucket opens at 4 s; company now 8/8
        yield* a.advanceClock("1s")
        // late: its token bucket frees at 14 s, the company bucket at 10 s: token wins, 9 s
        const both = (yield* hit(1, late.token, "10.0.6.3"))[0]!
        assert.strictEqual(both.json.limit, "token")
        assert.strictEqual(both.headers["retry-after"], "9")
        // early: only the company bucket is full: company, 5 s
        const company = (yield* hit(1, early.token, "10.0.6.4"))[0]!
        assert.strictEqual(company.json.limit, "company")
        assert.strictEqual(company.headers["retry-after"], "5")
      })
    )
  })

  describe("§8 configuration", () => {
    it.effect("§8: the sandbox reports its window and limits", () =>
      Effect.gen(function* () {
        const sandbox = yield* Sandbox
        assert.strictEqual(sandbox.options.windowMs, 10_000)
        assert.deepStrictEqual(sandbox.options.limits, limits)
      })
    )
  })

  describe("co-tenants", () => {
    it.effect("other consumers' use counts against the bucket: a one-off charge, a steady co-tenant, new limits", () =>
      Effect.gen(function* () {
        const a = yield* fresh
        const { id, token } = yield* a.createToken({ userId: "usr_00000001" })
        const bucket = `token:${id}`
        // A one-off charge of 3 to the window: 2 of the token's 5 are left.
        assert.deepStrictEqual(statuses(yield* hit(1, token, "10.0.5.1")), [200])
        yield* a.chargeRateLimit(bucket, 3)
        assert.deepStrictEqual(statuses(yield* hit(2, token, "10.0.5.1")), [200, 429])
        const [state] = (yield* a.rateLimits).filter((row) => row.key === bucket)
        assert.deepInclude(state, { used: 5, foreign: 3, limit: 5 })

        // A co-tenant spending 4 per window, evenly: three quarters in, it has spent 3.
        yield* a.resetRateLimits
        assert.deepStrictEqual(statuses(yield* hit(1, token, "10.0.5.2")), [200])
        yield* a.setCotenant(bucket, 4)
        yield* a.advanceClock("7500 millis")
        assert.deepStrictEqual(statuses(yield* hit(2, token, "10.0.5.2")), [200, 429])
        assert.strictEqual((yield* a.rateLimits).find((row) => row.key === bucket)!.foreign, 3)

        // New limits while running: the same window now has room.
        const now = yield* a.setRateLimits({ personal: { token: 20 } })
        assert.strictEqual(now.personal.token, 20)
        assert.deepStrictEqual(statuses(yield* hit(2, token, "10.0.5.2")), [200, 200])
        yield* a.setCotenant(bucket, 0)
      })
    )
  })
})
