/**
 * End to end against the CRM sandbox: crm-sync subscribes through the API (OAuth), the sandbox's
 * webhook sender delivers real signed events to the intake — some twice, some late, some out of
 * order (its fault injection) — and once everything is delivered and processed, the warehouse
 * must equal what the CRM's API says.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer, Result } from "effect"
import { FetchHttpClient, HttpServer } from "effect/http"
import { SqlClient } from "effect/sql/SqlClient"
import { RateBudget } from "../../src/budget/RateBudget.ts"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { CrmClient } from "../../src/crm/CrmClient.ts"
import { Credentials } from "../../src/crm/Credentials.ts"
import { Sandbox } from "@crm-sync/sandbox"
import { EVENT_TYPES } from "@crm-sync/sandbox"
import { UntypedEventTypes } from "../../src/crm/Events.ts"
import { Warehouse } from "../../src/warehouse/Warehouse.ts"
import { EventProcessor, EventProcessorLive } from "../../src/webhooks/EventProcessor.ts"
import { subscribe, SubscriptionRefused, unsubscribe } from "../../src/webhooks/Subscriptions.ts"
import { TranscriptReader } from "../../src/webhooks/TranscriptReader.ts"
import { TestDatabase } from "../support/TestDatabase.ts"
import { IntakeServer, makeSecret } from "./harness.ts"

const secrets = {
  default: makeSecret(),
  "client-created": makeSecret(),
  "client-updated": makeSecret(),
  "prospect-created": makeSecret()
}

const SandboxLive = Sandbox.layer({
  records: 120,
  seed: 11,
  debounce: "300 millis",
  webhookReorderHold: "300 millis",
  webhookRetrySchedule: ["200 millis", "500 millis", "1 second", "2 seconds"]
})

/** crm-sync's config, pointed at the sandbox: an OAuth connection (subscriptions) and a personal one. */
const Config = Layer.unwrap(
  Effect.gen(function* () {
    const sandbox = yield* Sandbox
    const { oauthClientId, userId, companyId, personalAccessToken } = sandbox.credentials
    const oauth = yield* sandbox.admin.connect({ clientId: oauthClientId, userId, companyId })
    return AppConfig.layerFrom({
      connections: [
        { name: "sandbox", base_url: sandbox.baseUrl, credential: "oauth", token: oauth.access_token },
        { name: "sandbox-pat", base_url: sandbox.baseUrl, credential: "personal", token: personalAccessToken }
      ],
      webhooks: {
        endpoints: [
          { name: "default", secrets: [secrets.default], connection: "sandbox" },
          { name: "client-created", secrets: [secrets["client-created"]], event_type: "client.created" },
          { name: "client-updated", secrets: [secrets["client-updated"]], event_type: "client.updated" },
          { name: "prospect-created", secrets: [secrets["prospect-created"]], event_type: "prospect.created" }
        ]
      }
    })
  })
)

/** What talks to the CRM: its own fetch client (the test server's client points at the intake). */
const CrmSide = Layer.mergeAll(RateBudget.layer, Credentials.layer).pipe(Layer.provideMerge(FetchHttpClient.layer))

const Processing = EventProcessorLive.pipe(
  Layer.provideMerge(EventProcessor.layerWith({ workerId: "sandbox-test", pollInterval: "500 millis" })),
  Layer.provide(Layer.mergeAll(Warehouse.layer, TranscriptReader.layer.pipe(Layer.provide(CrmSide))))
)

const TestLayer = Layer.mergeAll(Processing, CrmSide).pipe(
  Layer.provideMerge(IntakeServer),
  Layer.provideMerge(Config),
  Layer.provideMerge(TestDatabase),
  Layer.provideMerge(SandboxLive)
)

const iso = (value: Date | null | undefined) => (value == null ? null : value.toISOString())

/** Waits (bounded: 300 × 100 ms) until `check` holds. */
const eventually = <E, R>(check: Effect.Effect<boolean, E, R>, what: string) =>
  Effect.gen(function* () {
    for (let i = 0; i < 300; i++) {
      if (yield* check) return
      yield* Effect.sleep("100 millis")
    }
    assert.fail(`timed out waiting until ${what}`)
  })

layer(TestLayer, { excludeTestServices: true, timeout: 120_000 })("against the sandbox", (it) => {
  it.effect("subscriptions are idempotent and OAuth only; faulty deliveries leave the warehouse equal to the CRM", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      const admin = sandbox.admin
      const sql = yield* SqlClient

      // --- subscriptions (spec §3) ---------------------------------------------------------
      const first = yield* subscribe("sandbox")
      const again = yield* subscribe("sandbox")
      assert.strictEqual(again.subscription.id, first.subscription.id, "subscribing again returns the same one")
      const refused = yield* Effect.result(subscribe("sandbox-pat"))
      assert.isTrue(Result.isFailure(refused) && refused.failure instanceof SubscriptionRefused)
      yield* unsubscribe("sandbox")
      yield* unsubscribe("sandbox")
      assert.lengthOf(yield* admin.subscriptions, 0)
      const current = yield* subscribe("sandbox")
      assert.notStrictEqual(current.subscription.id, first.subscription.id, "a later subscribe creates a new one")

      // --- partner endpoints, with faults -------------------------------------------------
      const server = yield* HttpServer.HttpServer
      const port = (server.address as { readonly port: number }).port
      const url = (name: string) => `http://127.0.0.1:${port}/webhooks/${name}`
      const clientId = sandbox.credentials.oauthClientId
      yield* admin.registerEndpoint({
        clientId,
        url: url("default"),
        secret: secrets.default,
        eventTypes: EVENT_TYPES.filter((type) => !(UntypedEventTypes as ReadonlyArray<string>).includes(type))
      })
      for (const type of UntypedEventTypes) {
        const name = type.replace(".", "-") as keyof typeof secrets
        yield* admin.registerEndpoint({ clientId, url: url(name), secret: secrets[name], eventTypes: [type] })
      }
      yield* admin.addFault({ kind: "webhook_duplicate", probability: 0.3 })
      for (const event of ["task.*", "note.*", "meeting.*"]) {
        yield* admin.addFault({ kind: "webhook_reorder", event, probability: 0.4 })
        yield* admin.addFault({ kind: "webhook_delay", event, ms: 300, probability: 0.2 })
      }

      // --- what the CRM's users do ----------------------------------------------------------
      const state = yield* admin.state
      const book = state.books.find(
        (candidate) =>
          candidate.company_id === sandbox.credentials.companyId &&
          candidate.user_ids.includes(sandbox.credentials.userId)
      )!
      const households = (yield* admin.records("households", { bookId: book.id, limit: 5 })) as ReadonlyArray<{
        id: string
      }>
      // Each change's events get their snapshot before the next change (the sender prepares
      // them asynchronously), and changes are milliseconds apart, so a delivery that arrives
      // late carries a really older snapshot. Changes to one record follow each other, so the
      // reorder fault often swaps two events of the same record.
      const prepared = Effect.map(admin.messages(), (messages) => messages.every((m) => m.prepared_at !== null))
      const step = <A, E, R>(change: Effect.Effect<A, E, R>) =>
        Effect.tap(change, () => Effect.andThen(eventually(prepared, "snapshots prepared"), Effect.sleep("2 millis")))
      const actions = admin.actions

      const tasks: Array<string> = []
      for (let i = 0; i < 8; i++) {
        const id = (yield* step(actions.createTask({ book_id: book.id, title: `Task ${i}` }))).id
        tasks.push(id)
        yield* step(actions.updateTask(id, { title: `Task ${i}, revised` }))
        if (i < 5) yield* step(actions.completeTask(id))
        if (i < 2) {
          yield* step(actions.reopenTask(id))
          yield* step(actions.updateTask(id, { description: "after reopening" }))
        }
        if (i === 7) yield* step(actions.deleteTask(id))
      }

      const meetings: Array<string> = []
      for (let i = 0; i < 3; i++) {
        const id = (yield* step(
          actions.createMeeting({ book_id: book.id, title: `Review ${i}`, household_ids: [households[i]!.id] })
        )).id
        meetings.push(id)
        yield* step(actions.updateMeeting(id, { notepad: `Follow up ${i}` }))
      }
      yield* step(
        actions.setTranscript(meetings[1]!, {
          segments: [
            {
              text: "Hello.",
              participant: { name: "Advisor" },
              start_timestamp: "00:00:01",
              end_timestamp: "00:00:02"
            },
            { text: "Hi!", participant: { name: "Client" }, start_timestamp: "00:00:03", end_timestamp: "00:00:04" }
          ],
          visible: true
        })
      )
      yield* step(actions.updateMeeting(meetings[1]!, { ai_summary: "Discussed the plan." }))
      yield* step(actions.deleteMeeting(meetings[2]!))

      const notes: Array<string> = []
      for (let i = 0; i < 4; i++) {
        const id = (yield* step(
          actions.createNote({ parent_type: "household", parent_id: households[i % 2]!.id, content: `Note ${i}` })
        )).id
        notes.push(id)
        yield* step(actions.updateNote(id, { content: `Note ${i}, edited`, pinned: true }))
        yield* step(actions.updateNote(id, { content: `Note ${i}, edited twice` }))
        if (i === 3) yield* step(actions.deleteNote(id))
      }

      const client = yield* step(actions.createClient({ book_id: book.id, name: "Rivera Family", tier: "gold" }))
      yield* actions.updateClient(client.id, { tier: "platinum", aum: "1200000.00" })
      yield* step(admin.flushDebounce)
      const prospect = yield* step(actions.createProspect({ book_id: book.id, first_name: "Dana", last_name: "Cole" }))

      // --- everything delivered and processed -------------------------------------------
      const messageIds = Effect.map(admin.messages(), (messages) => messages.map((message) => message.id))
      yield* eventually(
        Effect.gen(function* () {
          const ids = yield* messageIds
          const delivered = new Set(
            (yield* admin.deliveries()).filter((d) => d.outcome === "delivered").map((d) => d.message_id)
          )
          if (!ids.every((id) => delivered.has(id))) return false
          const rows = yield* sql<{ n: number }>`
              SELECT count(*)::int AS n FROM crm_sync.webhook_inbox
              WHERE hook_id IN ${sql.in(ids)} AND status = 'processed'`
          return rows[0]!.n === ids.length
        }),
        "every event is delivered and processed"
      )
      const deliveries = yield* admin.deliveries()
      // The faults did their job: some snapshots arrived after a newer one of the same record.
      const newest = new Map<string, string>()
      let olderAfterNewer = 0
      for (const delivery of deliveries.toSorted((a, b) => a.seq - b.seq)) {
        const body = JSON.parse(delivery.payload)
        const snapshot = body.task ?? body.note ?? body.meeting
        if (snapshot === undefined) continue
        const seen = newest.get(snapshot.id)
        if (seen !== undefined && snapshot.updated_at < seen) olderAfterNewer++
        else newest.set(snapshot.id, snapshot.updated_at)
      }
      assert.isAbove(olderAfterNewer, 0, "some deliveries carried an older snapshot than one delivered before them")
      assert.isTrue(
        deliveries.some((d) => d.duplicate),
        "the duplicate fault fired (the sandbox sent some deliveries twice)"
      )

      // --- the warehouse equals the CRM --------------------------------------------------
      const crm = yield* CrmClient.make("sandbox-pat")
      const row = (table: string, id: string) =>
        Effect.map(sql.unsafe<Record<string, any>>(`SELECT * FROM crm.${table} WHERE id = $1`, [id]), (rows) => rows[0])

      for (const id of tasks) {
        const stored = yield* row("tasks", id)
        const live = yield* Effect.result(crm.getTask(id))
        if (Result.isFailure(live)) {
          assert.isNotNull(stored?.deleted_at, `${id} is deleted in the CRM`)
          continue
        }
        const task = Result.getOrThrow(live.success.record)
        assert.isNull(stored?.deleted_at, id)
        assert.strictEqual(stored?.title, task.title, id)
        assert.strictEqual(stored?.description, task.description, id)
        assert.strictEqual(stored?.status, task.status, id)
        assert.strictEqual(
          iso(stored?.completed_at),
          task.completed_at === null ? null : new Date(task.completed_at).toISOString(),
          id
        )
        assert.strictEqual(iso(stored?.updated_at), new Date(task.updated_at).toISOString(), id)
      }
      assert.strictEqual((yield* row("tasks", tasks[0]!))?.status, "todo")
      assert.strictEqual((yield* row("tasks", tasks[0]!))?.description, "after reopening")
      assert.strictEqual((yield* row("tasks", tasks[4]!))?.status, "done")

      for (const id of meetings) {
        const stored = yield* row("meetings", id)
        const live = yield* Effect.result(crm.getMeeting(id))
        if (Result.isFailure(live)) {
          assert.isNotNull(stored?.deleted_at, `${id} is deleted in the CRM`)
          continue
        }
        const meeting = Result.getOrThrow(live.success.record)
        assert.isNull(stored?.deleted_at, id)
        assert.strictEqual(stored?.title, meeting.title, id)
        assert.strictEqual(stored?.notepad, meeting.notepad, id)
        assert.strictEqual(iso(stored?.updated_at), new Date(meeting.updated_at).toISOString(), id)
      }
      const segments = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM crm.meeting_transcript_segments WHERE meeting_id = ${meetings[1]!}`
      assert.strictEqual(segments[0]!.n, 2, "the transcript was read and stored")
      const transcriptReads = yield* admin.requests({ path: `/v1/meetings/${meetings[1]!}/transcript` })
      assert.isAbove(transcriptReads.length, 0)

      for (const id of notes) {
        const stored = yield* row("notes", id)
        const parent = (stored?.household_id ?? "") as string
        assert.notStrictEqual(parent, "", `${id} keeps its household`)
        const live = yield* Effect.result(crm.getHouseholdNote(parent, id))
        if (Result.isFailure(live)) {
          assert.isNotNull(stored?.deleted_at, `${id} is deleted in the CRM`)
          continue
        }
        const note = Result.getOrThrow(live.success.record)
        assert.isNull(stored?.deleted_at, id)
        assert.strictEqual(stored?.content, note.content, id)
        assert.strictEqual(stored?.pinned, note.pinned, id)
        assert.strictEqual(iso(stored?.updated_at), new Date(note.updated_at).toISOString(), id)
      }

      const storedClient = yield* row("clients", client.id)
      assert.strictEqual(storedClient?.tier, "platinum")
      assert.strictEqual(Number(storedClient?.aum), 1200000)
      const changes = yield* sql<{ changed_fields: ReadonlyArray<string> }>`
          SELECT changed_fields FROM crm.client_changes WHERE client_id = ${client.id}`
      assert.sameMembers([...changes[0]!.changed_fields], ["tier", "aum"])
      assert.strictEqual((yield* row("prospects", prospect.id))?.first_name, "Dana")

      // Applied once: as many inbox rows as messages, however many deliveries were sent.
      const ids = yield* messageIds
      const inboxRows = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM crm_sync.webhook_inbox WHERE hook_id IN ${sql.in(ids)}`
      assert.strictEqual(inboxRows[0]!.n, ids.length)
      assert.isAbove(deliveries.length, ids.length)
    })
  )
})
