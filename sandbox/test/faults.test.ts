/**
 * Fault injection: injected statuses and 429 storms, latency, connection resets, mangled bodies,
 * page drift during crawls, and duplicated, delayed and reordered webhook deliveries; rules
 * match by method and path (or event type) and fire by probability, count and skip, the same
 * way for the same seed.
 */
import { assert, describe, layer } from "@effect/vitest"
import { Effect, Fiber, Result, Schedule } from "effect"
import { Sandbox } from "../src/Sandbox.ts"
import { expectRequests, startWebhookReceiver, verifyWebhook } from "../src/testing.ts"
import { admin, api, sandboxLayer } from "./fixtures.ts"

const fresh = Effect.gen(function* () {
  const a = yield* admin
  yield* a.reset
  return a
})

/** A transcript of one segment saying `text`. */
const segment = (text: string) => ({
  segments: [{ text, participant: { name: "A" }, start_timestamp: "00:00:01", end_timestamp: "00:00:02" }]
})

/** Crawls a list page by page; the ids in the order seen. */
const crawl = (path: string, perPage: number) =>
  Effect.gen(function* () {
    const ids: Array<string> = []
    const totals: Array<number> = []
    for (let page = 1; ; page++) {
      const response = yield* api(`${path}${path.includes("?") ? "&" : "?"}per_page=${perPage}&page=${page}`)
      ids.push(...response.json.data.map((item: any) => item.id))
      totals.push(response.json.pagination.total_count)
      if (page >= response.json.pagination.total_pages) break
    }
    return { ids, totals }
  })

layer(sandboxLayer({ records: 2000, webhookRetrySchedule: [] }), { excludeTestServices: true })(
  "sandbox faults",
  (it) => {
    describe("HTTP faults", () => {
      it.effect("faults: an injected 5xx on a path pattern for the next N requests, then normal service", () =>
        Effect.gen(function* () {
          const a = yield* fresh
          yield* a.addFault({ kind: "status", status: 503, path: "/v1/financial_*", times: 2 })
          const statuses: Array<number> = []
          for (let i = 0; i < 3; i++) statuses.push((yield* api("/v1/financial_accounts")).status)
          assert.deepStrictEqual(statuses, [503, 503, 200])
          assert.strictEqual((yield* api("/v1/businesses")).status, 200)
          const failed = yield* api("/v1/me")
          assert.strictEqual(failed.status, 200)
          const [rule] = yield* a.faults
          assert.strictEqual(rule!.fired, 2)
          assert.strictEqual(rule!.matched, 3)
          const entries = yield* expectRequests(a, { path: "/v1/financial_accounts", status: 503 }, 2)
          assert.deepStrictEqual(entries[0]!.faults, ["status:503"])
        })
      )

      it.effect("faults: method filters and `skip` let matching requests through first", () =>
        Effect.gen(function* () {
          const a = yield* fresh
          yield* a.addFault({ kind: "status", status: 500, method: "GET", path: "/v1/books", skip: 2, times: 1 })
          const statuses: Array<number> = []
          for (let i = 0; i < 4; i++) statuses.push((yield* api("/v1/books")).status)
          assert.deepStrictEqual(statuses, [200, 200, 500, 200])
        })
      )

      it.effect("faults: probabilities are drawn from the seed: the same run fails the same requests", () =>
        Effect.gen(function* () {
          const run = Effect.gen(function* () {
            const a = yield* fresh
            yield* a.addFault({ id: "coin", kind: "status", status: 502, probability: 0.5, path: "/v1/me" })
            const statuses: Array<number> = []
            for (let i = 0; i < 24; i++) statuses.push((yield* api("/v1/me")).status)
            return statuses
          })
          const first = yield* run
          const second = yield* run
          assert.deepStrictEqual(first, second)
          assert.isTrue(first.includes(502) && first.includes(200))
        })
      )

      it.effect("faults: a 429 storm answers rate_limited with Retry-After without touching the buckets", () =>
        Effect.gen(function* () {
          const a = yield* fresh
          yield* a.addFault({ kind: "rate_limit", limit: "company", retry_after: 42, path: "/v1/*", times: 3 })
          for (let i = 0; i < 3; i++) {
            const response = yield* api("/v1/businesses")
            assert.strictEqual(response.status, 429)
            assert.strictEqual(response.headers["retry-after"], "42")
            assert.deepStrictEqual(response.json.limit, "company")
            assert.strictEqual(response.json.error, "rate_limited")
          }
          assert.strictEqual((yield* api("/v1/businesses")).status, 200)
          const buckets = yield* a.rateLimits
          assert.strictEqual(buckets.find((b) => b.key.startsWith("token:"))!.used, 1)
        })
      )

      it.effect("faults: added latency delays the answer", () =>
        Effect.gen(function* () {
          const a = yield* fresh
          yield* a.addFault({ kind: "latency", ms: 120, path: "/v1/me", times: 1 })
          assert.strictEqual((yield* api("/v1/me")).status, 200)
          const [entry] = yield* expectRequests(a, { path: "/v1/me" }, 1)
          assert.deepStrictEqual(entry!.faults, ["latency:120"])
          assert.isAtLeast(entry!.duration_ms, 120)
        })
      )

      it.effect("faults: latency after the handler sends what was true when the request arrived", () =>
        Effect.gen(function* () {
          const a = yield* fresh
          const meeting = yield* a.actions.createMeeting({ book_id: "bk_00000001", transcript: segment("first") })
          const path = `/v1/meetings/${meeting.id}/transcript`
          yield* a.addFault({ kind: "latency", when: "after", ms: 2_000, path, times: 1 })
          const used = Effect.map(a.rateLimits, (buckets) => buckets.find((b) => b.key.startsWith("token:"))?.used ?? 0)
          const before = yield* used
          const late = yield* Effect.forkChild(api(path))
          // the request has passed its rate limit, and so reached its (in-memory) handler
          yield* Effect.gen(function* () {
            while ((yield* used) === before) yield* Effect.sleep("10 millis")
          }).pipe(Effect.timeout("5 seconds"))
          yield* Effect.sleep("200 millis")
          // the answer is on its way: the change that follows it is not in it
          yield* a.actions.setTranscript(meeting.id, segment("second"))
          const answer = yield* Fiber.join(late)
          assert.deepStrictEqual(
            answer.json.transcript.map((s: { text: string }) => s.text),
            ["first"]
          )
          assert.deepStrictEqual(
            (yield* api(path)).json.transcript.map((s: { text: string }) => s.text),
            ["second"]
          )
          const [entry] = yield* expectRequests(a, { path }, 2)
          assert.deepStrictEqual(entry!.faults, ["latency_after:2000"])
        })
      )

      it.effect("faults: a reset before the handler runs writes nothing", () =>
        Effect.gen(function* () {
          const a = yield* fresh
          const before = (yield* a.state).counts.prospects
          yield* a.addFault({ kind: "reset", when: "before", path: "/v1/prospects", times: 1 })
          const result = yield* Effect.result(
            api("/v1/prospects", { method: "POST", json: { book_id: "bk_00000001", first_name: "R", last_name: "B" } })
          )
          assert.isTrue(Result.isFailure(result))
          assert.strictEqual((yield* a.state).counts.prospects, before)
          const [entry] = yield* expectRequests(a, { path: "/v1/prospects" }, 1)
          assert.isNull(entry!.status)
          assert.deepStrictEqual(entry!.faults, ["reset:before"])
        })
      )

      it.effect("faults: a reset after the handler has committed the write", () =>
        Effect.gen(function* () {
          const a = yield* fresh
          const before = (yield* a.state).counts.prospects
          yield* a.addFault({ kind: "reset", when: "after", path: "/v1/prospects", times: 1 })
          const result = yield* Effect.result(
            api("/v1/prospects", { method: "POST", json: { book_id: "bk_00000001", first_name: "R", last_name: "A" } })
          )
          assert.isTrue(Result.isFailure(result))
          assert.strictEqual((yield* a.state).counts.prospects, before + 1)
        })
      )

      it.effect("faults: a truncated body keeps its status but is not valid JSON", () =>
        Effect.gen(function* () {
          const a = yield* fresh
          yield* a.addFault({ kind: "truncate", path: "/v1/financial_accounts", times: 1 })
          const truncated = yield* api("/v1/financial_accounts")
          assert.strictEqual(truncated.status, 200)
          assert.isUndefined(truncated.json)
          const whole = yield* api("/v1/financial_accounts")
          assert.isTrue(whole.text.startsWith(truncated.text))
          assert.isBelow(truncated.text.length, whole.text.length)
        })
      )

      it.effect("faults: a non-JSON body is an HTML error page", () =>
        Effect.gen(function* () {
          const a = yield* fresh
          yield* a.addFault({ kind: "non_json", path: "/v1/businesses", times: 1 })
          const response = yield* api("/v1/businesses")
          assert.strictEqual(response.status, 502)
          assert.match(response.headers["content-type"]!, /text\/html/)
          assert.isUndefined(response.json)
        })
      )

      it.effect("faults: the admin API is never faulted, and rules can be listed and removed", () =>
        Effect.gen(function* () {
          const a = yield* fresh
          const rule = yield* a.addFault({ kind: "status", status: 500 })
          const sandbox = yield* Sandbox
          const state = yield* api("/_sandbox", { token: undefined })
          assert.strictEqual(state.status, 200)
          assert.strictEqual(state.json.seed, sandbox.options.seed)
          assert.strictEqual((yield* api("/v1/me")).status, 500)
          yield* a.removeFault(rule.id)
          assert.strictEqual((yield* api("/v1/me")).status, 200)
          assert.deepStrictEqual(yield* a.faults, [])
        })
      )
    })

    describe("page drift", () => {
      it.effect("faults: page drift deleting records between pages makes a crawl skip live records", () =>
        Effect.gen(function* () {
          const a = yield* fresh
          yield* a.addFault({ kind: "page_drift", action: "delete", every: 2, path: "/v1/financial_accounts" })
          const { ids, totals } = yield* crawl("/v1/financial_accounts", 50)
          const entries = yield* a.requests({ path: "/v1/financial_accounts" })
          const deleted = new Set(entries.flatMap((e) => e.faults).map((f) => f.split(":")[2]!))
          assert.isAbove(deleted.size, 0)
          assert.isBelow(totals[totals.length - 1]!, totals[0]!)
          yield* a.clearFaults
          const live = (yield* crawl("/v1/financial_accounts", 100)).ids
          const seen = new Set(ids)
          const skipped = live.filter((id) => !seen.has(id))
          assert.isAbove(skipped.length, 0, "records that existed all along were never seen")
          for (const id of deleted) assert.notInclude(live, id)
        })
      )

      it.effect("faults: page drift inserting records grows the list during a crawl", () =>
        Effect.gen(function* () {
          const a = yield* fresh
          yield* a.addFault({ kind: "page_drift", action: "insert", every: 1, count: 2, path: "/v1/annuity_contracts" })
          const { ids, totals } = yield* crawl("/v1/annuity_contracts", 100)
          assert.isAbove(totals[totals.length - 1]!, totals[0]!)
          assert.strictEqual(new Set(ids).size, ids.length)
        })
      )

      it.effect("faults: page drift updating records reorders an updated_since crawl (records seen twice)", () =>
        Effect.gen(function* () {
          const a = yield* fresh
          yield* a.addFault({ kind: "page_drift", action: "update", every: 1, count: 3, path: "/v1/businesses" })
          const { ids } = yield* crawl("/v1/businesses?updated_since=2022-01-01T00:00:00Z", 10)
          assert.isBelow(new Set(ids).size, ids.length)
        })
      )

      it.effect("faults: page drift is deterministic for a seed", () =>
        Effect.gen(function* () {
          const run = Effect.gen(function* () {
            const a = yield* fresh
            yield* a.addFault({ id: "drift", kind: "page_drift", action: "mixed", every: 1, path: "/v1/businesses" })
            yield* crawl("/v1/businesses", 20)
            return (yield* a.requests({ path: "/v1/businesses" })).flatMap((e) => e.faults)
          })
          const first = yield* run
          assert.isAbove(first.length, 0)
          assert.deepStrictEqual(yield* run, first)
        })
      )
    })

    describe("webhook faults", () => {
      const subscribed = Effect.gen(function* () {
        const a = yield* fresh
        const receiver = yield* startWebhookReceiver
        const app = (yield* a.apps)[0]!
        const endpoint = yield* a.registerEndpoint({ clientId: app.client_id, url: receiver.url })
        const tokens = yield* a.connect({ clientId: app.client_id, userId: "usr_00000001", companyId: "cmp_00000001" })
        yield* api("/v1/webhook_subscription", { method: "POST", token: tokens.access_token })
        return { a, receiver, secret: endpoint.secret }
      })

      it.effect("faults: webhook_duplicate delivers the same message twice under one hook-id", () =>
        Effect.gen(function* () {
          const { a, receiver, secret } = yield* subscribed
          yield* a.addFault({ kind: "webhook_duplicate", event: "task.*", times: 1 })
          yield* a.actions.createTask({ book_id: "bk_00000001", title: "twice" })
          const webhooks = yield* receiver.awaitReceived(2)
          assert.strictEqual(webhooks[0]!.headers["hook-id"], webhooks[1]!.headers["hook-id"])
          assert.strictEqual(webhooks[0]!.body, webhooks[1]!.body)
          yield* verifyWebhook(secret, webhooks[1]!)
          // The log records an attempt once its answer is in, which can come after the receiver saw it.
          const deliveries = yield* a.deliveries().pipe(
            Effect.repeat({
              until: (logged) => logged.length >= 2,
              schedule: Schedule.spaced("20 millis"),
              times: 100
            })
          )
          assert.deepStrictEqual(
            deliveries.map((d) => d.duplicate),
            [false, true]
          )
        })
      )

      it.effect("faults: webhook_reorder sends a delivery after the next one", () =>
        Effect.gen(function* () {
          const { a, receiver, secret } = yield* subscribed
          yield* a.addFault({ kind: "webhook_reorder", event: "note.created", times: 1 })
          const note = yield* a.actions.createNote({
            parent_type: "household",
            parent_id: "hh_00000001",
            content: "1st"
          })
          const task = yield* a.actions.createTask({ book_id: "bk_00000001", title: "2nd" })
          const webhooks = yield* receiver.awaitReceived(2)
          const ids = yield* Effect.forEach(webhooks, (w) => Effect.map(verifyWebhook(secret, w), (p) => p.id))
          assert.deepStrictEqual(ids, [task.id, note.id])
        })
      )

      it.effect("faults: webhook_delay holds one delivery while later ones go first", () =>
        Effect.gen(function* () {
          const { a, receiver, secret } = yield* subscribed
          yield* a.addFault({ kind: "webhook_delay", ms: 150, event: "task.created", times: 1 })
          const slow = yield* a.actions.createTask({ book_id: "bk_00000001", title: "slow" })
          const note = yield* a.actions.createNote({
            parent_type: "household",
            parent_id: "hh_00000001",
            content: "fast"
          })
          const webhooks = yield* receiver.awaitReceived(2)
          const ids = yield* Effect.forEach(webhooks, (w) => Effect.map(verifyWebhook(secret, w), (p) => p.id))
          assert.deepStrictEqual(ids, [note.id, slow.id])
        })
      )
    })
  }
)
