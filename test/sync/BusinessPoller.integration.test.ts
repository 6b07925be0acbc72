/**
 * BusinessPoller against the sandbox: the first run crawls and leaves the cursor at the crawl's
 * start; later polls ask `updated_since = cursor - lookback` for every page, move the cursor with
 * the data, and a restarted poller resumes from the stored cursor; page drift during a poll holds
 * the cursor back so that the next poll repairs what the drift hid.
 */
import { assert, layer } from "@effect/vitest"
import { DateTime, Effect, Layer } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { Sandbox } from "@crm-sync/sandbox"
import { BusinessPoller } from "../../src/sync/BusinessPoller.ts"
import { compareTable } from "./compare.ts"
import { client, harness, lastSeq, listAll, requestsSince } from "./harness.ts"

const options = { timeout: 120_000, excludeTestServices: true } as const

const poll = Effect.gen(function* () {
  const poller = yield* BusinessPoller
  return yield* poller.poll(yield* client)
})

const storedCursor = Effect.gen(function* () {
  const sql = yield* SqlClient
  const [row] = yield* sql<{ cursor: Date }>`
    SELECT cursor FROM crm_sync.cursors WHERE connection = 'default' AND resource = 'businesses'`
  return row!.cursor
})

const minutesBefore = (date: Date, minutes: number) =>
  DateTime.formatIso(DateTime.makeUnsafe(date.getTime() - minutes * 60_000))

layer(harness(), options)("BusinessPoller", (it) => {
  it.effect("crawls first, then polls from the cursor minus the lookback, and resumes after a restart", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const sandbox = yield* Sandbox
      const first = yield* poll
      assert.strictEqual(first.mode, "crawl")
      const businesses = yield* listAll("/v1/businesses")
      assert.deepStrictEqual(yield* compareTable("businesses", businesses), [])
      const crawlCursor = yield* storedCursor

      const changed = businesses.slice(0, 3).map((business) => String(business.id))
      for (const [index, id] of changed.entries()) {
        yield* sandbox.admin.actions.updateBusiness(id, { name: `Renamed ${index}` })
      }
      const before = yield* lastSeq
      const second = yield* poll
      const requests = yield* requestsSince(before)
      assert.strictEqual(second.mode, "poll")
      assert.strictEqual(requests.length, 1)
      assert.strictEqual(requests[0]!.query.updated_since, minutesBefore(crawlCursor, 5))
      assert.strictEqual(requests[0]!.query.per_page, "100")
      const names = yield* sql<{ id: string; name: string }>`
        SELECT id, name FROM crm.businesses WHERE id = ANY(${changed}::text[]) ORDER BY id`
      assert.deepStrictEqual(
        names.map((row) => row.name),
        ["Renamed 0", "Renamed 1", "Renamed 2"]
      )
      // The cursor moved with the data: to the latest updated_at read.
      const changedRecords = (yield* listAll("/v1/businesses")).filter((business) =>
        changed.includes(String(business.id))
      )
      const latest = Math.max(...changedRecords.map((business) => Date.parse(String(business.updated_at))))
      assert.strictEqual((yield* storedCursor).getTime(), latest)

      // A restarted poller (a new instance, nothing in memory) starts from the stored cursor.
      const cursor = yield* storedCursor
      const restart = yield* lastSeq
      const third = yield* poll.pipe(Effect.provide(BusinessPoller.layer.pipe(Layer.fresh)))
      const resumed = yield* requestsSince(restart)
      assert.strictEqual(resumed[0]!.query.updated_since, minutesBefore(cursor, 5))
      // Within the lookback the same three come back, and are not rewritten.
      assert.strictEqual(third.records, 3)
      assert.strictEqual(third.unchanged, 3)
      assert.strictEqual((yield* storedCursor).getTime(), cursor.getTime())
    })
  )
})

layer(harness({ sandbox: { records: 3000 } }), options)("BusinessPoller page drift", (it) => {
  it.effect("drift during a poll holds the cursor back, and the next poll makes the warehouse equal", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      yield* poll
      // Every business changes, so the poll reads several pages of them in updated_at order.
      const businesses = yield* listAll("/v1/businesses")
      assert.isAbove(businesses.length, 200)
      for (const business of businesses) {
        yield* sandbox.admin.actions.updateBusiness(String(business.id), { name: `${String(business.name)} (new)` })
      }
      // Between page reads: a record already read changes (it moves to the end, pulling the rest
      // back a place), and one is removed (the same, and the total shrinks).
      yield* sandbox.admin.addFault({
        kind: "page_drift",
        path: "/v1/businesses",
        action: "update",
        every: 2,
        times: 1
      })
      yield* sandbox.admin.addFault({
        kind: "page_drift",
        path: "/v1/businesses",
        action: "delete",
        every: 3,
        times: 1
      })
      const before = yield* lastSeq
      const drifted = yield* poll
      const removed = (yield* requestsSince(before)).flatMap((entry) =>
        entry.faults.flatMap((fault) => (fault.startsWith("page_drift:delete:") ? [fault.split(":")[2]!] : []))
      )
      yield* sandbox.admin.clearFaults
      assert.isTrue(drifted.drift)
      assert.isAbove(drifted.pages, 2)
      const latestRead = Math.max(...(yield* listAll("/v1/businesses")).map((b) => Date.parse(String(b.updated_at))))
      assert.isBelow((yield* storedCursor).getTime(), latestRead, "the cursor is held back")
      // What the drift hid: a record skipped at a page boundary is still stale.
      const stale = yield* compareTable(
        "businesses",
        (yield* listAll("/v1/businesses")).filter((b) => !removed.includes(String(b.id)))
      )
      assert.isAbove(stale.length, 0, "the drift made this poll miss something")

      const next = yield* poll
      assert.isFalse(next.drift)
      const truth = yield* listAll("/v1/businesses")
      // Polls see changes, not removals: the removed business stays until a crawl (or reconcile).
      const problems = yield* compareTable("businesses", [...truth, ...(yield* storedRecords(removed))])
      assert.deepStrictEqual(problems, [])
    })
  )
})

/** The stored raw records of these ids (for records the CRM no longer lists). */
const storedRecords = (ids: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const rows = yield* sql<{ raw: Record<string, unknown> }>`
      SELECT raw FROM crm.businesses WHERE id = ANY(${ids}::text[])`
    return rows.map((row) => row.raw)
  })
