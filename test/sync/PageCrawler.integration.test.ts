/**
 * Full-page crawls against the sandbox: page drift mid-crawl (removals re-checked at once,
 * changes caught by the next crawl), deletion by absence after two clean crawls and never after a
 * failed one, a record another connection still crawls held back (and one that stopped crawling
 * holding nothing), a mass disappearance refused and reported, a reappearing record undeleted, an
 * interrupted crawl resumed without asking for its stored pages again, and interruptions landing
 * anywhere in the pipeline leaving the crawl resumable rather than failed.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { Sandbox } from "@crm-sync/sandbox"
import { CrmClient } from "../../src/crm/CrmClient.ts"
import { type CrawlResource, PageCrawler } from "../../src/sync/PageCrawler.ts"
import { Warehouse } from "../../src/warehouse/Warehouse.ts"
import { compareTable } from "./compare.ts"
import { client, harness, lastSeq, listAll, pagesAsked, requestsSince } from "./harness.ts"

const crawl = (resource: CrawlResource, connection?: string) =>
  Effect.gen(function* () {
    const crawler = yield* PageCrawler
    const crm = connection === undefined ? yield* client : yield* Effect.orDie(CrmClient.make(connection))
    return yield* crawler.crawl(crm, resource, { source: "crawl" })
  })

/** Ids the sandbox's page-drift faults removed, from its request log. */
const driftRemovals = (since: number) =>
  Effect.map(requestsSince(since), (entries) =>
    entries.flatMap((entry) =>
      entry.faults.flatMap((fault) => (fault.startsWith("page_drift:delete:") ? [fault.split(":")[2]!] : []))
    )
  )

const liveIds = (table: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const rows = yield* sql.unsafe<{ id: string }>(`SELECT id FROM crm."${table}" WHERE deleted_at IS NULL ORDER BY id`)
    return rows.map((row) => row.id)
  })

const options = { timeout: 120_000, excludeTestServices: true } as const

layer(harness({ sandbox: { records: 2000 } }), options)("page drift during a crawl", (it) => {
  it.effect("removals are re-checked at once; changes are caught by the next crawl", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      // Removals between page reads: the records after them shift back across page boundaries.
      yield* sandbox.admin.addFault({
        kind: "page_drift",
        path: "/v1/financial_accounts",
        action: "delete",
        every: 2,
        times: 3
      })
      const before = yield* lastSeq
      const first = yield* crawl("financial_accounts")
      const removed = yield* driftRemovals(before)
      assert.strictEqual(removed.length, 3)
      assert.isAtLeast(first.rechecks, 1, "pages before a shrink are read again")
      yield* sandbox.admin.clearFaults

      // Every record still in the CRM is stored as it is now; the removed ones that had been read
      // are still live (one crawl's absence proves nothing).
      const truth = yield* listAll("/v1/financial_accounts")
      const stored = new Set(yield* liveIds("financial_accounts"))
      for (const record of truth) assert.isTrue(stored.has(String(record.id)), `${String(record.id)} stored`)
      const extra = [...stored].filter((id) => !truth.some((record) => record.id === id))
      assert.isTrue(
        extra.every((id) => removed.includes(id)),
        "the only extra rows are records removed mid-crawl"
      )

      // Changes and creations mid-crawl: a record changed on a page already read is caught next time.
      yield* sandbox.admin.addFault({
        kind: "page_drift",
        path: "/v1/financial_accounts",
        action: "update",
        every: 2,
        times: 3
      })
      yield* sandbox.admin.addFault({
        kind: "page_drift",
        path: "/v1/financial_accounts",
        action: "insert",
        every: 3,
        times: 2
      })
      yield* crawl("financial_accounts")
      yield* sandbox.admin.clearFaults

      // The next (clean) cycle: the warehouse equals the sandbox, row by row. The records removed
      // during the first crawl have now been missed by two clean crawls and are marked deleted.
      const third = yield* crawl("financial_accounts")
      const now = yield* listAll("/v1/financial_accounts")
      assert.deepStrictEqual(yield* compareTable("financial_accounts", now), [])
      assert.strictEqual(third.deleted, extra.length)
      assert.strictEqual(third.duplicates, 0)
    })
  )
})

layer(harness(), options)("deletion by absence", (it) => {
  it.effect("a record gone from the CRM is deleted after the second clean crawl, never after a failed one", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const sandbox = yield* Sandbox
      yield* crawl("annuity_contracts")
      const [victim] = yield* liveIds("annuity_contracts")
      yield* sandbox.admin.actions.deleteAnnuityContract(victim!)

      const first = yield* crawl("annuity_contracts")
      assert.strictEqual(first.absent, 1)
      assert.strictEqual(first.deleted, 0)
      assert.include(yield* liveIds("annuity_contracts"), victim!, "one clean crawl's absence is not enough")

      // A crawl that fails part way (the CRM keeps answering 500 on the second page) deletes nothing.
      yield* sandbox.admin.addFault({ kind: "status", status: 500, path: "/v1/annuity_contracts", skip: 1, times: 5 })
      const failed = yield* Effect.flip(crawl("annuity_contracts"))
      assert.include(failed.message, "crawl default annuity_contracts")
      yield* sandbox.admin.clearFaults
      assert.include(yield* liveIds("annuity_contracts"), victim!, "a failed crawl deletes nothing")
      const [failedRun] = yield* sql<{ status: string; deleted: number }>`
        SELECT status, deleted FROM crm_sync.crawl_runs ORDER BY id DESC LIMIT 1`
      assert.deepStrictEqual(failedRun, { status: "failed", deleted: 0 })
      const [presence] = yield* sql<{ misses: number }>`
        SELECT misses FROM crm_sync.crawl_misses WHERE resource = 'annuity_contracts' AND id = ${victim!}`
      assert.strictEqual(presence!.misses, 1, "a failed crawl counts no miss")

      // The failed crawl resumes at the page it failed on and completes: the second clean crawl.
      const before = yield* lastSeq
      const second = yield* crawl("annuity_contracts")
      assert.isTrue(second.resumed)
      assert.deepStrictEqual(pagesAsked(yield* requestsSince(before), "/v1/annuity_contracts"), [2])
      assert.strictEqual(second.deleted, 1)
      const [row] = yield* sql<{ deleted_at: Date | null; source: string }>`
        SELECT deleted_at, source FROM crm.annuity_contracts WHERE id = ${victim!}`
      assert.isNotNull(row!.deleted_at)
      assert.strictEqual(row!.source, "crawl")
      const now = yield* listAll("/v1/annuity_contracts")
      assert.deepStrictEqual(yield* compareTable("annuity_contracts", now), [])
    })
  )
})

layer(harness({ alsoConnections: ["partner"] }), options)("two connections to one company", (it) => {
  it.effect("a record the other connection still crawls is held back and named; once it stopped, it goes", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const sandbox = yield* Sandbox
      // Both connections crawl the listing; then the record goes from the CRM.
      yield* crawl("annuity_contracts", "partner")
      yield* crawl("annuity_contracts")
      const [victim] = yield* liveIds("annuity_contracts")
      yield* sandbox.admin.actions.deleteAnnuityContract(victim!)

      const first = yield* crawl("annuity_contracts")
      assert.strictEqual(first.absent, 1)
      const second = yield* crawl("annuity_contracts")
      assert.strictEqual(second.deleted, 0)
      assert.strictEqual(
        second.note,
        "1 record missing from two clean crawls kept: still tracked by connection partner (1)",
        "partner's last crawl, a few minutes old, listed it"
      )
      assert.include(yield* liveIds("annuity_contracts"), victim!)

      // partner stops crawling: its last clean crawl is now 19 hours old (over 3 × schedules.crawl).
      yield* sql`UPDATE crm_sync.crawl_runs SET started_at = started_at - interval '19 hours',
        finished_at = finished_at - interval '19 hours' WHERE connection = 'partner'`
      const third = yield* crawl("annuity_contracts")
      assert.strictEqual(third.deleted, 1)
      assert.isNull(third.note)
      const [row] = yield* sql<{ deleted_at: Date | null }>`
        SELECT deleted_at FROM crm.annuity_contracts WHERE id = ${victim!}`
      assert.isNotNull(row!.deleted_at, "marked deleted in the warehouse")
      assert.deepStrictEqual(yield* compareTable("annuity_contracts", yield* listAll("/v1/annuity_contracts")), [])
    })
  )
})

/** The token's user loses (or regains) access to the book holding the most financial accounts. */
const bookAccess = (grant: boolean) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const sandbox = yield* Sandbox
    const [book] = yield* sql<{ book_id: string }>`
      SELECT book_id FROM crm.financial_accounts GROUP BY book_id ORDER BY count(*) DESC LIMIT 1`
    const user = sandbox.credentials.userId
    yield* grant
      ? sandbox.admin.grantBookAccess(book!.book_id, user)
      : sandbox.admin.revokeBookAccess(book!.book_id, user)
    return book!.book_id
  })

layer(harness(), options)("mass disappearance", (it) => {
  it.effect("more than the threshold vanishing at once deletes nothing and is reported", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      yield* crawl("financial_accounts")
      const total = (yield* liveIds("financial_accounts")).length
      yield* bookAccess(false)

      const first = yield* crawl("financial_accounts")
      assert.isAbove(first.absent / total, 0.1)
      assert.include(first.note ?? "", "absent from this crawl")
      const second = yield* crawl("financial_accounts")
      assert.strictEqual(second.deleted, 0)
      assert.strictEqual(second.refused, first.absent)
      assert.include(second.note ?? "", "deletion refused")
      assert.strictEqual((yield* liveIds("financial_accounts")).length, total, "nothing deleted")
      const [run] = yield* sql<{ note: string; deleted: number }>`
        SELECT note, deleted FROM crm_sync.crawl_runs ORDER BY id DESC LIMIT 1`
      assert.include(run!.note, "deletion refused")

      // Access back: the records are seen again and nothing is pending any more.
      yield* bookAccess(true)
      const third = yield* crawl("financial_accounts")
      assert.strictEqual(third.absent, 0)
      const [pending] = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM crm_sync.crawl_misses`
      assert.strictEqual(pending!.n, 0)
    })
  )
})

layer(harness({ config: { sync: { deletion_threshold: 0.6 } } }), options)("reappearance", (it) => {
  it.effect("a record deleted by absence is undeleted when it is listed again", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      yield* crawl("financial_accounts")
      const book = yield* bookAccess(false)
      yield* crawl("financial_accounts")
      const second = yield* crawl("financial_accounts")
      assert.isAbove(second.deleted, 0)
      const [gone] = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM crm.financial_accounts WHERE book_id = ${book} AND deleted_at IS NOT NULL`
      assert.strictEqual(gone!.n, second.deleted)

      yield* bookAccess(true)
      const third = yield* crawl("financial_accounts")
      assert.strictEqual(third.undeleted, second.deleted)
      const now = yield* listAll("/v1/financial_accounts")
      assert.deepStrictEqual(yield* compareTable("financial_accounts", now), [])
    })
  )
})

// Enough pages (about 36) that the interruption lands mid-crawl even with every request the
// crawler keeps in flight answered at once.
layer(harness({ sandbox: { records: 6000 } }), options)("interrupted crawl", (it) => {
  it.effect("resumes after the last stored page without asking for stored pages again", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const sandbox = yield* Sandbox
      // Slow pages, so that the crawl is surely interrupted part way.
      yield* sandbox.admin.addFault({ kind: "latency", ms: 150, path: "/v1/financial_accounts" })
      const fiber = yield* Effect.forkChild(crawl("financial_accounts"))
      yield* Effect.gen(function* () {
        while (true) {
          const [run] = yield* sql<{ last_page: number }>`SELECT last_page FROM crm_sync.crawl_runs LIMIT 1`
          if ((run?.last_page ?? 0) >= 3) return
          yield* Effect.sleep("20 millis")
        }
      })
      yield* Fiber.interrupt(fiber)
      yield* sandbox.admin.clearFaults
      const [run] = yield* sql<{ status: string; last_page: number; total_pages: number }>`
        SELECT status, last_page, total_pages FROM crm_sync.crawl_runs`
      assert.strictEqual(run!.status, "running", "an interrupted crawl stays resumable")
      assert.isBelow(run!.last_page, run!.total_pages)
      // What is stored is exactly the records of the stored pages.
      const stored = yield* liveIds("financial_accounts")
      const truth = yield* listAll("/v1/financial_accounts")
      assert.deepStrictEqual(
        stored,
        truth
          .slice(0, run!.last_page * 100)
          .map((record) => String(record.id))
          .toSorted()
      )

      // The request abandoned by the interruption may still be logged late (the sandbox finishes
      // it anyway): only requests that started after the resume are the resumed crawl's.
      const resumedAt = Date.parse((yield* sandbox.admin.state).now)
      const resumed = yield* crawl("financial_accounts")
      const asked = pagesAsked(
        (yield* requestsSince(0)).filter((entry) => Date.parse(entry.at) >= resumedAt),
        "/v1/financial_accounts"
      )
      assert.deepStrictEqual(
        asked,
        Array.from({ length: run!.total_pages - run!.last_page }, (_, i) => run!.last_page + 1 + i)
      )
      assert.isTrue(resumed.resumed)
      assert.strictEqual(resumed.seen, truth.length)
      assert.deepStrictEqual(yield* compareTable("financial_accounts", truth), [])
    })
  )
})

layer(harness({ sandbox: { records: 2000 } }), options)("a batch the database refuses", (it) => {
  it.effect("stops the crawl there: no later page is committed, and the next crawl resumes at it", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const truth = yield* listAll("/v1/financial_accounts")
      const refused = String(truth[550]!.id)
      // The database refuses one record of page 6, after holding its batch long enough for the
      // batch after it to be written beside it.
      yield* sql.unsafe(`CREATE FUNCTION public.refuse_one() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.id = '${refused}' THEN
            PERFORM pg_sleep(0.5);
            RAISE EXCEPTION 'refused for the test' USING ERRCODE = 'XX000';
          END IF;
          RETURN NEW;
        END $$`)
      yield* sql.unsafe(`CREATE TRIGGER refuse_one BEFORE INSERT ON crm.financial_accounts
        FOR EACH ROW EXECUTE FUNCTION public.refuse_one()`)
      const failed = yield* Effect.flip(crawl("financial_accounts"))
      assert.include(failed.message, "crawl default financial_accounts")
      const [run] = yield* sql<{ status: string; last_page: number; total_pages: number }>`
        SELECT status, last_page, total_pages FROM crm_sync.crawl_runs`
      assert.strictEqual(run!.status, "failed")
      assert.isBelow(run!.last_page, 6)
      // Stored: exactly the pages before the refused batch, none after it.
      assert.deepStrictEqual(
        yield* liveIds("financial_accounts"),
        truth
          .slice(0, run!.last_page * 100)
          .map((record) => String(record.id))
          .toSorted()
      )

      yield* sql.unsafe(`DROP TRIGGER refuse_one ON crm.financial_accounts`)
      const before = yield* lastSeq
      const resumed = yield* crawl("financial_accounts")
      assert.isTrue(resumed.resumed)
      assert.deepStrictEqual(
        pagesAsked(yield* requestsSince(before), "/v1/financial_accounts"),
        Array.from({ length: run!.total_pages - run!.last_page }, (_, i) => run!.last_page + 1 + i)
      )
      assert.deepStrictEqual(yield* compareTable("financial_accounts", truth), [])
    })
  )
})

layer(harness({ sandbox: { records: 2000 } }), options)("a record the database refuses", (it) => {
  it.effect("is set aside with PostgreSQL's reason; the crawl stores the rest and completes", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const warehouse = yield* Warehouse
      const truth = yield* listAll("/v1/financial_accounts")
      const refused = String(truth[420]!.id)
      yield* sql.unsafe(`CREATE FUNCTION public.refuse_record() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.id = '${refused}' THEN RAISE EXCEPTION 'account refused for the test'; END IF;
          RETURN NEW;
        END $$`)
      yield* sql.unsafe(`CREATE TRIGGER refuse_record BEFORE INSERT ON crm.financial_accounts
        FOR EACH ROW EXECUTE FUNCTION public.refuse_record()`)
      const summary = yield* crawl("financial_accounts")
      assert.strictEqual(summary.rejected, 1)
      assert.strictEqual(summary.inserted, truth.length - 1)
      const [set] = yield* warehouse.undecodable("financial_accounts")
      assert.strictEqual(set!.recordId, refused)
      assert.include(set!.error, "P0001")
      assert.include(set!.error, "account refused for the test")
      // Stored as received, though the crawl keeps only the row built from it.
      assert.deepStrictEqual(set!.raw, truth[420])
      assert.deepStrictEqual(
        yield* compareTable(
          "financial_accounts",
          truth.filter((record) => record.id !== refused)
        ),
        []
      )
    })
  )
})

layer(harness({ sandbox: { records: 2000 } }), options)("interrupted anywhere", (it) => {
  it.effect("a crawl interrupted at any moment stays resumable, never failed, and completes later", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const sandbox = yield* Sandbox
      yield* sandbox.admin.addFault({ kind: "latency", ms: 5, path: "/v1/financial_accounts" })
      // Interruptions landing at different moments of the pipeline: before the first page, while
      // pages are fetched, decoded, queued and written.
      for (let i = 0; i < 16; i++) {
        const fiber = yield* Effect.forkChild(crawl("financial_accounts"))
        yield* Effect.sleep(`${3 + ((i * 7) % 40)} millis`)
        yield* Fiber.interrupt(fiber)
        const [run] = yield* sql<{ status: string; error: string | null }>`
          SELECT status, error FROM crm_sync.crawl_runs ORDER BY id DESC LIMIT 1`
        assert.notStrictEqual(run?.status, "failed", `interruption ${i}: ${run?.error}`)
      }
      yield* sandbox.admin.clearFaults
      yield* crawl("financial_accounts")
      const truth = yield* listAll("/v1/financial_accounts")
      assert.deepStrictEqual(yield* compareTable("financial_accounts", truth), [])
    })
  )
})
