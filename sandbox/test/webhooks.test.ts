/**
 * Conformance of webhook subscriptions (spec §3, §4 rules 7-8), delivery (§5.7, §6.1), the
 * context fields (§6.2), the envelopes (§6.3) and every event of §6.4. A receiver runs in the
 * test as a partner endpoint; every delivery is verified with `standardwebhooks`.
 */
import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import type { SandboxOptions } from "../src/Options.ts"
import { Sandbox } from "../src/Sandbox.ts"
import {
  awaitDeliveries,
  type ReceivedWebhook,
  startWebhookReceiver,
  verifyWebhook,
  type WebhookReceiver
} from "../src/testing.ts"
import type { EventType } from "../src/Webhooks.ts"
import { api, sandboxLayer } from "./fixtures.ts"

const BOOK = "bk_00000001"
const OPTIONS: SandboxOptions = { debounce: "300ms", webhookRetrySchedule: ["50ms", "100ms"] }

interface Setup {
  readonly receiver: WebhookReceiver
  readonly secret: string
  readonly endpointId: string
  readonly clientId: string
  readonly accessToken: string
  readonly subscriptionId: string
}

/** A fresh sandbox with a receiver registered for the bootstrap app and usr_00000001 subscribed. */
const setup = (eventTypes?: ReadonlyArray<EventType>, userId = "usr_00000001") =>
  Effect.gen(function* () {
    const sandbox = yield* Sandbox
    const admin = sandbox.admin
    yield* admin.reset
    const receiver = yield* startWebhookReceiver
    const app = (yield* admin.apps)[0]!
    const endpoint = yield* admin.registerEndpoint({
      clientId: app.client_id,
      url: `${receiver.url}/hooks`,
      eventTypes
    })
    const tokens = yield* admin.connect({ clientId: app.client_id, userId, companyId: "cmp_00000001" })
    const subscription = yield* api("/v1/webhook_subscription", { method: "POST", token: tokens.access_token })
    assert.strictEqual(subscription.status, 201)
    const result: Setup = {
      receiver,
      secret: endpoint.secret,
      endpointId: endpoint.id,
      clientId: app.client_id,
      accessToken: tokens.access_token,
      subscriptionId: subscription.json.id
    }
    return result
  })

/** Waits for `count` deliveries and returns their verified payloads. */
const received = (s: Setup, count: number, prefix: "hook" | "webhook" | "svix" = "hook") =>
  Effect.gen(function* () {
    const webhooks = yield* s.receiver.awaitReceived(count)
    return yield* Effect.forEach(webhooks, (webhook) => verifyWebhook(s.secret, webhook, prefix))
  })

/** A marker event after which nothing earlier can still be on its way (deliveries are in order). */
const marker = (s: Setup, expectedBefore: number) =>
  Effect.gen(function* () {
    const admin = (yield* Sandbox).admin
    const note = yield* admin.actions.createNote({
      parent_type: "household",
      parent_id: "hh_00000001",
      content: "marker"
    })
    const payloads = yield* received(s, expectedBefore + 1)
    const last = payloads[payloads.length - 1]!
    assert.strictEqual(last.event_type, "note.created")
    assert.strictEqual(last.id, note.id)
    return payloads.slice(0, -1)
  })

const taskInput = { book_id: BOOK, title: "Call the custodian" }

const contextOf = (payload: Record<string, unknown>) => ({
  subscription_id: payload.subscription_id,
  user_id: payload.user_id,
  book_id: payload.book_id,
  company_id: payload.company_id
})

layer(sandboxLayer(OPTIONS), { excludeTestServices: true })("sandbox webhooks", (it) => {
  describe("§3 subscriptions", () => {
    it.effect("§3 / §5.6: personal access tokens cannot create or remove subscriptions (403)", () =>
      Effect.gen(function* () {
        for (const method of ["POST", "DELETE"] as const) {
          const response = yield* api("/v1/webhook_subscription", { method })
          assert.strictEqual(response.status, 403, method)
          assert.strictEqual(response.json.error, "oauth_token_required")
          assert.match(response.json.detail, /OAuth/)
        }
      })
    )

    it.effect("§3 / §2.10: subscribing answers 201 with {id, user_id, created_at}; again returns the same one", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const again = yield* api("/v1/webhook_subscription", { method: "POST", token: s.accessToken })
        assert.strictEqual(again.status, 200)
        assert.deepStrictEqual(Object.keys(again.json).toSorted(), ["created_at", "id", "user_id"])
        assert.strictEqual(again.json.id, s.subscriptionId)
        assert.strictEqual(again.json.user_id, "usr_00000001")
        // a token refresh never creates a new subscription
        const admin = (yield* Sandbox).admin
        const refreshed = yield* admin.connect({
          clientId: s.clientId,
          userId: "usr_00000001",
          companyId: "cmp_00000001"
        })
        const third = yield* api("/v1/webhook_subscription", { method: "POST", token: refreshed.access_token })
        assert.strictEqual(third.json.id, s.subscriptionId)
        assert.strictEqual((yield* admin.subscriptions).length, 1)
      })
    )

    it.effect("§3: DELETE answers 204 with an empty body, also when absent; resubscribing gets a new id", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        for (let i = 0; i < 2; i++) {
          const deleted = yield* api("/v1/webhook_subscription", { method: "DELETE", token: s.accessToken })
          assert.strictEqual(deleted.status, 204)
          assert.strictEqual(deleted.text, "")
        }
        const again = yield* api("/v1/webhook_subscription", { method: "POST", token: s.accessToken })
        assert.strictEqual(again.status, 201)
        assert.notStrictEqual(again.json.id, s.subscriptionId)
      })
    )

    it.effect("§4 rule 8: unsubscribing removes only this subscription: API access, endpoints, other users stay", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        const other = yield* admin.connect({ clientId: s.clientId, userId: "usr_00000002", companyId: "cmp_00000001" })
        yield* api("/v1/webhook_subscription", { method: "POST", token: other.access_token })
        yield* api("/v1/webhook_subscription", { method: "DELETE", token: s.accessToken })
        assert.strictEqual((yield* api("/v1/me", { token: s.accessToken })).status, 200)
        assert.strictEqual((yield* admin.endpoints).length, 1)
        const subscriptions = yield* admin.subscriptions
        assert.deepStrictEqual(
          subscriptions.map((sub) => sub.user_id),
          ["usr_00000002"]
        )
        yield* admin.actions.createTask(taskInput)
        const payloads = yield* received(s, 1)
        assert.strictEqual(payloads[0]!.user_id, "usr_00000002")
      })
    )

    it.effect("§4 rule 7: a subscription covers every book the user can access in the token's company", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        for (const book of ["bk_00000001", "bk_00000002", "bk_00000003"]) {
          yield* admin.actions.createTask({ book_id: book, title: `in ${book}` })
        }
        // another company's book, even though usr_00000001 can access it there
        yield* admin.actions.createTask({ book_id: "bk_00000004", title: "elsewhere" })
        const payloads = yield* marker(s, 3)
        assert.deepStrictEqual(
          payloads.map((p) => p.book_id),
          ["bk_00000001", "bk_00000002", "bk_00000003"]
        )
      })
    )

    it.effect("§3: an administrative disconnect removes the subscription; deleting the app removes all of them", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        yield* admin.disconnect({ clientId: s.clientId, userId: "usr_00000001", companyId: "cmp_00000001" })
        assert.strictEqual((yield* admin.subscriptions).length, 0)
        const app = yield* admin.registerApp({ redirectUris: ["http://127.0.0.1/cb"] })
        for (const userId of ["usr_00000001", "usr_00000002"]) {
          const tokens = yield* admin.connect({ clientId: app.client_id, userId, companyId: "cmp_00000001" })
          yield* api("/v1/webhook_subscription", { method: "POST", token: tokens.access_token })
        }
        assert.strictEqual((yield* admin.subscriptions).length, 2)
        yield* admin.deleteApp(app.client_id)
        assert.strictEqual((yield* admin.subscriptions).length, 0)
      })
    )

    it.effect("§3: subscriptions have no inactivity timeout", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        yield* admin.advanceClock("400d")
        yield* admin.actions.createTask(taskInput)
        assert.strictEqual((yield* received(s, 1))[0]!.event_type, "task.created")
      })
    )
  })

  describe("§5.7 / §6.1 delivery", () => {
    it.effect("§5.7: deliveries are signed POSTs with hook-id, hook-timestamp and hook-signature", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        yield* admin.actions.createTask(taskInput)
        const [webhook] = yield* s.receiver.awaitReceived(1)
        assert.match(s.secret, /^whsec_[A-Za-z0-9+/]+=*$/)
        assert.strictEqual(webhook!.headers["content-type"], "application/json")
        assert.match(webhook!.headers["hook-id"]!, /^msg_/)
        assert.match(webhook!.headers["hook-timestamp"]!, /^\d{10}$/)
        assert.match(webhook!.headers["hook-signature"]!, /^v1,[A-Za-z0-9+/]+=*$/)
        assert.strictEqual(webhook!.path, "/hooks")
        const payload = yield* verifyWebhook(s.secret, webhook!)
        assert.strictEqual(payload.event_type, "task.created")
      })
    )

    it.effect("§5.7: verification needs the raw body; re-serialized JSON fails", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        yield* (yield* Sandbox).admin.actions.createTask(taskInput)
        const [webhook] = yield* s.receiver.awaitReceived(1)
        const reserialized: ReceivedWebhook = { ...webhook!, body: JSON.stringify(JSON.parse(webhook!.body), null, 2) }
        const failure = yield* Effect.flip(verifyWebhook(s.secret, reserialized))
        assert.match(failure.message, /signature verification failed/)
        const wrongSecret = yield* Effect.flip(
          verifyWebhook("whsec_" + Buffer.from("x".repeat(24)).toString("base64"), webhook!)
        )
        assert.match(wrongSecret.message, /signature verification failed/)
      })
    )

    it.effect("§6.1: an endpoint's event-type selection filters; an empty selection receives every type", () =>
      Effect.gen(function* () {
        const s = yield* setup(["task.completed"])
        const admin = (yield* Sandbox).admin
        const all = yield* startWebhookReceiver
        const everything = yield* admin.registerEndpoint({ clientId: s.clientId, url: all.url })
        const task = yield* admin.actions.createTask(taskInput)
        yield* admin.actions.completeTask(task.id)
        const selected = yield* received(s, 1)
        assert.deepStrictEqual(
          selected.map((p) => p.event_type),
          ["task.completed"]
        )
        const unfiltered = yield* all.awaitReceived(3)
        const types = yield* Effect.forEach(unfiltered, (w) => verifyWebhook(everything.secret, w))
        assert.deepStrictEqual(
          types.map((p) => p.event_type),
          ["task.created", "task.completed", "task.updated"]
        )
        // the same message goes to both endpoints under the same hook-id
        assert.strictEqual(
          (yield* s.receiver.received)[0]!.headers["hook-id"],
          unfiltered.find((w) => JSON.parse(w.body).event_type === "task.completed")!.headers["hook-id"]
        )
      })
    )

    it.effect("§6.1: two subscribed users of the same book give one copy each, with distinct hook-ids", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        const other = yield* admin.connect({ clientId: s.clientId, userId: "usr_00000002", companyId: "cmp_00000001" })
        const second = yield* api("/v1/webhook_subscription", { method: "POST", token: other.access_token })
        yield* admin.actions.createTask(taskInput)
        const webhooks = yield* s.receiver.awaitReceived(2)
        const payloads = yield* Effect.forEach(webhooks, (w) => verifyWebhook(s.secret, w))
        assert.deepStrictEqual(
          payloads.map((p) => p.subscription_id).toSorted(),
          [s.subscriptionId, second.json.id].toSorted()
        )
        assert.deepStrictEqual(payloads.map((p) => p.user_id).toSorted(), ["usr_00000001", "usr_00000002"])
        assert.notStrictEqual(webhooks[0]!.headers["hook-id"], webhooks[1]!.headers["hook-id"])
      })
    )

    it.effect("§6.1: eligibility is checked at submission: lost book access, inactive user, disabled app", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        yield* admin.revokeBookAccess("bk_00000002", "usr_00000001")
        yield* admin.actions.createTask({ book_id: "bk_00000002", title: "no access" })
        yield* admin.actions.createTask({ book_id: BOOK, title: "still accessible" })
        assert.deepStrictEqual(
          (yield* marker(s, 1)).map((p) => (p.task as { title: string }).title),
          ["still accessible"]
        )
        assert.strictEqual((yield* admin.subscriptions).length, 1, "the subscription stays")
        yield* admin.deactivateUser("usr_00000001")
        yield* admin.actions.createTask(taskInput)
        yield* admin.activateUser("usr_00000001")
        yield* admin.updateApp(s.clientId, { enabled: false })
        yield* admin.actions.createTask(taskInput)
        yield* admin.updateApp(s.clientId, { enabled: true })
        // only the two earlier deliveries precede the next marker
        assert.strictEqual((yield* marker(s, 2)).length, 2)
        assert.strictEqual((yield* admin.messages({ eventType: "task.created" })).length, 1)
      })
    )

    it.effect("§6.1: messages submitted before an unsubscribe may still arrive after it", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        yield* admin.addFault({ kind: "webhook_delay", ms: 200, event: "task.created", times: 1 })
        yield* admin.actions.createTask(taskInput)
        yield* api("/v1/webhook_subscription", { method: "DELETE", token: s.accessToken })
        const payloads = yield* received(s, 1)
        assert.strictEqual(payloads[0]!.event_type, "task.created")
        assert.strictEqual((yield* admin.subscriptions).length, 0)
      })
    )

    it.effect("§6.1: non-2xx answers are retried on the configured schedule, under the same hook-id", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        yield* s.receiver.setResponder((n) => (n < 2 ? 503 : 200))
        yield* admin.actions.createTask(taskInput)
        const webhooks = yield* s.receiver.awaitReceived(3)
        assert.strictEqual(new Set(webhooks.map((w) => w.headers["hook-id"])).size, 1)
        assert.strictEqual(new Set(webhooks.map((w) => w.body)).size, 1)
        const attempts = yield* awaitDeliveries(admin, { count: 3 })
        assert.deepStrictEqual(
          attempts.map((a) => [a.attempt, a.status, a.outcome]),
          [
            [1, 503, "retrying"],
            [2, 503, "retrying"],
            [3, 200, "delivered"]
          ]
        )
      })
    )

    it.effect("§6.1: after the last attempt the delivery is given up and logged as failed", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        yield* s.receiver.setResponder(() => 500)
        yield* admin.actions.createTask(taskInput)
        const attempts = yield* awaitDeliveries(admin, { count: 3 })
        assert.deepStrictEqual(
          attempts.map((a) => a.outcome),
          ["retrying", "retrying", "failed"]
        )
      })
    )
  })

  describe("§6.2 / §6.3 / §6.4 events", () => {
    it.effect("§6.2: every payload carries subscription_id, user_id, book_id and company_id", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        const task = yield* admin.actions.createTask(taskInput)
        yield* admin.actions.createClient({ book_id: BOOK, name: "Context Family" })
        yield* admin.actions.createProspect({ book_id: BOOK, first_name: "Con", last_name: "Text" })
        yield* admin.actions.deleteTask(task.id)
        const payloads = yield* received(s, 4)
        for (const payload of payloads) {
          assert.deepStrictEqual(contextOf(payload), {
            subscription_id: s.subscriptionId,
            user_id: "usr_00000001",
            book_id: BOOK,
            company_id: "cmp_00000001"
          })
        }
      })
    )

    it.effect(
      "§6.4 task.created: the envelope with the task snapshot; initial text and tags emit no task.updated",
      () =>
        Effect.gen(function* () {
          const s = yield* setup()
          const admin = (yield* Sandbox).admin
          const task = yield* admin.actions.createTask({
            ...taskInput,
            description: "<p>rich</p>",
            tag_ids: ["tag_00000001"],
            assigned_to_id: "usr_00000001"
          })
          const [created] = yield* marker(s, 1)
          assert.deepStrictEqual(Object.keys(created!).toSorted(), [
            "book_id",
            "company_id",
            "event_type",
            "id",
            "subscription_id",
            "task",
            "user_id"
          ])
          assert.strictEqual(created!.event_type, "task.created")
          assert.strictEqual(created!.id, task.id)
          const snapshot = created!.task as Record<string, any>
          assert.strictEqual(snapshot.status, "todo")
          assert.deepStrictEqual(snapshot.tags, [{ id: "tag_00000001", name: "VIP" }])
          assert.strictEqual(snapshot.assigned_to.id, "usr_00000001")
          assert.strictEqual(snapshot.record.type, "household")
        })
    )

    it.effect(
      "§6.4 task.updated: title, description and tag changes; user and team assignment exclude each other",
      () =>
        Effect.gen(function* () {
          const s = yield* setup()
          const admin = (yield* Sandbox).admin
          const task = yield* admin.actions.createTask({ ...taskInput, assigned_to_id: "usr_00000001" })
          yield* admin.actions.updateTask(task.id, { title: "Renamed", assigned_team_id: "team_00000001" })
          const payloads = yield* received(s, 2)
          assert.strictEqual(payloads[1]!.event_type, "task.updated")
          const snapshot = payloads[1]!.task as Record<string, any>
          assert.strictEqual(snapshot.title, "Renamed")
          assert.isNull(snapshot.assigned_to)
          assert.deepStrictEqual(snapshot.assigned_team, { id: "team_00000001", name: "Client Service Team" })
          const invalid = yield* Effect.flip(admin.actions.updateTask(task.id, { assigned_to_id: "usr_00000005" }))
          assert.strictEqual(invalid.status, 422)
        })
    )

    it.effect("§3 / §6.4 task.completed: sets completed_at and also emits task.updated", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        const task = yield* admin.actions.createTask(taskInput)
        yield* admin.actions.completeTask(task.id)
        const payloads = yield* received(s, 3)
        assert.deepStrictEqual(
          payloads.map((p) => p.event_type),
          ["task.created", "task.completed", "task.updated"]
        )
        const snapshot = payloads[1]!.task as Record<string, any>
        assert.strictEqual(snapshot.status, "done")
        assert.isString(snapshot.completed_at)
        assert.strictEqual((yield* api(`/v1/tasks/${task.id}`)).json.status, "done")
      })
    )

    it.effect("§3 / §6.4 task.reopened: done -> todo clears completed_at and also emits task.updated", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        const task = yield* admin.actions.createTask(taskInput)
        // reopening an incomplete task never triggers task.reopened
        yield* admin.actions.reopenTask(task.id)
        yield* admin.actions.completeTask(task.id)
        yield* admin.actions.reopenTask(task.id)
        const payloads = yield* received(s, 5)
        assert.deepStrictEqual(
          payloads.map((p) => p.event_type),
          ["task.created", "task.completed", "task.updated", "task.reopened", "task.updated"]
        )
        const snapshot = payloads[3]!.task as Record<string, any>
        assert.strictEqual(snapshot.status, "todo")
        assert.isNull(snapshot.completed_at)
      })
    )

    it.effect("§6.3 / §6.4 task.deleted: identifiers only, no snapshot", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        const task = yield* admin.actions.createTask(taskInput)
        yield* admin.actions.deleteTask(task.id)
        const payloads = yield* received(s, 2)
        assert.deepStrictEqual(payloads[1], {
          event_type: "task.deleted",
          id: task.id,
          book_id: BOOK,
          subscription_id: s.subscriptionId,
          user_id: "usr_00000001",
          company_id: "cmp_00000001"
        })
        assert.strictEqual((yield* api(`/v1/tasks/${task.id}`)).status, 404)
      })
    )

    it.effect("§6.4: scheduled and unapproved tasks emit none of the task events; approval announces it", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        const scheduled = yield* admin.actions.createTask({ ...taskInput, scheduled: true })
        const unapproved = yield* admin.actions.createTask({ ...taskInput, approved: false })
        for (const task of [scheduled, unapproved]) {
          yield* admin.actions.updateTask(task.id, { title: "changed" })
          yield* admin.actions.completeTask(task.id)
          yield* admin.actions.reopenTask(task.id)
        }
        yield* admin.actions.deleteTask(scheduled.id)
        assert.deepStrictEqual(yield* marker(s, 0), [])
        yield* admin.actions.updateTask(unapproved.id, { approved: true })
        const payloads = yield* received(s, 2)
        assert.strictEqual(payloads[1]!.event_type, "task.created")
        assert.strictEqual(payloads[1]!.id, unapproved.id)
      })
    )

    it.effect("§6.4 meeting.created: snapshot with contacts and businesses, no transcript, no meeting.updated", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        const contact = ((yield* admin.records("contacts", { bookId: BOOK, limit: 1 })) as ReadonlyArray<any>)[0]
        const business = ((yield* admin.records("businesses", { bookId: BOOK, limit: 1 })) as ReadonlyArray<any>)[0]
        const meeting = yield* admin.actions.createMeeting({
          book_id: BOOK,
          title: "Kickoff",
          notepad: "initial notes",
          meeting_link: "https://meet.example.com/abc",
          household_ids: ["hh_00000001"],
          contact_ids: [contact.id],
          business_ids: [business.id],
          user_ids: ["usr_00000001"]
        })
        const payloads = yield* marker(s, 1)
        assert.strictEqual(payloads[0]!.event_type, "meeting.created")
        assert.strictEqual(payloads[0]!.id, meeting.id)
        const snapshot = payloads[0]!.meeting as Record<string, any>
        assert.strictEqual(snapshot.title, "Kickoff")
        assert.deepStrictEqual(
          snapshot.contacts.map((c: any) => c.id),
          [contact.id]
        )
        assert.deepStrictEqual(snapshot.businesses, [{ id: business.id, name: business.name }])
        assert.deepStrictEqual(
          snapshot.households.map((h: any) => h.id),
          ["hh_00000001"]
        )
        assert.notProperty(snapshot, "transcript")
      })
    )

    it.effect("§6.4 meeting.updated: title, links, AI summary and notepad changes", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        const meeting = yield* admin.actions.createMeeting({ book_id: BOOK, title: "Review" })
        yield* admin.actions.updateMeeting(meeting.id, { ai_summary: "Summary" })
        yield* admin.actions.updateMeeting(meeting.id, { notepad: "Notes" })
        yield* admin.actions.updateMeeting(meeting.id, { household_ids: ["hh_00000001"] })
        const payloads = yield* received(s, 4)
        assert.deepStrictEqual(
          payloads.map((p) => p.event_type),
          ["meeting.created", "meeting.updated", "meeting.updated", "meeting.updated"]
        )
        // snapshots are prepared at send time, so each is at least as new as its event
        assert.strictEqual((payloads[3]!.meeting as any).households[0].id, "hh_00000001")
      })
    )

    it.effect("§6.4 meeting.transcript_ready: visible transcripts only, without the transcript text", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        const meeting = yield* admin.actions.createMeeting({ book_id: BOOK, title: "Planning" })
        const segments = [
          {
            text: "Hello",
            participant: { name: "Advisor" },
            start_timestamp: "2025-01-01T10:00:00.000Z",
            end_timestamp: "2025-01-01T10:00:05.000Z"
          }
        ]
        // empty or hidden transcripts never trigger it
        yield* admin.actions.setTranscript(meeting.id, { segments: [] })
        yield* admin.actions.setTranscript(meeting.id, { segments, visible: false })
        // becoming visible triggers it
        yield* admin.actions.setTranscript(meeting.id, { visible: true })
        const payloads = yield* marker(s, 2)
        assert.deepStrictEqual(
          payloads.map((p) => p.event_type),
          ["meeting.created", "meeting.transcript_ready"]
        )
        const snapshot = payloads[1]!.meeting as Record<string, any>
        assert.strictEqual(snapshot.has_transcript, true)
        assert.notProperty(snapshot, "transcript")
        assert.notInclude(JSON.stringify(payloads[1]), "Hello")
        const transcript = yield* api(`/v1/meetings/${meeting.id}/transcript`)
        assert.deepStrictEqual(transcript.json.transcript, segments)
        // a change of a visible transcript triggers it again
        yield* admin.actions.setTranscript(meeting.id, { segments: [...segments, { ...segments[0]!, text: "Bye" }] })
        assert.strictEqual((yield* received(s, 4))[3]!.event_type, "meeting.transcript_ready")
      })
    )

    it.effect("§6.3 / §6.4 meeting.deleted: identifiers only", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        const meeting = yield* admin.actions.createMeeting({ book_id: BOOK, title: "Gone" })
        yield* admin.actions.deleteMeeting(meeting.id)
        const payloads = yield* received(s, 2)
        assert.deepStrictEqual(Object.keys(payloads[1]!).toSorted(), [
          "book_id",
          "company_id",
          "event_type",
          "id",
          "subscription_id",
          "user_id"
        ])
        assert.strictEqual(payloads[1]!.event_type, "meeting.deleted")
        assert.strictEqual((yield* api(`/v1/meetings/${meeting.id}`)).status, 404)
      })
    )

    it.effect("§6.3 / §6.4 note events: created, updated, deleted, with household_id kept at top level", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        const note = yield* admin.actions.createNote({
          parent_type: "household",
          parent_id: "hh_00000001",
          content: "<p>first</p>",
          tag_ids: ["tag_00000002"]
        })
        yield* admin.actions.updateNote(note.id, { content: "<p>second</p>" })
        yield* admin.actions.deleteNote(note.id)
        const payloads = yield* received(s, 3)
        assert.deepStrictEqual(
          payloads.map((p) => p.event_type),
          ["note.created", "note.updated", "note.deleted"]
        )
        for (const payload of payloads) assert.strictEqual(payload.household_id, "hh_00000001")
        assert.strictEqual((payloads[0]!.note as any).tag_ids[0], "tag_00000002")
        assert.strictEqual((payloads[1]!.note as any).content, "<p>second</p>")
        assert.notProperty(payloads[2], "note")
        // a note under a business has no household to carry
        yield* admin.actions.createNote({
          parent_type: "business",
          parent_id: ((yield* admin.records("businesses", { bookId: BOOK, limit: 1 })) as ReadonlyArray<any>)[0].id,
          content: "b"
        })
        const [businessNote] = (yield* received(s, 4)).slice(3)
        assert.notProperty(businessNote, "household_id")
      })
    )

    it.effect("§6.3 client.created: the client fields flat beside the context, no event_type", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        const client = yield* admin.actions.createClient({
          book_id: BOOK,
          name: "Flat Family",
          tier: "gold",
          aum: "125000.00"
        })
        const [payload] = yield* received(s, 1)
        assert.notProperty(payload, "event_type")
        assert.deepStrictEqual(payload, {
          id: client.id,
          name: "Flat Family",
          status: "active",
          tier: "gold",
          aum: "125000.00",
          became_client_at: client.became_client_at,
          type: "client",
          subscription_id: s.subscriptionId,
          user_id: "usr_00000001",
          book_id: BOOK,
          company_id: "cmp_00000001"
        })
      })
    )

    it.effect(
      "§6.3 / §8 client.updated: nested under client, changed_fields accumulated over the debounce window",
      () =>
        Effect.gen(function* () {
          const s = yield* setup()
          const admin = (yield* Sandbox).admin
          const client = yield* admin.actions.createClient({ book_id: BOOK, name: "Debounce Family" })
          yield* admin.actions.updateClient(client.id, { tier: "silver" })
          yield* admin.actions.updateClient(client.id, { name: "Debounced Family" })
          yield* admin.actions.updateClient(client.id, { tier: "gold" })
          // nothing yet: the window (300 ms here, 60 s by default) is still open
          assert.strictEqual((yield* admin.messages({ eventType: "client.updated" })).length, 0)
          const payloads = yield* received(s, 2)
          const updated = payloads[1]!
          assert.notProperty(updated, "event_type")
          assert.deepStrictEqual(updated.changed_fields, ["tier", "name"])
          assert.deepStrictEqual((updated.client as any).name, "Debounced Family")
          assert.deepStrictEqual((updated.client as any).tier, "gold")
          assert.deepStrictEqual(Object.keys(updated).toSorted(), [
            "book_id",
            "changed_fields",
            "client",
            "company_id",
            "subscription_id",
            "user_id"
          ])
          // a later change opens a new window
          yield* admin.actions.updateClient(client.id, { status: "inactive" })
          const next = (yield* received(s, 3))[2]!
          assert.deepStrictEqual(next.changed_fields, ["status"])
        })
    )

    it.effect("§8: advancing the sandbox clock past the debounce window sends client.updated at once", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        const client = yield* admin.actions.createClient({ book_id: BOOK, name: "Clocked" })
        yield* admin.actions.updateClient(client.id, { aum: "1.00" })
        yield* admin.advanceClock("1s")
        assert.strictEqual((yield* admin.messages({ eventType: "client.updated" })).length, 1)
        assert.deepStrictEqual((yield* received(s, 2))[1]!.changed_fields, ["aum"])
      })
    )

    it.effect("§6.3 prospect.created: the record flat without event_type, also for POST /v1/prospects", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const created = yield* api("/v1/prospects", {
          method: "POST",
          json: { book_id: BOOK, first_name: "Via", last_name: "Api" }
        })
        const [payload] = yield* received(s, 1)
        assert.notProperty(payload, "event_type")
        assert.strictEqual(payload!.id, created.json.id)
        assert.strictEqual(payload!.first_name, "Via")
        assert.strictEqual(payload!.type, "prospect")
        assert.strictEqual(payload!.subscription_id, s.subscriptionId)
      })
    )

    it.effect("§6.3: events without event_type are told apart by an endpoint filtered to one event", () =>
      Effect.gen(function* () {
        const s = yield* setup(["client.created"])
        const admin = (yield* Sandbox).admin
        yield* admin.actions.createProspect({ book_id: BOOK, first_name: "P", last_name: "Q" })
        const client = yield* admin.actions.createClient({ book_id: BOOK, name: "Only Client" })
        const payloads = yield* received(s, 1)
        assert.strictEqual(payloads[0]!.id, client.id)
        assert.strictEqual(payloads[0]!.type, "client")
      })
    )
  })
})

layer(sandboxLayer({ ...OPTIONS, webhookHeaderPrefix: "svix" }), { excludeTestServices: true })(
  "sandbox webhooks with another header prefix",
  (it) => {
    it.effect("§5.7: the header prefix is configurable (svix-id, svix-timestamp, svix-signature)", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        yield* (yield* Sandbox).admin.actions.createTask(taskInput)
        const [webhook] = yield* s.receiver.awaitReceived(1)
        assert.isDefined(webhook!.headers["svix-id"])
        assert.isUndefined(webhook!.headers["hook-id"])
        const payload = yield* verifyWebhook(s.secret, webhook!, "svix")
        assert.strictEqual(payload.event_type, "task.created")
      })
    )
  }
)

layer(sandboxLayer({ ...OPTIONS, webhookPrepareDelay: "150ms" }), { excludeTestServices: true })(
  "sandbox webhooks with delayed snapshots",
  (it) => {
    it.effect("§6.1: snapshots are prepared asynchronously and may be newer than the event", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        const task = yield* admin.actions.createTask(taskInput)
        yield* admin.actions.updateTask(task.id, { title: "Newer title" })
        const payloads = yield* received(s, 2)
        assert.strictEqual(payloads[0]!.event_type, "task.created")
        assert.strictEqual((payloads[0]!.task as any).title, "Newer title")
      })
    )

    it.effect("§6.4: a task reopened before delivery can show status todo in task.completed", () =>
      Effect.gen(function* () {
        const s = yield* setup()
        const admin = (yield* Sandbox).admin
        const task = yield* admin.actions.createTask(taskInput)
        yield* admin.actions.completeTask(task.id)
        yield* admin.actions.reopenTask(task.id)
        const payloads = yield* received(s, 5)
        const completed = payloads.find((p) => p.event_type === "task.completed")!
        assert.strictEqual((completed.task as any).status, "todo")
      })
    )
  }
)
