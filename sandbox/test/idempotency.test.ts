/**
 * Conformance of `Idempotency-Key` (spec §4 rule 6, §8's one-hour lifetime), including the
 * interplay with faults: a 5xx after the commit is not cached (a retry creates a second record),
 * a reset after the commit is (a retry gets the original answer).
 */
import { assert, layer } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Result } from "effect"
import type { ApiResponse } from "../src/Http.ts"
import { SandboxIdempotency } from "../src/Idempotency.ts"
import { resolveOptions, SandboxConfig } from "../src/Options.ts"
import { SandboxClock } from "../src/SandboxClock.ts"
import { expectRequests } from "../src/testing.ts"
import { admin, api, sandboxLayer } from "./fixtures.ts"

const prospect = (lastName: string) => ({ book_id: "bk_00000001", first_name: "Idem", last_name: lastName })

/** The sandbox's idempotency cache on its own, where a handler can be held open at will. */
const idempotencyAlone = SandboxIdempotency.layer.pipe(
  Layer.provide(SandboxClock.layer),
  Layer.provide(Layer.effect(SandboxConfig, Effect.orDie(resolveOptions())))
)

const prospectCount = Effect.flatMap(admin, (a) => Effect.map(a.state, (state) => state.counts.prospects))

const post = (path: string, body: unknown, key?: string, token?: string) =>
  api(path, {
    method: "POST",
    json: body,
    ...(key === undefined ? {} : { headers: { "idempotency-key": key } }),
    ...(token === undefined ? {} : { token })
  })

layer(sandboxLayer(), { excludeTestServices: true })("sandbox idempotency", (it) => {
  it.effect("§4 rule 6: a repeat with the same key and body returns the cached response and creates nothing", () =>
    Effect.gen(function* () {
      const before = yield* prospectCount
      const first = yield* post("/v1/prospects", prospect("Same"), "key-same-1")
      const second = yield* post("/v1/prospects", prospect("Same"), "key-same-1")
      assert.strictEqual(first.status, 201)
      assert.strictEqual(second.status, 201)
      assert.strictEqual(second.text, first.text)
      assert.strictEqual(second.headers["idempotent-replayed"], "true")
      assert.isUndefined(first.headers["idempotent-replayed"])
      assert.strictEqual(yield* prospectCount, before + 1)
      const entries = yield* expectRequests(yield* admin, { method: "POST", path: "/v1/prospects" })
      const keyed = entries.filter((entry) => entry.idempotency_key === "key-same-1")
      assert.deepStrictEqual(
        keyed.map((entry) => entry.idempotent_replay),
        [false, true]
      )
    })
  )

  it.effect("§4 rule 6: key order inside the JSON body does not make it a different body", () =>
    Effect.gen(function* () {
      const first = yield* post(
        "/v1/prospects",
        { book_id: "bk_00000001", first_name: "A", last_name: "Order" },
        "key-order"
      )
      const second = yield* post(
        "/v1/prospects",
        { last_name: "Order", first_name: "A", book_id: "bk_00000001" },
        "key-order"
      )
      assert.strictEqual(second.json.id, first.json.id)
    })
  )

  it.effect("§4 rule 6: the same key with a different body is refused with 422 idempotency_key_reused", () =>
    Effect.gen(function* () {
      yield* post("/v1/prospects", prospect("One"), "key-diff")
      const before = yield* prospectCount
      const other = yield* post("/v1/prospects", prospect("Two"), "key-diff")
      assert.strictEqual(other.status, 422)
      assert.strictEqual(other.json.error, "idempotency_key_reused")
      assert.strictEqual(yield* prospectCount, before)
    })
  )

  it.effect("§4 rule 6: keys are scoped per path: the same key on another path creates a fresh record", () =>
    Effect.gen(function* () {
      const contacts = Effect.flatMap(admin, (a) => Effect.map(a.state, (state) => state.counts.contacts))
      const beforeContacts = yield* contacts
      const asProspect = yield* post("/v1/prospects", prospect("Scoped"), "key-scoped")
      const asContact = yield* post("/v1/contacts", prospect("Scoped"), "key-scoped")
      assert.strictEqual(asProspect.status, 201)
      assert.strictEqual(asContact.status, 201)
      assert.match(asContact.json.id, /^con_/)
      assert.strictEqual(yield* contacts, beforeContacts + 1)
    })
  )

  it.effect("§4 rule 6: keys are per caller: another user's identical key is a different request", () =>
    Effect.gen(function* () {
      const a = yield* admin
      const other = yield* a.createToken({ userId: "usr_00000002", canWrite: true })
      const mine = yield* post("/v1/prospects", prospect("Caller"), "key-caller")
      const theirs = yield* post("/v1/prospects", prospect("Caller"), "key-caller", other.token)
      assert.strictEqual(theirs.status, 201)
      assert.notStrictEqual(theirs.json.id, mine.json.id)
    })
  )

  it.effect("§4 rule 6: handler errors (4xx) are cached like successes", () =>
    Effect.gen(function* () {
      const first = yield* post("/v1/prospects", { book_id: "bk_00000001", first_name: "NoLast" }, "key-invalid")
      const again = yield* post("/v1/prospects", { book_id: "bk_00000001", first_name: "NoLast" }, "key-invalid")
      assert.strictEqual(first.status, 422)
      assert.strictEqual(again.status, 422)
      assert.strictEqual(again.headers["idempotent-replayed"], "true")
    })
  )

  it.effect("§4 rule 6: a 5xx is never cached: a retry after a server error runs again", () =>
    Effect.gen(function* () {
      const a = yield* admin
      const before = yield* prospectCount
      // the server fails before doing anything
      yield* a.addFault({ kind: "status", status: 503, path: "/v1/prospects", times: 1 })
      const failed = yield* post("/v1/prospects", prospect("Retry"), "key-5xx-before")
      assert.strictEqual(failed.status, 503)
      assert.strictEqual(yield* prospectCount, before)
      const retried = yield* post("/v1/prospects", prospect("Retry"), "key-5xx-before")
      assert.strictEqual(retried.status, 201)
      assert.strictEqual(yield* prospectCount, before + 1)
      // the write commits, then the answer is a 500: not cached, so the retry writes again
      yield* a.addFault({ kind: "status", status: 500, when: "after", path: "/v1/prospects", times: 1 })
      const committed = yield* post("/v1/prospects", prospect("Twice"), "key-5xx-after")
      assert.strictEqual(committed.status, 500)
      assert.strictEqual(yield* prospectCount, before + 2)
      const again = yield* post("/v1/prospects", prospect("Twice"), "key-5xx-after")
      assert.strictEqual(again.status, 201)
      assert.strictEqual(yield* prospectCount, before + 3)
      yield* a.clearFaults
    })
  )

  it.effect("§4 rule 6: after a connection reset past the commit, the retry gets the original response", () =>
    Effect.gen(function* () {
      const a = yield* admin
      const before = yield* prospectCount
      yield* a.addFault({ kind: "reset", when: "after", path: "/v1/prospects", times: 1 })
      const lost = yield* Effect.result(post("/v1/prospects", prospect("Reset"), "key-reset"))
      assert.isTrue(Result.isFailure(lost), "the client sees a transport error")
      assert.strictEqual(yield* prospectCount, before + 1)
      const retried = yield* post("/v1/prospects", prospect("Reset"), "key-reset")
      assert.strictEqual(retried.status, 201)
      assert.strictEqual(retried.headers["idempotent-replayed"], "true")
      assert.strictEqual(yield* prospectCount, before + 1)
      const entries = yield* expectRequests(a, { path: "/v1/prospects" })
      const keyed = entries.filter((entry) => entry.idempotency_key === "key-reset")
      assert.deepStrictEqual(
        keyed.map((entry) => entry.status),
        [null, 201]
      )
    })
  )

  it.effect("§4 rule 6 / §8: a key lives one hour; afterwards the same key creates a fresh record", () =>
    Effect.gen(function* () {
      const a = yield* admin
      const first = yield* post("/v1/prospects", prospect("Aged"), "key-ttl")
      yield* a.advanceClock("59m")
      const within = yield* post("/v1/prospects", prospect("Aged"), "key-ttl")
      assert.strictEqual(within.json.id, first.json.id)
      yield* a.advanceClock("1m")
      const after = yield* post("/v1/prospects", prospect("Aged"), "key-ttl")
      assert.strictEqual(after.status, 201)
      assert.notStrictEqual(after.json.id, first.json.id)
      assert.isUndefined(after.headers["idempotent-replayed"])
    })
  )

  it.effect(
    "§4 rule 6: a repeat while the first request is still being processed gets 409 idempotency_key_in_use",
    () =>
      Effect.gen(function* () {
        const idempotency = yield* SandboxIdempotency
        const request = { scope: "company-1/user-1", path: "/v1/prospects", key: "key-in-flight", fingerprint: "{}" }
        const release = yield* Deferred.make<void>()
        const created: ApiResponse = { status: 201, body: { id: "pro_in_flight" } }
        const first = yield* Effect.forkChild(idempotency.run(request, Effect.as(Deferred.await(release), created)))
        yield* Effect.yieldNow
        const during = yield* Effect.result(idempotency.run(request, Effect.succeed(created)))
        assert.isTrue(Result.isFailure(during))
        if (Result.isFailure(during)) {
          assert.strictEqual(during.failure.status, 409)
          assert.strictEqual(during.failure.error, "idempotency_key_in_use")
        }
        yield* Deferred.succeed(release, undefined)
        assert.deepStrictEqual(yield* Fiber.join(first), { response: created, replayed: false })
        // Once it has finished, the same key replays its answer.
        assert.deepStrictEqual(yield* idempotency.run(request, Effect.die("not run again")), {
          response: created,
          replayed: true
        })
      }).pipe(Effect.provide(idempotencyAlone))
  )

  it.effect("§4: requests without Idempotency-Key are never deduplicated", () =>
    Effect.gen(function* () {
      const first = yield* post("/v1/prospects", prospect("Plain"))
      const second = yield* post("/v1/prospects", prospect("Plain"))
      assert.notStrictEqual(second.json.id, first.json.id)
    })
  )
})
