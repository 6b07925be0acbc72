/**
 * The CRM's clock against the receiver's (`clockSkew`) and deliveries that fail at first
 * (`webhook_fail`): every timestamp the sandbox writes and every signature follow the skewed
 * clock, and a retried delivery is signed at the time of its own attempt, under the same hook-id.
 */
import { assert, describe, layer } from "@effect/vitest"
import { Effect, Result } from "effect"
import { resolveOptions } from "../src/Options.ts"
import { Sandbox } from "../src/Sandbox.ts"
import { awaitDeliveries, startWebhookReceiver, verifyWebhook } from "../src/testing.ts"
import { admin, api, sandboxLayer } from "./fixtures.ts"

const SKEW_MS = -90_000
/** Far below the skew, far above how long a test step takes. */
const SLACK_MS = 30_000

const subscribed = Effect.gen(function* () {
  const a = yield* admin
  yield* a.reset
  const receiver = yield* startWebhookReceiver
  const app = (yield* a.apps)[0]!
  const endpoint = yield* a.registerEndpoint({ clientId: app.client_id, url: receiver.url })
  const tokens = yield* a.connect({ clientId: app.client_id, userId: "usr_00000001", companyId: "cmp_00000001" })
  yield* api("/v1/webhook_subscription", { method: "POST", token: tokens.access_token })
  return { a, receiver, secret: endpoint.secret }
})

const taskOf = (a: Sandbox["Service"]["admin"]) =>
  Effect.map(a.records("tasks", { bookId: "bk_00000001", limit: 2 }), (rows) => rows as ReadonlyArray<{ id: string }>)

describe("clockSkew option", () => {
  layer(sandboxLayer())("resolution", (it) => {
    it.effect("a leading - puts the clock behind; a number is milliseconds; nonsense is refused", () =>
      Effect.gen(function* () {
        assert.strictEqual((yield* resolveOptions({ clockSkew: "-90s" })).clockSkewMs, -90_000)
        assert.strictEqual((yield* resolveOptions({ clockSkew: "2m" })).clockSkewMs, 120_000)
        assert.strictEqual((yield* resolveOptions({ clockSkew: -1_500 })).clockSkewMs, -1_500)
        assert.strictEqual((yield* resolveOptions()).clockSkewMs, 0)
        const bad = yield* Effect.result(resolveOptions({ clockSkew: "-soon" }))
        assert.isTrue(Result.isFailure(bad))
      })
    )
  })
})

layer(sandboxLayer({ clockSkew: "-90s", webhookRetrySchedule: ["1s", "1s"] }), { excludeTestServices: true })(
  "a skewed CRM clock and retried deliveries",
  (it) => {
    it.effect("clockSkew: records are stamped and deliveries signed 90 s behind the receiver's clock", () =>
      Effect.gen(function* () {
        const { a, receiver, secret } = yield* subscribed
        const task = yield* a.actions.createTask({ book_id: "bk_00000001", title: "behind" })
        const [webhook] = yield* receiver.awaitReceived(1)
        const expected = Date.now() + SKEW_MS
        assert.isBelow(Math.abs(Date.parse(task.updated_at) - expected), SLACK_MS, task.updated_at)
        assert.isBelow(Math.abs(Number(webhook!.headers["hook-timestamp"]) * 1000 - expected), SLACK_MS)
        // a receiver with a tolerance of 5 minutes still accepts it
        const payload = yield* verifyWebhook(secret, webhook!)
        assert.strictEqual(payload.id, task.id)
      })
    )

    it.effect("clockSkew: the API's Date header is the CRM's clock, 90 s behind", () =>
      Effect.gen(function* () {
        const answer = yield* api("/v1/me")
        assert.strictEqual(answer.status, 200)
        const date = Date.parse(answer.headers["date"] ?? "")
        // An HTTP date has whole seconds: within a few of the skewed clock, far from the machine's.
        assert.isBelow(Math.abs(date - (Date.now() + SKEW_MS)), 5_000, answer.headers["date"])
      })
    )

    it.effect("webhook_fail: unsent first attempts, then the retry, signed at its own time, same hook-id", () =>
      Effect.gen(function* () {
        const { a, receiver, secret } = yield* subscribed
        const [other, target] = yield* taskOf(a)
        yield* a.addFault({ kind: "webhook_fail", event: "task.*", record: target!.id, attempts: 2, times: 1 })
        yield* a.actions.updateTask(target!.id, { title: "failed first" })
        yield* a.actions.updateTask(other!.id, { title: "not targeted" })
        const webhooks = yield* receiver.awaitReceived(2)
        const ids = yield* Effect.forEach(webhooks, (w) => Effect.map(verifyWebhook(secret, w), (p) => p.id))
        assert.deepStrictEqual(ids, [other!.id, target!.id])
        // the log has an attempt once its answer is in: four attempts, three of them the target's
        const attempts = (yield* awaitDeliveries(a, { count: 4 })).filter((d) => d.payload.includes(target!.id))
        assert.deepStrictEqual(
          attempts.map((d) => [d.attempt, d.status, d.outcome, d.error]),
          [
            [1, 503, "retrying", "webhook_fail fault: not sent"],
            [2, 503, "retrying", "webhook_fail fault: not sent"],
            [3, 204, "delivered", null]
          ]
        )
        // two retry delays of one second each: the delivered attempt is signed at least 2 s after the first
        const first = Date.parse(attempts[0]!.at)
        assert.isAtLeast(Number(webhooks[1]!.headers["hook-timestamp"]) * 1000, first + 1_000)
        assert.strictEqual(webhooks[1]!.headers["hook-id"], attempts[0]!.message_id)
      })
    )

    it.effect("webhook_fail with webhook_reorder: the held delivery still fails its first attempt", () =>
      Effect.gen(function* () {
        const { a, receiver, secret } = yield* subscribed
        yield* a.addFault({ kind: "webhook_reorder", event: "note.created", times: 1 })
        yield* a.addFault({ kind: "webhook_fail", event: "note.created", times: 1 })
        const note = yield* a.actions.createNote({ parent_type: "household", parent_id: "hh_00000001", content: "1st" })
        const task = yield* a.actions.createTask({ book_id: "bk_00000001", title: "2nd" })
        const webhooks = yield* receiver.awaitReceived(2)
        const ids = yield* Effect.forEach(webhooks, (w) => Effect.map(verifyWebhook(secret, w), (p) => p.id))
        assert.deepStrictEqual(ids, [task.id, note.id])
        const attempts = yield* awaitDeliveries(a, { count: 3 })
        assert.deepStrictEqual(
          attempts.map((d) => [d.event_type, d.attempt, d.status]),
          [
            ["task.created", 1, 204],
            ["note.created", 1, 503],
            ["note.created", 2, 204]
          ]
        )
      })
    )

    it.effect("webhook_fail reach receiver: every attempt arrives, the answer of the first is lost", () =>
      Effect.gen(function* () {
        const { a, receiver } = yield* subscribed
        const [target] = yield* taskOf(a)
        yield* a.addFault({
          kind: "webhook_fail",
          record: target!.id,
          reach: "receiver",
          status: 502,
          attempts: 1,
          times: 1
        })
        yield* a.actions.updateTask(target!.id, { title: "answer lost" })
        const webhooks = yield* receiver.awaitReceived(2)
        assert.strictEqual(webhooks[0]!.headers["hook-id"], webhooks[1]!.headers["hook-id"])
        assert.isAbove(Number(webhooks[1]!.headers["hook-timestamp"]), Number(webhooks[0]!.headers["hook-timestamp"]))
        const attempts = yield* awaitDeliveries(a, { count: 2 })
        assert.deepStrictEqual(
          attempts.map((d) => [d.attempt, d.status, d.outcome]),
          [
            [1, 502, "retrying"],
            [2, 204, "delivered"]
          ]
        )
        assert.strictEqual(attempts[0]!.error, "webhook_fail fault: the receiver answered 204, lost")
      })
    )
  }
)
