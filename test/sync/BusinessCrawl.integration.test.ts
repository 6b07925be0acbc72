/**
 * Deleted businesses in a firm whose business listing is larger than one reconciliation's
 * allowance: the poll cannot see a deletion (spec §4: `updated_since` lists what changed), the
 * reconciliation stops before the end of the listing and so counts no absence, and the daemon's
 * business crawl (its own schedule, resumable across windows) marks the business deleted after two
 * clean crawls miss it, while the other businesses stay live.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Exit, Layer, Scope } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { Sandbox } from "@crm-sync/sandbox"
import { BusinessPoller } from "../../src/sync/BusinessPoller.ts"
import { reconcile } from "../../src/sync/Reconciler.ts"
import { CrawlSchedulerLive } from "../../src/sync/SyncJobs.ts"
import { client, harness, listAll } from "./harness.ts"

const options = { timeout: 180_000, excludeTestServices: true } as const

const poll = Effect.gen(function* () {
  const poller = yield* BusinessPoller
  return yield* poller.poll(yield* client)
})

const deletedAt = (id: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const [row] = yield* sql<{ deleted_at: Date | null }>`SELECT deleted_at FROM crm.businesses WHERE id = ${id}`
    return row?.deleted_at ?? null
  })

// A token bucket of 16 requests per 2-second window: a reconciliation may send 4 (25%).
const world = harness({
  sandbox: { seed: 11, records: 8000 },
  limits: { token: 16, company: 1_000_000, ip: 1_000_000, window: "2 seconds" },
  config: { schedules: { business_crawl: "1 second", crawl: "7 days" } }
})

layer(world, options)("business crawl", (it) => {
  it.effect("a business deleted in the CRM is marked deleted by the business crawl, not by poll or reconcile", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      const sql = yield* SqlClient
      const first = yield* poll
      assert.strictEqual(first.mode, "crawl")
      const businesses = yield* listAll("/v1/businesses")
      const pages = Math.ceil(businesses.length / 100)
      const victim = String(businesses[Math.floor(businesses.length / 2)]!.id)
      yield* sandbox.admin.actions.deleteBusiness(victim)

      // The poll lists what changed: a deletion is not a change it can see.
      const polled = yield* poll
      assert.strictEqual(polled.mode, "poll")
      assert.isNull(yield* deletedAt(victim))

      // The reconciliation's allowance ends before the listing does: no clean pass, no deletion.
      const [report] = yield* reconcile({ connection: "default" })
      assert.isBelow(report!.allowance, pages)
      assert.isFalse(report!.resources.businesses?.clean ?? false)
      assert.isNull(yield* deletedAt(victim))

      // The daemon's business crawl: two clean crawls in a row miss the business, and it is deleted.
      const scope = yield* Scope.make()
      yield* Layer.buildWithScope(CrawlSchedulerLive, scope)
      while ((yield* deletedAt(victim)) === null) yield* Effect.sleep("200 millis")
      yield* Scope.close(scope, Exit.void)

      const [counts] = yield* sql<{ live: number; deleted: number }>`
        SELECT count(*) FILTER (WHERE deleted_at IS NULL)::int AS live,
               count(*) FILTER (WHERE deleted_at IS NOT NULL)::int AS deleted
        FROM crm.businesses`
      assert.deepStrictEqual(counts, { live: businesses.length - 1, deleted: 1 })
      const runs = yield* sql<{ status: string }>`
        SELECT status FROM crm_sync.job_runs WHERE job = 'crawl:businesses' AND status = 'succeeded'`
      assert.isAtLeast(runs.length, 2)
    })
  )
})
