/**
 * The chaos verdict's history check (seen.ts) against a real warehouse: a content served to a run
 * that succeeded must be a version, and is reported once its version is gone; a content served to
 * a failed run, or to nobody crm-sync runs, is not judged; a `client.updated` field must be held
 * by a version valid at or after its signed time, a late one by a version in the middle.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import type { RequestLogEntry } from "@crm-sync/sandbox"
import { Warehouse } from "../../src/warehouse/Warehouse.ts"
import { type JsonObject, resourceFixture } from "../fixtures/Fixtures.ts"
import { TestDatabase } from "../support/TestDatabase.ts"
import { judgeSeenVersions, type Query } from "./seen.ts"

const TestWarehouse = Warehouse.layer.pipe(Layer.provideMerge(TestDatabase))

/** The sandbox's clock runs a minute ahead of the database's in these tests. */
const SKEW_MS = 60_000

const account = (id: string, updatedAt: string, balance: number): JsonObject => ({
  ...resourceFixture("financial_account"),
  id,
  updated_at: updatedAt,
  balance_in_cents: balance
})

/** A request-log entry of a 2xx page of financial accounts that arrived at `at` (the database's clock). */
const page = (
  at: string,
  records: ReadonlyArray<readonly [string, number]>,
  credential: RequestLogEntry["credential"] = oauth
): RequestLogEntry => ({
  seq: 0,
  at: new Date(Date.parse(at) + SKEW_MS).toISOString(),
  method: "GET",
  path: "/v1/financial_accounts",
  route: "/v1/financial_accounts",
  query: { page: "1", per_page: "100" },
  headers: {},
  idempotency_key: null,
  body: null,
  ip: "127.0.0.1",
  status: 200,
  duration_ms: 5,
  credential,
  faults: [],
  rate_limited: null,
  idempotent_replay: false,
  request_id: `req_${at}`,
  served: { resource: "financial_accounts", records }
})

const oauth = { kind: "oauth", user_id: "usr_1", company_id: "co_1", client_id: "app_1" } as const

const asQuery =
  (sql: SqlClient): Query =>
  (statement, params = []) =>
    Effect.runPromise(sql.unsafe(statement, params as Array<unknown>)) as never

const judge = (sql: SqlClient, requests: ReadonlyArray<RequestLogEntry>, contents: ReadonlyArray<unknown>) =>
  Effect.promise(() =>
    judgeSeenVersions({
      query: asQuery(sql),
      requests,
      contents: contents.map((record) => JSON.stringify(record)),
      clockSkewMs: SKEW_MS,
      connectionOf: (credential) => (credential?.kind === "oauth" ? "chaos" : undefined)
    })
  )

const addRun = (sql: SqlClient, job: string, status: string, from: string, to: string) =>
  sql`INSERT INTO crm_sync.job_runs (job, connection, status, started_at, finished_at)
      VALUES (${job}, 'chaos', ${status}, ${from}::timestamptz, ${to}::timestamptz)`

/** A version of client `id` holding `tier` over [from, to): an ended one, or (no `to`) the row. */
const clientVersion = (sql: SqlClient, id: string, tier: string, from: string, to: string | null) => {
  const raw = JSON.stringify({ id, tier })
  return to === null
    ? sql`INSERT INTO crm.clients (id, version_from, tier, updated_at, raw, source)
          VALUES (${id}, ${from}::timestamptz, ${tier}, ${from}::timestamptz, ${raw}::jsonb, 'webhook')`
    : sql`INSERT INTO crm_history.clients_ended (id, valid_from, valid_to, deleted, tier, updated_at, raw, content_hash, source)
          VALUES (${id}, ${from}::timestamptz, ${to}::timestamptz, false, ${tier}, ${from}::timestamptz,
                  ${raw}::jsonb, md5(${raw}::jsonb::text), 'webhook')`
}

const delivery = (sql: SqlClient, hookId: string, id: string, tier: string, signedAt: string) =>
  sql`INSERT INTO crm_sync.webhook_inbox (hook_id, endpoint, event_type, body, status, signed_at)
      VALUES (${hookId}, 'client-updated', 'client.updated',
              convert_to(${JSON.stringify({ client: { id, tier }, changed_fields: ["tier"] })}, 'UTF8'),
              'processed', ${signedAt}::timestamptz)`

layer(TestWarehouse)("the verdict's history check", (it) => {
  it.effect("a content a succeeded run read is a version; reported once the version is gone", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const warehouse = yield* Warehouse
      const first = account("fa_seen", "2026-03-01T00:00:00Z", 100)
      const second = account("fa_seen", "2026-03-02T00:00:00Z", 200)
      const unstored = account("fa_seen", "2026-03-03T00:00:00Z", 300)
      yield* warehouse.upsert("financial_accounts", [first], { source: "crawl" })
      yield* warehouse.upsert("financial_accounts", [second], { source: "crawl" })
      yield* addRun(sql, "crawl:financial_accounts", "succeeded", "2026-03-05T10:00:00Z", "2026-03-05T10:10:00Z")
      yield* addRun(sql, "crawl:financial_accounts", "failed", "2026-03-05T11:00:00Z", "2026-03-05T11:10:00Z")
      const requests = [
        page("2026-03-05T10:01:00Z", [["fa_seen", 0]]),
        page("2026-03-05T10:02:00Z", [["fa_seen", 1]]),
        page("2026-03-05T10:03:00Z", [["fa_seen", 1]]),
        // read by a run that failed, or by no run of crm-sync's, or outside every run: not judged
        page("2026-03-05T11:01:00Z", [["fa_seen", 2]]),
        page("2026-03-05T10:04:00Z", [["fa_seen", 2]], {
          kind: "personal",
          user_id: "usr_2",
          company_id: "co_1",
          client_id: null
        }),
        page("2026-03-05T12:00:00Z", [["fa_seen", 2]])
      ]
      const contents = [first, second, unstored]
      const sound = yield* judge(sql, requests, contents)
      assert.deepStrictEqual(sound.mismatches, [])
      assert.strictEqual(sound.figures.history_contents_served, 3)
      assert.strictEqual(sound.figures.history_contents_judged, 2)
      assert.strictEqual(sound.figures.history_pages_not_judged, 3)

      yield* sql`DELETE FROM crm_history.financial_accounts_ended WHERE id = 'fa_seen' AND balance_in_cents = 100`
      const broken = yield* judge(sql, requests, contents)
      assert.deepStrictEqual(broken.mismatches, [
        `crm_history.financial_accounts fa_seen: a content the daemon saw at ${requests[0]!.at} (req_2026-03-05T10:01:00Z) is no version`
      ])
    })
  )

  it.effect("a client.updated field is held by a version valid at or after its signed time", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      yield* delivery(sql, "msg_silver", "cli_seen", "silver", "2026-03-02T00:00:00Z")
      yield* delivery(sql, "msg_gold", "cli_seen", "gold", "2026-03-03T00:00:00Z")
      // The late silver delivery placed in the middle of the chain, where it belongs.
      yield* clientVersion(sql, "cli_seen", "bronze", "2026-03-01T00:00:00Z", "2026-03-02T00:00:00Z")
      yield* clientVersion(sql, "cli_seen", "silver", "2026-03-02T00:00:00Z", "2026-03-03T00:00:00Z")
      yield* clientVersion(sql, "cli_seen", "gold", "2026-03-03T00:00:00Z", null)
      const sound = yield* judge(sql, [], [])
      assert.deepStrictEqual(sound.mismatches, [])
      assert.strictEqual(sound.figures.history_client_fields_judged, 2)

      // Dropped instead: bronze runs on until gold, and no version holds silver after its time.
      yield* sql`DELETE FROM crm_history.clients_ended WHERE id = 'cli_seen' AND tier = 'silver'`
      yield* sql`UPDATE crm_history.clients_ended SET valid_to = '2026-03-03T00:00:00Z' WHERE id = 'cli_seen' AND tier = 'bronze'`
      const broken = yield* judge(sql, [], [])
      assert.strictEqual(broken.mismatches.length, 1)
      assert.match(
        broken.mismatches[0]!,
        /^crm_history\.clients cli_seen: a content the daemon saw at 2026-03-02 00:00:00\+00 \(delivery msg_silver, tier\) is no version$/
      )
    })
  )
})
