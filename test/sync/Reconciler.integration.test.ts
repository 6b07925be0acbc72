/**
 * The reconciliation against the sandbox: drift made in the CRM without syncing (changes, creations,
 * removals) and in the warehouse (a lost row) is found and repaired, a removed record is deleted
 * only by the second clean pass; the budget share caps the requests a run sends (the sandbox's log
 * agrees), a partial run resumes where it stopped in the next window; every run writes its report
 * row; the daemon's schedule runs it on its cron under the lease, recorded in job_runs.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Exit, Layer, Scope } from "effect"
import { FetchHttpClient } from "effect/http"
import { SqlClient } from "effect/sql/SqlClient"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { RateBudget } from "../../src/budget/RateBudget.ts"
import { Credentials } from "../../src/crm/Credentials.ts"
import { Sandbox } from "@crm-sync/sandbox"
import { CrawlRuns } from "../../src/sync/CrawlRuns.ts"
import { reconcile } from "../../src/sync/Reconciler.ts"
import { type ReconcileReport, ReconcileResources } from "../../src/sync/ReconcileReport.ts"
import { ReconcileSchedulerLive } from "../../src/sync/ReconcileSchedule.ts"
import { SyncServicesLive } from "../../src/sync/SyncJobs.ts"
import { Warehouse } from "../../src/warehouse/Warehouse.ts"
import { TestDatabase } from "../support/TestDatabase.ts"
import { compareTable } from "./compare.ts"
import { harness, lastSeq, listAll, pagesAsked, requestsSince, unthrottled } from "./harness.ts"

const options = { timeout: 120_000, excludeTestServices: true } as const

const paths = {
  businesses: "/v1/businesses",
  annuity_contracts: "/v1/annuity_contracts",
  financial_accounts: "/v1/financial_accounts"
} as const

/** One run for the `default` connection. */
const runOnce = Effect.map(reconcile({ connection: "default" }), (reports) => reports[0]!)

const reportRow = (id: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const [row] = yield* sql<{ status: string; requests: number; finished_at: Date | null; report: ReconcileReport }>`
      SELECT status, requests, finished_at, report FROM crm_sync.reconciliation_reports WHERE id = ${id}`
    return row!
  })

const sourceOf = (table: string, id: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const [row] = yield* sql.unsafe<{ source: string; deleted_at: Date | null }>(
      `SELECT source, deleted_at FROM crm."${table}" WHERE id = $1`,
      [id]
    )
    return row
  })

layer(harness(), options)("drift repaired", (it) => {
  it.effect(
    "missing, stale and removed records are found and repaired in one run; a deletion is confirmed by a second read",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient
        const sandbox = yield* Sandbox

        // An empty warehouse: everything is missing, and every record is written.
        const first = yield* runOnce
        assert.strictEqual(first.status, "complete")
        for (const resource of ReconcileResources) {
          const truth = yield* listAll(paths[resource])
          const checked = first.resources[resource]!
          assert.strictEqual(checked.api_total, truth.length)
          assert.strictEqual(checked.missing, truth.length)
          assert.strictEqual(checked.repaired, truth.length)
          assert.isTrue(checked.complete && checked.clean)
          assert.deepStrictEqual(yield* compareTable(resource, truth), [])
        }

        // A second pass finds nothing to do and writes nothing.
        const quiet = yield* runOnce
        for (const resource of ReconcileResources) {
          const checked = quiet.resources[resource]!
          assert.deepInclude(checked, { missing: 0, stale: 0, gone: 0, repaired: 0, deleted: 0 })
          assert.strictEqual(checked.api_total, checked.warehouse_live)
        }

        // Drift behind crm-sync's back: changes, a creation and a removal in the CRM, a row lost here.
        const [business, lost] = yield* listAll(paths.businesses)
        const [contract] = yield* listAll(paths.annuity_contracts)
        const [account, removed] = yield* listAll(paths.financial_accounts)
        const book = String(business!.book_id)
        yield* sandbox.admin.actions.updateBusiness(String(business!.id), { name: "Renamed Holdings" })
        yield* sandbox.admin.actions.updateAnnuityContract(String(contract!.id), { notes: "re-papered" })
        yield* sandbox.admin.actions.updateFinancialAccount(String(account!.id), { balance_in_cents: 123_456 })
        const created = yield* sandbox.admin.actions.createBusiness({ book_id: book, name: "New Venture" })
        yield* sandbox.admin.actions.deleteFinancialAccount(String(removed!.id))
        yield* sql`DELETE FROM crm.businesses WHERE id = ${String(lost!.id)}`

        const repaired = yield* runOnce
        assert.strictEqual(repaired.status, "complete")
        const businesses = repaired.resources.businesses!
        assert.deepInclude(businesses, { missing: 2, stale: 1, repaired: 3, gone: 0 })
        assert.deepInclude(repaired.resources.annuity_contracts!, { missing: 0, stale: 1, repaired: 1 })
        const accounts = repaired.resources.financial_accounts!
        // The removed account: absent from the clean pass, confirmed by a second read in the same run.
        assert.deepInclude(accounts, { missing: 0, stale: 1, repaired: 1, gone: 1, deleted: 1, refused: 0 })
        assert.strictEqual(accounts.confirm_pages, accounts.total_pages)
        assert.strictEqual(accounts.api_total! + 1, accounts.warehouse_live)
        assert.deepStrictEqual(accounts.gone_ids, [String(removed!.id)])
        // The report names the records it repaired.
        assert.sameMembers([...businesses.repaired_ids!], [String(business!.id), String(lost!.id), String(created.id)])
        assert.deepStrictEqual(repaired.resources.annuity_contracts!.repaired_ids, [String(contract!.id)])
        assert.deepStrictEqual(accounts.repaired_ids, [String(account!.id)])
        assert.strictEqual((yield* sourceOf("businesses", String(created.id)))!.source, "reconcile")
        assert.strictEqual((yield* sourceOf("financial_accounts", String(account!.id)))!.source, "reconcile")
        const gone = (yield* sourceOf("financial_accounts", String(removed!.id)))!
        assert.isNotNull(gone.deleted_at)
        assert.strictEqual(gone.source, "reconcile")
        for (const resource of ReconcileResources) {
          assert.deepStrictEqual(yield* compareTable(resource, yield* listAll(paths[resource])), [])
        }

        // The next pass finds nothing gone: a deleted row is not live.
        const confirmed = yield* runOnce
        assert.deepInclude(confirmed.resources.financial_accounts!, { gone: 0, deleted: 0, refused: 0 })

        // Every run wrote its report row, closed, with its requests.
        const rows = yield* sql<{ status: string; requests: number; open: boolean }>`
        SELECT status, requests, finished_at IS NULL AS open FROM crm_sync.reconciliation_reports ORDER BY id`
        assert.strictEqual(rows.length, 4)
        assert.isTrue(rows.every((row) => row.status === "complete" && !row.open && row.requests > 0))
        const stored = yield* reportRow(repaired.id)
        assert.strictEqual(stored.report.resources.financial_accounts!.deleted, 1)
        assert.strictEqual(stored.requests, repaired.requests)
        const [job] = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM crm_sync.job_runs WHERE job = 'reconcile' AND status = 'succeeded'`
        assert.strictEqual(job!.n, 4)
      })
  )
})

layer(harness({ config: { sync: { deletion_threshold: 0.6 } } }), options)("a read that is not whole", (it) => {
  it.effect(
    "a pass whose listing moved under it, or that failed part way, deletes nothing; the next whole one does",
    () =>
      Effect.gen(function* () {
        const sandbox = yield* Sandbox
        yield* runOnce
        const [victim] = yield* listAll(paths.annuity_contracts)
        yield* sandbox.admin.actions.deleteAnnuityContract(String(victim!.id))

        // The listing shrinks between page reads: absences are not counted, nothing is deleted.
        yield* sandbox.admin.addFault({
          kind: "page_drift",
          path: paths.annuity_contracts,
          action: "delete",
          skip: 1,
          times: 1
        })
        const drifted = yield* runOnce
        yield* sandbox.admin.clearFaults
        assert.isTrue(drifted.resources.annuity_contracts!.complete)
        assert.isFalse(drifted.resources.annuity_contracts!.clean)
        assert.deepInclude(drifted.resources.annuity_contracts!, { gone: 0, deleted: 0 })

        // A pass that fails part way (the CRM answers 500 past the client's retries) deletes nothing.
        yield* sandbox.admin.addFault({ kind: "status", status: 500, path: paths.annuity_contracts, skip: 1, times: 5 })
        const failed = yield* Effect.flip(runOnce)
        yield* sandbox.admin.clearFaults
        assert.include(failed.message, "reconcile default")
        assert.isNull((yield* sourceOf("annuity_contracts", String(victim!.id)))!.deleted_at)
        const sql = yield* SqlClient
        const [row] = yield* sql<{ status: string; report: ReconcileReport }>`
        SELECT status, report FROM crm_sync.reconciliation_reports ORDER BY id DESC LIMIT 1`
        assert.strictEqual(row!.status, "failed")
        assert.strictEqual(row!.report.error!.kind, "Crm")
        assert.isFalse(row!.report.resources.annuity_contracts!.complete)

        // The failed run's pass goes on where it stopped (a resumed read counts no absences); the
        // next pass is whole and stable: the victim and the record the drift removed are confirmed
        // by a second read and deleted.
        const resumed = yield* runOnce
        assert.isFalse(resumed.resources.annuity_contracts!.clean)
        const clean = yield* runOnce
        assert.deepInclude(clean.resources.annuity_contracts!, { clean: true, gone: 2, deleted: 2 })
        assert.isNotNull((yield* sourceOf("annuity_contracts", String(victim!.id)))!.deleted_at)
        assert.deepStrictEqual(yield* compareTable("annuity_contracts", yield* listAll(paths.annuity_contracts)), [])
      })
  )
})

layer(harness({ alsoConnections: ["partner"] }), options)("overlapping connections", (it) => {
  it.effect("a record another connection's crawls still list is not deleted by this one's reconciliation", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const runs = yield* CrawlRuns
      yield* runOnce
      // A record only the partner's token lists (another advisor's book): in the warehouse, seen by
      // the partner's last clean crawl, and never in the default connection's listing.
      yield* sql`INSERT INTO crm.financial_accounts (id, source) VALUES ('fa_partners', 'crawl')`
      const crawl = yield* runs.open("partner", "financial_accounts", "crawl")
      yield* sql.withTransaction(
        runs.recordBatch(crawl, {
          lastPage: 1,
          totalPages: 1,
          totalCount: 1,
          ids: ["fa_partners"],
          unique: 1,
          counts: { inserted: 0, updated: 0, unchanged: 1, skipped: 0, rejected: 0 },
          requests: 1,
          rechecks: 0
        })
      )
      yield* sql.withTransaction(runs.finishClean(crawl, { threshold: 0.5, deleteRecords: () => Effect.succeed(0) }))

      // Two clean passes of the default connection (each confirms with a second read) miss it.
      yield* runOnce
      const second = yield* runOnce
      const [row] = yield* sql<{ deleted: boolean }>`
        SELECT deleted_at IS NOT NULL AS deleted FROM crm.financial_accounts WHERE id = 'fa_partners'`
      assert.deepStrictEqual(row, { deleted: false }, "the partner's crawls still list it")
      assert.deepInclude(second.resources.financial_accounts!, { gone: 0, deleted: 0 })
      assert.include(second.resources.financial_accounts!.note ?? "", "still tracked by connection partner (1)")
    })
  )
})

/** A connection whose strictest bucket (token) allows 40 requests per `window`. */
const budgetHarness = (window: string) => {
  const sandbox = Sandbox.layer({
    seed: 11,
    records: 2000,
    limits: { personal: unthrottled, oauth: { user: 1_000_000, app: 1_000_000, ip: 1_000_000 } }
  })
  const config = Layer.unwrap(
    Effect.map(Sandbox, (sandbox) =>
      AppConfig.layerFrom({
        connections: [
          {
            name: "default",
            base_url: sandbox.baseUrl,
            credential: "personal",
            token: sandbox.credentials.personalAccessToken,
            limits: { token: 40, company: 1_000_000, ip: 1_000_000, window }
          }
        ],
        budget: { reconcile_share: 0.25 }
      })
    )
  ).pipe(Layer.provideMerge(sandbox))
  const clientStack = Layer.mergeAll(RateBudget.layer, Credentials.layer).pipe(
    Layer.provideMerge(FetchHttpClient.layer)
  )
  return SyncServicesLive.pipe(
    Layer.provideMerge(Warehouse.layer),
    Layer.provideMerge(clientStack),
    Layer.provideMerge(config),
    Layer.provideMerge(TestDatabase)
  )
}

layer(budgetHarness("6 seconds"), options)("budget share", (it) => {
  it.effect("a run sends at most its share of the window, stops partial, and the next run resumes there", () =>
    Effect.gen(function* () {
      const before = yield* lastSeq
      const first = yield* runOnce
      const sent = yield* requestsSince(before)
      // 25% of 40 requests per window.
      assert.strictEqual(first.allowance, 10)
      assert.strictEqual(first.status, "partial")
      assert.strictEqual(first.stopped, "allowance")
      assert.strictEqual(first.requests, 10)
      assert.isAtMost(sent.length, first.allowance)
      assert.strictEqual(sent.length, first.requests)
      assert.isNotNull(first.next)
      const stored = yield* reportRow(first.id)
      assert.strictEqual(stored.status, "partial")
      assert.strictEqual(stored.requests, 10)
      assert.isNotNull(stored.finished_at)
      assert.deepStrictEqual(stored.report.next, first.next)

      // Another run in the same window has nothing left of the share.
      const mid = yield* lastSeq
      const again = yield* runOnce
      assert.strictEqual(again.allowance, 0)
      assert.strictEqual(again.budget.spent_earlier, 10)
      assert.strictEqual(again.requests, 0)
      assert.strictEqual((yield* requestsSince(mid)).length, 0)
      assert.deepStrictEqual(again.next, first.next)

      // In the next window, the run resumes at the page after the last one read.
      yield* Effect.sleep("7 seconds")
      const resumedAt = yield* lastSeq
      const resumed = yield* runOnce
      assert.deepStrictEqual(resumed.resumed_from, first.next)
      const next = first.next!
      const asked = pagesAsked(yield* requestsSince(resumedAt), paths[next.resource])
      assert.strictEqual(asked[0], next.page, "no page read again")
      assert.isAtMost(resumed.requests, resumed.allowance)
      const checked = resumed.resources[next.resource]!
      assert.strictEqual(checked.first_page, next.page)
      assert.isFalse(checked.clean, "a resumed read counts no absences")
    })
  )
})

layer(budgetHarness("60 seconds"), options)("budget share with retries", (it) => {
  it.effect("retries count against the share: the run sends what its report says, the 503s included", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      yield* sandbox.admin.addFault({ kind: "status", status: 503, path: "/v1/*", times: 2 })
      const before = yield* lastSeq
      const run = yield* runOnce
      const sent = yield* requestsSince(before)
      assert.strictEqual(run.allowance, 10)
      assert.strictEqual(sent.filter((entry) => entry.status === 503).length, 2)
      assert.strictEqual(run.requests, sent.length, "every attempt is counted")
      assert.strictEqual(sent.length, run.allowance, "the first page's two retries came out of the share")
    })
  )
})

layer(harness({ config: { schedules: { reconcile: "* * * * * *" } } }), options)("schedule", (it) => {
  it.effect("the daemon runs the reconciliation on its cron, recorded in job_runs", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const scope = yield* Scope.make()
      yield* Layer.buildWithScope(ReconcileSchedulerLive, scope)
      const succeeded = sql<{ n: number }>`
        SELECT count(*)::int AS n FROM crm_sync.job_runs WHERE job = 'reconcile' AND status = 'succeeded'`
      while ((yield* succeeded)[0]!.n < 2) yield* Effect.sleep("50 millis")
      yield* Scope.close(scope, Exit.void)
      const [reports] = yield* sql<{ n: number; running: number }>`
        SELECT count(*)::int AS n, count(*) FILTER (WHERE status = 'running')::int AS running
        FROM crm_sync.reconciliation_reports`
      assert.isAtLeast(reports!.n, 2)
      assert.strictEqual(reports!.running, 0)
    })
  )
})

layer(
  harness({
    sandbox: { seed: 11, records: 150 },
    limits: { token: 12, company: 1_000_000, ip: 1_000_000, window: "3 seconds" }
  }),
  options
)("a confirmation the allowance cannot pay for", (it) => {
  it.effect("is deferred to the next clean pass, and the report says so", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      const pages = {
        businesses: Math.ceil((yield* listAll(paths.businesses)).length / 100),
        annuity_contracts: Math.ceil((yield* listAll(paths.annuity_contracts)).length / 100),
        financial_accounts: Math.ceil((yield* listAll(paths.financial_accounts)).length / 100)
      }
      const first = yield* runOnce
      assert.strictEqual(first.status, "complete")
      // 25% of 12: a run may send 3 requests, what one pass takes: none are left to confirm with.
      assert.strictEqual(first.allowance, 3)
      assert.isBelow(first.allowance - first.requests, pages.financial_accounts)

      const [removed] = yield* listAll(paths.financial_accounts)
      yield* sandbox.admin.actions.deleteFinancialAccount(String(removed!.id))
      yield* Effect.sleep("3500 millis")
      const deferred = yield* runOnce
      const accounts = deferred.resources.financial_accounts!
      assert.deepInclude(accounts, { clean: true, gone: 1, deleted: 0 })
      assert.isUndefined(accounts.confirm_pages)
      assert.include(accounts.note, "confirming in this run needs")
      assert.isNull((yield* sourceOf("financial_accounts", String(removed!.id)))!.deleted_at)

      yield* Effect.sleep("3500 millis")
      const confirmed = yield* runOnce
      assert.deepInclude(confirmed.resources.financial_accounts!, { clean: true, gone: 1, deleted: 1 })
      assert.isNotNull((yield* sourceOf("financial_accounts", String(removed!.id)))!.deleted_at)
    })
  )
})
