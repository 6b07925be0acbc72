/**
 * Two crawls of overlapping listings, their batches interleaved on purpose: both must finish. Two
 * users of one company share some books, so each lists records the other lists too, with page
 * boundaries in different places. The test stops one crawl's first transaction just before it
 * takes its first shared record (a trigger waits on an advisory lock the test holds), lets the
 * other crawl run into what the first crawl holds, then lets the first go. A crawl that kept a
 * transaction open, holding row locks, while it waited for something of its own process (an
 * earlier batch of the same crawl) closed a cycle of waits PostgreSQL cannot see: it stalled until
 * its own one-minute guard failed the crawl. And a lock wait that does happen (another writer
 * holding a row far too long) fails after `database.lock_timeout`, leaving the crawl resumable.
 * Many crawls of overlapping listings on a pool of two connections all finish too: a
 * transaction never holds a connection while it waits for another.
 */
import { assert, layer } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Effect, Fiber, Layer, Redacted } from "effect"
import { FetchHttpClient } from "effect/http"
import { SqlClient } from "effect/sql/SqlClient"
import type { Connection } from "effect/sql/SqlConnection"
import { Sandbox } from "@crm-sync/sandbox"
import { RateBudget } from "../../src/budget/RateBudget.ts"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { CrmClient } from "../../src/crm/CrmClient.ts"
import { Credentials } from "../../src/crm/Credentials.ts"
import { PageCrawler } from "../../src/sync/PageCrawler.ts"
import { SyncServicesLive } from "../../src/sync/SyncJobs.ts"
import { Warehouse } from "../../src/warehouse/Warehouse.ts"
import { MigratedDatabase } from "../../src/warehouse/Database.ts"
import { migrate } from "../../src/warehouse/Migrations.ts"
import { freshDatabase, TestDatabase } from "../support/TestDatabase.ts"
import { compareTable } from "./compare.ts"
import { client, listAll, unthrottled } from "./harness.ts"

/** The advisory lock key the trigger waits on while the test holds it. */
const GATE = 28_001
/** The second user of the sandbox's first company: in one or two of its books (user 1 is in all). */
const SECOND_USER = "usr_00000002"

/** Connection `a` (the bootstrap token: user 1, every book) and `b` (user 2, some of them). */
const twoUsers = Layer.unwrap(
  Effect.gen(function* () {
    const sandbox = yield* Sandbox
    const second = yield* sandbox.admin.createToken({ userId: SECOND_USER })
    const connection = (name: string, token: string) => ({
      name,
      base_url: sandbox.baseUrl,
      credential: "personal",
      token,
      limits: unthrottled
    })
    return AppConfig.layerFrom({
      connections: [connection("a", sandbox.credentials.personalAccessToken), connection("b", second.token)]
    })
  })
)

/** A listing as a token sees it, every page. */
const listing = Effect.fnUntraced(function* (token: string) {
  const sandbox = yield* Sandbox
  const records: Array<Record<string, unknown>> = []
  for (let page = 1; ; page++) {
    const url = `${sandbox.baseUrl}/v1/financial_accounts?page=${page}&per_page=100`
    const body = yield* Effect.promise(() =>
      fetch(url, { headers: { authorization: `Bearer ${token}` } }).then(
        (response) =>
          response.json() as Promise<{ data: Array<Record<string, unknown>>; pagination: { total_pages: number } }>
      )
    )
    records.push(...body.data)
    if (body.data.length === 0 || page >= body.pagination.total_pages) return records
  }
})

/** Runs a query on the test's own reserved session. */
const query = <A extends object>(session: Connection, text: string, params: ReadonlyArray<unknown> = []) =>
  Effect.orDie(session.execute(text, params as Array<never>, undefined)) as Effect.Effect<ReadonlyArray<A>>

/** Polls a query answering `yes` on the test's session until it does; false after `attempts` looks without. */
const until = (session: Connection, text: string, attempts = Number.POSITIVE_INFINITY) =>
  Effect.gen(function* () {
    for (let attempt = 0; attempt < attempts; attempt++) {
      const [row] = yield* query<{ yes: boolean }>(session, text)
      if (row?.yes === true) return true
      yield* Effect.sleep("20 millis")
    }
    return false
  })

/** Backends of this database, other than the test's. */
const others = `FROM pg_stat_activity a WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()`

/** The sync services on a fresh database, with the two connections to one sandbox. */
const twoCrawls = SyncServicesLive.pipe(
  Layer.provideMerge(Warehouse.layer),
  Layer.provideMerge(
    Layer.mergeAll(RateBudget.layer, Credentials.layer).pipe(Layer.provideMerge(FetchHttpClient.layer))
  ),
  Layer.provideMerge(
    twoUsers.pipe(
      Layer.provideMerge(
        Sandbox.layer({
          seed: 11,
          records: 3000,
          limits: { personal: unthrottled, oauth: { user: 1_000_000, app: 1_000_000, ip: 1_000_000 } }
        })
      )
    )
  ),
  Layer.provideMerge(TestDatabase)
)

const options = { timeout: 180_000, excludeTestServices: true } as const

layer(twoCrawls, options)("two crawls of overlapping listings", (it) => {
  it.effect(
    "both finish when their batches interleave, and the warehouse holds every record",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient
        const sandbox = yield* Sandbox
        const crawler = yield* PageCrawler
        const second = (yield* sandbox.admin.tokens).find((token) => token.user_id === SECOND_USER)!
        const seenByA = yield* listing(sandbox.credentials.personalAccessToken)
        const seenByB = yield* listing(second.token)
        const shared = new Set(seenByB.map((record) => String(record.id)))
        const pagesOfA = [seenByA.slice(0, 100), seenByA.slice(100, 200)].map((page) =>
          page.map((record) => String(record.id))
        )
        // The first shared record of A's first page opens B's first page; B's first page also
        // reaches into A's second page (B sees fewer books: its pages span more of A's).
        const first = pagesOfA[0]!.find((id) => shared.has(id))!
        const later = pagesOfA[1]!.find((id) => shared.has(id))!
        assert.strictEqual(String(seenByB[0]!.id), first)
        assert.include(
          seenByB.slice(0, 100).map((record) => String(record.id)),
          later,
          "B's first page holds records of A's second page"
        )

        // A's scheduled crawl stops just before it writes the first shared record; B's is a backfill.
        yield* sql.unsafe(`CREATE FUNCTION public.crawl_gate() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.id = '${first}' AND NEW.source = 'crawl' THEN PERFORM pg_advisory_xact_lock_shared(${GATE}); END IF;
          RETURN NEW;
        END $$`)
        yield* sql.unsafe(`CREATE TRIGGER crawl_gate BEFORE INSERT ON crm.financial_accounts
        FOR EACH ROW EXECUTE FUNCTION public.crawl_gate()`)
        const session = yield* sql.reserve
        yield* query(session, `SELECT pg_advisory_lock(${GATE})`)

        const a = yield* CrmClient.make("a").pipe(Effect.orDie)
        const b = yield* CrmClient.make("b").pipe(Effect.orDie)
        const crawlA = yield* Effect.forkChild(crawler.crawl(a, "financial_accounts", { source: "crawl" }))
        yield* until(
          session,
          `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = ${GATE}) AS yes`
        )
        // Whatever else A does while its first transaction waits: a crawl that writes later pages
        // beside it holds their rows (a transaction with writes, idle) by the time this ends.
        yield* until(
          session,
          `SELECT EXISTS (SELECT 1 ${others} AND a.state = 'idle in transaction' AND a.backend_xid IS NOT NULL) AS yes`,
          100
        )

        const crawlB = yield* Effect.forkChild(crawler.crawl(b, "financial_accounts", { source: "backfill" }))
        // B runs until it finishes, or until it waits on a row another transaction holds.
        while (crawlB.pollUnsafe() === undefined) {
          const [row] = yield* query<{ yes: boolean }>(
            session,
            `SELECT EXISTS (SELECT 1 ${others} AND a.wait_event_type = 'Lock' AND a.wait_event <> 'advisory'
            AND a.query LIKE '%financial_accounts%') AS yes`
          )
          if (row?.yes === true) break
          yield* Effect.sleep("20 millis")
        }
        yield* query(session, `SELECT pg_advisory_unlock(${GATE})`)

        // A deadlock detector, not a measure: each crawl writes a few thousand records in well under this.
        const both = yield* Effect.all([Fiber.join(crawlA), Fiber.join(crawlB)]).pipe(
          Effect.timeoutOrElse({
            duration: "100 seconds",
            orElse: () => Effect.die(new Error("the two crawls stalled"))
          })
        )
        assert.strictEqual(both[0].seen, seenByA.length)
        assert.strictEqual(both[1].seen, seenByB.length)
        assert.deepStrictEqual(yield* compareTable("financial_accounts", seenByA), [])
      }),
    { timeout: 150_000 }
  )
})

/** The sync services on crm-sync's own database layer (its session settings), `lock_timeout` 200 ms. */
const shortLockTimeout = Layer.unwrap(
  Effect.map(freshDatabase, (url) => {
    const config = Layer.unwrap(
      Effect.map(Sandbox, (sandbox) =>
        AppConfig.layerFrom({
          database_url: url,
          database: { lock_timeout: "200 millis" },
          connections: [
            {
              name: "default",
              base_url: sandbox.baseUrl,
              credential: "personal",
              token: sandbox.credentials.personalAccessToken,
              limits: unthrottled
            }
          ]
        })
      )
    ).pipe(
      Layer.provideMerge(
        Sandbox.layer({
          seed: 11,
          records: 1000,
          limits: { personal: unthrottled, oauth: { user: 1_000_000, app: 1_000_000, ip: 1_000_000 } }
        })
      )
    )
    return SyncServicesLive.pipe(
      Layer.provideMerge(Warehouse.layer),
      Layer.provideMerge(
        Layer.mergeAll(RateBudget.layer, Credentials.layer).pipe(Layer.provideMerge(FetchHttpClient.layer))
      ),
      Layer.provideMerge(MigratedDatabase),
      Layer.provideMerge(config)
    )
  })
)

layer(shortLockTimeout, options)("a row held too long by another writer", (it) => {
  it.effect("fails the crawl's wait after lock_timeout, resumable; the next crawl completes", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const crawler = yield* PageCrawler
      const crawl = Effect.flatMap(client, (c) => crawler.crawl(c, "financial_accounts", { source: "crawl" }))
      const [setting] = yield* sql<{ lock_timeout: string }>`SHOW lock_timeout`
      assert.strictEqual(setting!.lock_timeout, "200ms")
      const [idle] = yield* sql<{ idle_in_transaction_session_timeout: string }>`
        SHOW idle_in_transaction_session_timeout`
      assert.strictEqual(idle!.idle_in_transaction_session_timeout, "1min", "the default")
      yield* crawl
      const truth = yield* listAll("/v1/financial_accounts")

      // Another writer locks a record of the third page and keeps its transaction open.
      const session = yield* sql.reserve
      yield* query(session, "BEGIN")
      yield* query(session, "SELECT id FROM crm.financial_accounts WHERE id = $1 FOR UPDATE", [String(truth[250]!.id)])
      // A deadlock detector, not a measure: without lock_timeout the crawl would wait for ever.
      const failed = yield* Effect.flip(crawl).pipe(
        Effect.timeoutOrElse({ duration: "60 seconds", orElse: () => Effect.die(new Error("the crawl hung")) })
      )
      assert.include(failed.message, "crawl default financial_accounts")
      assert.include(failed.message, "55P03")
      assert.isTrue(failed.retryable, "the job tries again")
      const [run] = yield* sql<{ status: string; last_page: number }>`
        SELECT status, last_page FROM crm_sync.crawl_runs ORDER BY id DESC LIMIT 1`
      assert.strictEqual(run!.status, "failed")
      assert.isBelow(run!.last_page, 3)

      yield* query(session, "ROLLBACK")
      const resumed = yield* crawl
      assert.isTrue(resumed.resumed)
      assert.deepStrictEqual(yield* compareTable("financial_accounts", truth), [])
    })
  )
})

/** Users 1 to 4 of the first company: user 1 is in its three books, the others in two each. */
const USERS = ["usr_00000001", "usr_00000002", "usr_00000003", "usr_00000004"]

/** One connection per user (`u1` … `u4`), their sync services on a fresh database whose pool has 2 connections. */
const smallPool = Layer.unwrap(
  Effect.map(freshDatabase, (url) => {
    const config = Layer.unwrap(
      Effect.gen(function* () {
        const sandbox = yield* Sandbox
        const connections = []
        for (const [index, userId] of USERS.entries()) {
          const token = yield* sandbox.admin.createToken({ userId })
          connections.push({
            name: `u${index + 1}`,
            base_url: sandbox.baseUrl,
            credential: "personal",
            token: token.token,
            limits: unthrottled
          })
        }
        return AppConfig.layerFrom({ connections })
      })
    ).pipe(
      Layer.provideMerge(
        Sandbox.layer({
          seed: 11,
          records: 6000,
          limits: { personal: unthrottled, oauth: { user: 1_000_000, app: 1_000_000, ip: 1_000_000 } }
        })
      )
    )
    const database = Layer.effectDiscard(Effect.asVoid(migrate)).pipe(
      Layer.provideMerge(PgClient.layer({ url: Redacted.make(url), maxConnections: 2 }))
    )
    return SyncServicesLive.pipe(
      Layer.provideMerge(Warehouse.layer),
      Layer.provideMerge(
        Layer.mergeAll(RateBudget.layer, Credentials.layer).pipe(Layer.provideMerge(FetchHttpClient.layer))
      ),
      Layer.provideMerge(database),
      Layer.provideMerge(config)
    )
  })
)

layer(smallPool, options)("many crawls on a small pool", (it) => {
  it.effect(
    "eight crawls of overlapping listings at once, on two pool connections, all finish",
    () =>
      Effect.gen(function* () {
        const crawler = yield* PageCrawler
        const jobs = USERS.flatMap((_, index) =>
          (["financial_accounts", "annuity_contracts"] as const).map((resource) =>
            Effect.flatMap(CrmClient.make(`u${index + 1}`).pipe(Effect.orDie), (c) =>
              crawler.crawl(c, resource, { source: "crawl" })
            )
          )
        )
        // A deadlock detector, not a measure: together they write about 8,000 records.
        const summaries = yield* Effect.all(jobs, { concurrency: "unbounded" }).pipe(
          Effect.timeoutOrElse({ duration: "100 seconds", orElse: () => Effect.die(new Error("the crawls stalled")) })
        )
        assert.strictEqual(summaries.length, 8)
        // User 1 sees every book: the warehouse holds exactly what user 1's listings hold.
        for (const resource of ["financial_accounts", "annuity_contracts"]) {
          const truth = yield* listAll(`/v1/${resource}`)
          assert.deepStrictEqual(yield* compareTable(resource, truth), [])
        }
      }),
    { timeout: 150_000 }
  )
})
