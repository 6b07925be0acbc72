/**
 * RateBudget against a real PostgreSQL: permits from three buckets at once or from none, one
 * budget shared by independent instances (as separate processes would hold), priorities, and 429
 * blocks that every instance — and a restarted one — honours, with `Retry-After` clamped.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import { Context, Deferred, Duration, Effect, Fiber, Layer } from "effect"
import { TestClock } from "effect/testing"
import { BudgetHandoff } from "../../src/budget/Handoff.ts"
import { type BucketSpec, type Policy, RateBudget } from "../../src/budget/RateBudget.ts"
import { minimumRetryAfter, maximumRetryAfter } from "../../src/budget/RetryAfter.ts"
import { SqlClient, TestDatabase } from "../support/TestDatabase.ts"

const policy: Policy = { reserveInteractive: 0.1, reserveIncremental: 0.1, marginMs: 50, pacing: "learned" }

const bucketsOf = (name: string, limits: { token: number; company: number; ip: number }, windowMs = 3_600_000) =>
  [
    { key: `company:${name}`, scope: "company", limit: limits.company, windowMs },
    { key: `ip:${name}`, scope: "ip", limit: limits.ip, windowMs },
    { key: `token:${name}`, scope: "token", limit: limits.token, windowMs }
  ] satisfies ReadonlyArray<BucketSpec>

/** A connection's token bucket and an egress address every connection shares. */
const sharingIp = (connection: string) =>
  [
    { key: "ip:shares", scope: "ip", limit: 100, windowMs: 60_000 },
    { key: `token:shares-${connection}`, scope: "token", limit: 100, windowMs: 60_000 }
  ] satisfies ReadonlyArray<BucketSpec>

/** A second, independent budget on the same database: what another process would have. */
const otherProcess = Effect.gen(function* () {
  return yield* RateBudget
}).pipe(Effect.provide(RateBudget.layerWith(policy).pipe(Layer.fresh)))

/** Real time (the test clock stands still) for a forked acquirer to reach the database and decide. */
const realPause = Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 200)))

/**
 * Locks the rows of the buckets matching `pattern` in a long transaction of its own (a loaded
 * database); the effect returned releases them.
 */
const holdRows = (pattern: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const release = yield* Deferred.make<void>()
    const locked = yield* Deferred.make<void>()
    yield* Effect.forkChild(
      sql.withTransaction(
        Effect.gen(function* () {
          yield* sql`SELECT bucket FROM crm_sync.rate_windows WHERE bucket LIKE ${pattern} FOR UPDATE`
          yield* Deferred.succeed(locked, undefined)
          yield* Deferred.await(release)
        })
      )
    )
    yield* Deferred.await(locked)
    return Deferred.succeed(release, undefined)
  })

const used = Effect.fnUntraced(function* (bucket: string) {
  const sql = yield* SqlClient
  const rows = yield* sql<{ used: number }>`SELECT used FROM crm_sync.rate_windows WHERE bucket = ${bucket}`
  return rows[0]?.used ?? 0
})

layer(RateBudget.layerWith(policy).pipe(Layer.provideMerge(TestDatabase)))("RateBudget", (it) => {
  it.effect("a 429 below the limit teaches a ceiling: what was sent less every 429 of the block", () =>
    Effect.gen(function* () {
      const budget = yield* RateBudget
      const buckets = bucketsOf("learn", { token: 20, company: 1000, ip: 1000 }, 60_000)
      yield* budget.acquire(buckets, { priority: "interactive", permits: 13 })
      // The 11th was refused, and the 12th and 13th, already in flight, too.
      for (let i = 0; i < 3; i++) yield* budget.markExhausted(buckets, "token", Duration.seconds(5))
      const [token] = (yield* budget.status(buckets)).filter((bucket) => bucket.scope === "token")
      assert.strictEqual(token!.limit, 20)
      assert.strictEqual(token!.learnedLimit, 10)
    })
  )

  it.effect(
    "a window starts when its first request leaves: the grant that opens it says so, the client anchors it",
    () =>
      Effect.gen(function* () {
        const budget = yield* RateBudget
        const sql = yield* SqlClient
        const buckets = bucketsOf("anchor", { token: 5, company: 50, ip: 500 }, 60_000)
        const startOf = Effect.fnUntraced(function* () {
          const rows = yield* sql<{ bucket: string; start_ms: number }>`
          SELECT bucket, (extract(epoch FROM window_start) * 1000)::float8 AS start_ms
          FROM crm_sync.rate_windows WHERE bucket LIKE '%:anchor' ORDER BY bucket`
          return rows.map((row) => row.start_ms)
        })
        const opened = yield* budget.acquire(buckets, { priority: "interactive" })
        assert.isDefined(opened)
        assert.deepStrictEqual(opened!.keys, ["company:anchor", "ip:anchor", "token:anchor"])
        const granted = yield* startOf()
        // The next permit of the same window opens nothing.
        assert.isUndefined(yield* budget.acquire(buckets, { priority: "interactive" }))

        // Its request left 300 ms after the grant (a permit held, a busy event loop).
        yield* budget.anchor(opened!, opened!.start - opened!.offset + 300)
        const anchored = yield* startOf()
        for (const [index, start] of anchored.entries()) assert.closeTo(start - granted[index]!, 300, 1)
        // Once: the window is no longer the one the grant opened.
        yield* budget.anchor(opened!, opened!.start - opened!.offset + 900)
        assert.deepStrictEqual(yield* startOf(), anchored)
        // Never more than a tenth of the window (6 s here) after the grant's time.
        const other = bucketsOf("anchor2", { token: 5, company: 50, ip: 500 }, 60_000)
        const second = yield* budget.acquire(other, { priority: "interactive" })
        yield* budget.anchor(second!, second!.start - second!.offset + 60_000)
        const capped = yield* sql<{ start_ms: number }>`
          SELECT (extract(epoch FROM window_start) * 1000)::float8 AS start_ms
          FROM crm_sync.rate_windows WHERE bucket = 'token:anchor2'`
        assert.closeTo(capped[0]!.start_ms - second!.start, 6_000, 1)
        assert.deepStrictEqual(yield* startOf(), anchored)
        const [token] = (yield* budget.status(buckets)).filter((bucket) => bucket.scope === "token")
        assert.strictEqual(token!.used, 2)
      })
  )

  it.effect("a shared bucket keeps every connection's share for the whole window", () =>
    Effect.gen(function* () {
      const budget = yield* RateBudget
      const sql = yield* SqlClient
      // (The first grant's start once differed from its read-back by a fraction of a millisecond,
      // so the second grant took the window for a new one and dropped the first share.)
      yield* budget.acquire(sharingIp("a"), { priority: "incremental", permits: 2 })
      yield* budget.acquire(sharingIp("b"), { priority: "incremental", permits: 3 })
      const opened = yield* budget.acquire(sharingIp("c"), { priority: "incremental" })
      assert.isUndefined(opened?.keys.find((key) => key === "ip:shares"))
      const [row] = yield* sql<{ shares: Record<string, number> }>`
        SELECT shares FROM crm_sync.rate_windows WHERE bucket = 'ip:shares'`
      assert.deepStrictEqual(row!.shares, { "token:shares-a": 2, "token:shares-b": 3, "token:shares-c": 1 })
    })
  )

  it.effect("counts one permit in each of the three buckets", () =>
    Effect.gen(function* () {
      const budget = yield* RateBudget
      const buckets = bucketsOf("count", { token: 5, company: 50, ip: 500 })
      yield* budget.acquire(buckets, { priority: "interactive" })
      yield* budget.acquire(buckets, { priority: "interactive", permits: 2 })
      const status = yield* budget.status(buckets)
      assert.deepStrictEqual(
        status.map((bucket) => [bucket.bucket, bucket.used, bucket.limit]),
        [
          ["company:count", 3, 50],
          ["ip:count", 3, 500],
          ["token:count", 3, 5]
        ]
      )
      assert.isDefined(status[0]!.resetsAt)
    })
  )

  it.effect("grants all three buckets or none: a full bucket leaves the others untouched", () =>
    Effect.gen(function* () {
      const budget = yield* RateBudget
      const buckets = bucketsOf("atomic", { token: 100, company: 100, ip: 2 })
      yield* budget.acquire(buckets, { priority: "interactive", permits: 2 })
      // (Before the local block, this waited on the locked rows instead.)
      const refused = yield* budget.tryAcquire(buckets, { priority: "interactive" }).pipe(Effect.timeout("2 seconds"))
      assert.isFalse(refused.granted)
      if (!refused.granted) {
        assert.strictEqual(refused.bucket, "ip:atomic")
        assert.strictEqual(refused.reason, "full")
        assert.isTrue(Duration.toMillis(refused.retryIn) > 3_000_000, "waits for the hour's window to end")
      }
      assert.strictEqual(yield* used("token:atomic"), 2)
      assert.strictEqual(yield* used("company:atomic"), 2)
    })
  )

  it.effect("is one budget for every process: concurrent acquirers never exceed a shared limit", () =>
    Effect.gen(function* () {
      const first = yield* RateBudget
      const second = yield* otherProcess
      // Two connections whose only shared bucket is the IP's, limit 10.
      const a = bucketsOf("shared-a", { token: 100, company: 100, ip: 10 }).map((bucket) =>
        bucket.scope === "ip" ? { ...bucket, key: "ip:shared" } : bucket
      )
      const b = bucketsOf("shared-b", { token: 100, company: 100, ip: 10 }).map((bucket) =>
        bucket.scope === "ip" ? { ...bucket, key: "ip:shared" } : bucket
      )
      const results = yield* Effect.all(
        Array.from({ length: 30 }, (_, index) =>
          (index % 2 === 0 ? first : second).tryAcquire(index % 3 === 0 ? a : b, { priority: "interactive" })
        ),
        { concurrency: "unbounded" }
      )
      assert.strictEqual(results.filter((result) => result.granted).length, 10)
      assert.strictEqual(yield* used("ip:shared"), 10)
      // No permit leaked into a token bucket from an acquire that was refused elsewhere.
      assert.strictEqual((yield* used("token:shared-a")) + (yield* used("token:shared-b")), 10)
    })
  )

  it.effect("keeps the reserves of the higher priorities from bulk work", () =>
    Effect.gen(function* () {
      const budget = yield* RateBudget
      const buckets = bucketsOf("reserve", { token: 100, company: 1000, ip: 1000 })
      yield* budget.acquire(buckets, { priority: "bulk", permits: 80 })
      const bulk = yield* budget.tryAcquire(buckets, { priority: "bulk" })
      assert.isFalse(bulk.granted)
      if (!bulk.granted) assert.strictEqual(bulk.reason, "reserve")
      assert.isTrue((yield* budget.tryAcquire(buckets, { priority: "incremental" })).granted)
      yield* budget.acquire(buckets, { priority: "incremental", permits: 9 })
      assert.isFalse((yield* budget.tryAcquire(buckets, { priority: "incremental" })).granted)
      assert.isTrue((yield* budget.tryAcquire(buckets, { priority: "interactive" })).granted)
    })
  )

  it.effect(
    "takes bulk permits ahead on a slow start, by the room left, hands out the rest until they lapse, never past the limit",
    () =>
      Effect.gen(function* () {
        const budget = yield* RateBudget
        // Bulk work may use 800 of 1,000 (two reserves of 10%): at most one permit a refill per
        // 100 of room. A first request takes one; a consumer back within a second for more takes
        // twice as many as its last refill, each time.
        const roomy = bucketsOf("ahead", { token: 1000, company: 10_000, ip: 10_000 })
        const takeAndCount = Effect.andThen(budget.acquire(roomy, { priority: "bulk" }), used("token:ahead"))
        const counts: Array<number> = []
        for (let i = 0; i < 16; i++) counts.push(yield* takeAndCount)
        assert.deepStrictEqual(
          counts,
          [1, 3, 3, 7, 7, 7, 7, 14, 14, 14, 14, 14, 14, 14, 21, 21],
          "refills of 1, 2 and 4, then 7 each: one per 100 of the 793 and 786 left"
        )

        // A small window is taken one permit at a time, up to bulk's share of it and no further.
        const small = bucketsOf("small", { token: 10, company: 1000, ip: 1000 })
        for (let i = 0; i < 8; i++) {
          yield* budget.acquire(small, { priority: "bulk" })
          assert.strictEqual(yield* used("token:small"), i + 1)
        }
        const waiting = yield* Effect.forkChild(budget.acquire(small, { priority: "bulk" }))
        yield* realPause
        assert.isUndefined(waiting.pollUnsafe())
        yield* Fiber.interrupt(waiting)
        assert.strictEqual(yield* used("token:small"), 8)
        // Interactive work takes its permits one at a time, and finds the reserve left for it.
        yield* budget.acquire(small, { priority: "interactive" })
        assert.strictEqual(yield* used("token:small"), 9)
      })
  )

  it.effect("refills bulk permits once for acquirers arriving together", () =>
    Effect.gen(function* () {
      const budget = yield* RateBudget
      const buckets = bucketsOf("together", { token: 1000, company: 10_000, ip: 10_000 })
      yield* Effect.all(
        Array.from({ length: 6 }, () => budget.acquire(buckets, { priority: "bulk" })),
        { concurrency: 6, discard: true }
      )
      assert.strictEqual(yield* used("token:together"), 6, "the refill took one each for those waiting on it")
    })
  )

  it.effect("lets held bulk permits lapse after a second, and drops them on a 429", () =>
    Effect.gen(function* () {
      const budget = yield* RateBudget
      const buckets = bucketsOf("lapse", { token: 1000, company: 10_000, ip: 10_000 })
      yield* budget.acquire(buckets, { priority: "bulk" })
      yield* TestClock.adjust("1001 millis")
      yield* budget.acquire(buckets, { priority: "bulk" })
      assert.strictEqual(yield* used("token:lapse"), 2, "a second apart, each took only its own permit")
      yield* budget.markExhausted(buckets, "token", Duration.seconds(60))
      const waiting = yield* Effect.forkChild(budget.acquire(buckets, { priority: "bulk" }))
      yield* realPause
      assert.isUndefined(waiting.pollUnsafe())
      yield* Fiber.interrupt(waiting)
    })
  )

  it.effect("a long wait hands a scheduled job's worker back: its handoff learns the wait", () =>
    Effect.gen(function* () {
      const budget = yield* RateBudget
      // Bulk work's share of a window of 10: 8 permits; the next waits for a reserve to decay.
      const buckets = bucketsOf("handoff", { token: 10, company: 100, ip: 100 })
      for (let i = 0; i < 8; i++) yield* budget.acquire(buckets, { priority: "bulk" })
      const handoff = yield* Deferred.make<number>()
      const waiting = yield* Effect.forkChild(
        Effect.provideService(budget.acquire(buckets, { priority: "bulk" }), BudgetHandoff, handoff)
      )
      const wait = yield* Deferred.await(handoff)
      assert.isAtLeast(wait, Duration.toMillis(Duration.minutes(10)), "minutes off")
      assert.isUndefined(waiting.pollUnsafe(), "the acquirer itself still waits (the scheduler ends the run)")
      yield* Fiber.interrupt(waiting)
    })
  )

  it.effect("a 429 blocks the named bucket for every process, and after a restart", () =>
    Effect.gen(function* () {
      const budget = yield* RateBudget
      const buckets = bucketsOf("blocked", { token: 100, company: 100, ip: 100 })
      yield* budget.acquire(buckets, { priority: "interactive" })
      const applied = yield* budget.markExhausted(buckets, "company", Duration.seconds(120))
      assert.isTrue(Duration.toMillis(applied) >= 120_000 && Duration.toMillis(applied) <= 125_000)
      // (Before the local block, this waited on the locked rows instead.)
      const refused = yield* budget.tryAcquire(buckets, { priority: "interactive" }).pipe(Effect.timeout("2 seconds"))
      assert.isFalse(refused.granted)
      if (!refused.granted) {
        assert.strictEqual(refused.bucket, "company:blocked")
        assert.strictEqual(refused.reason, "blocked")
      }
      // A process that starts now (a fresh budget instance) reads the block from the database.
      const restarted = yield* otherProcess
      assert.isFalse((yield* restarted.tryAcquire(buckets, { priority: "interactive" })).granted)
      const status = yield* restarted.status(buckets)
      assert.deepStrictEqual(
        status.map((bucket) => [bucket.bucket, bucket.blockedUntil !== undefined]),
        [
          ["company:blocked", true],
          ["ip:blocked", false],
          ["token:blocked", false]
        ]
      )
      // Another connection on the same IP is not held up by this company's block.
      const neighbour = bucketsOf("neighbour", { token: 100, company: 100, ip: 100 }).map((bucket) =>
        bucket.scope === "ip" ? { ...bucket, key: "ip:blocked" } : bucket
      )
      assert.isTrue((yield* budget.tryAcquire(neighbour, { priority: "interactive" })).granted)
    })
  )

  it.effect("a 429 stops this process's other requests at once, before the block reaches the database", () =>
    Effect.gen(function* () {
      const budget = yield* RateBudget
      const buckets = bucketsOf("racing", { token: 100, company: 100, ip: 100 })
      yield* budget.acquire(buckets, { priority: "interactive" })
      // A loaded database: the rows the 429 must be written to are locked by someone else.
      const release = yield* holdRows("%:racing")
      const marking = yield* Effect.forkChild(budget.markExhausted(buckets, "token", Duration.seconds(30)))
      yield* realPause
      assert.isUndefined(marking.pollUnsafe(), "the database write is still waiting for the lock")
      // Meanwhile this process sends nothing more on that bucket (the chaos seed 20261125 saw a
      // POST 547 ms into a block whose write was still queued).
      // (Before the local block, this waited on the locked rows instead.)
      const refused = yield* budget.tryAcquire(buckets, { priority: "interactive" }).pipe(Effect.timeout("2 seconds"))
      assert.isFalse(refused.granted)
      if (!refused.granted) assert.deepStrictEqual([refused.bucket, refused.reason], ["token:racing", "blocked"])
      yield* release
      yield* Fiber.join(marking)
    })
  )

  it.effect("a 429 reaches the other processes at once, even the permits already queued on its rows", () =>
    Effect.gen(function* () {
      const budget = yield* RateBudget
      const other = yield* otherProcess
      const buckets = bucketsOf("queued", { token: 100, company: 100, ip: 100 })
      yield* budget.acquire(buckets, { priority: "interactive" })
      const before = yield* used("token:queued")
      // A loaded database: a long permit transaction holds the token bucket's row, and another
      // process's permit queues behind it (its first in line).
      const release = yield* holdRows("token:queued")
      const queued = yield* Effect.forkChild(other.tryAcquire(buckets, { priority: "interactive" }))
      yield* realPause
      // The 429 comes now. Written to the windows' rows alone, its block waited behind the queued
      // permit, which was granted into it (the chaos suite, seed 2246914551: requests up to a
      // second into a block another replica had received).
      const marking = yield* Effect.forkChild(budget.markExhausted(buckets, "token", Duration.seconds(30)))
      yield* realPause
      yield* release
      const answer = yield* Fiber.join(queued)
      assert.isFalse(answer.granted, "the queued permit sees the block")
      if (!answer.granted) assert.deepStrictEqual([answer.bucket, answer.reason], ["token:queued", "blocked"])
      yield* Fiber.join(marking)
      assert.strictEqual(
        yield* used("token:queued"),
        0,
        "the window restarts after the block, with nothing granted in it"
      )
      assert.isAbove(before, 0)
    })
  )

  it.effect("a 429 another process receives stops the permits this one holds ahead", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const budget = yield* RateBudget
        // Another process, alive throughout (it listens for blocks while it holds permits).
        const holder = Context.get(yield* Layer.build(RateBudget.layerWith(policy).pipe(Layer.fresh)), RateBudget)
        const buckets = bucketsOf("held", { token: 1_000, company: 10_000, ip: 10_000 })
        // A crawl's bulk permit takes a few more ahead, held in its process for up to a second.
        yield* holder.acquire(buckets, { priority: "bulk" })
        yield* budget.markExhausted(buckets, "token", Duration.seconds(30))
        yield* realPause
        // The chaos suite, 50 connections (seeds 4711, 8675309): crawls of the other replica sent
        // 271 to 709 ms into a block already in the database, on permits held from before it.
        const next = yield* Effect.raceFirst(
          Effect.as(holder.acquire(buckets, { priority: "bulk" }), "sent on a held permit"),
          Effect.as(realPause, "waits out the block")
        )
        assert.strictEqual(next, "waits out the block")
      })
    )
  )

  it.effect("permits waiting on a locked bucket leave the pool free: a 429 still reaches the others", () =>
    Effect.gen(function* () {
      const budget = yield* RateBudget
      const sql = yield* SqlClient
      const buckets = bucketsOf("pooled", { token: 100, company: 100, ip: 100 })
      yield* budget.acquire(buckets, { priority: "interactive" })
      const release = yield* holdRows("token:pooled")
      // More of this process's requests wait for a permit than the pool has connections (8 here,
      // 10 in the daemon). Each waiting transaction held one, and the 429's block, the pages, the
      // inbox waited for a connection behind them.
      const waiting = yield* Effect.forEach(Array.from({ length: 10 }), () =>
        Effect.forkChild(budget.tryAcquire(buckets, { priority: "interactive" }))
      )
      yield* realPause
      const marking = yield* Effect.forkChild(budget.markExhausted(buckets, "token", Duration.seconds(30)))
      const shared = sql<{ n: number }>`
        SELECT count(*)::int AS n FROM crm_sync.rate_blocks WHERE bucket = 'token:pooled' AND blocked_until > now()`
      let seen = false
      for (let i = 0; i < 15 && !seen; i++) {
        yield* realPause
        const answer = yield* Effect.raceFirst(
          Effect.map(shared, (rows) => rows[0]!.n === 1),
          Effect.as(realPause, false)
        )
        seen = answer
      }
      yield* release
      yield* Fiber.join(marking)
      for (const fiber of waiting) yield* Fiber.join(fiber)
      assert.isTrue(seen, "the block reached the database while the permits still waited")
    })
  )

  it.effect("clamps Retry-After to 1 s..1 h and falls back to one window when it is missing", () =>
    Effect.gen(function* () {
      const budget = yield* RateBudget
      const min = Duration.toMillis(minimumRetryAfter)
      const max = Duration.toMillis(maximumRetryAfter)
      const zero = yield* budget.markExhausted(
        bucketsOf("clamp-low", { token: 1, company: 1, ip: 1 }),
        "token",
        Duration.zero
      )
      assert.isTrue(Duration.toMillis(zero) >= min && Duration.toMillis(zero) <= min * 1.1)
      const huge = yield* budget.markExhausted(
        bucketsOf("clamp-high", { token: 1, company: 1, ip: 1 }),
        "token",
        Duration.days(30)
      )
      assert.isTrue(Duration.toMillis(huge) >= max && Duration.toMillis(huge) <= max + 5_000)
      const missing = yield* budget.markExhausted(
        bucketsOf("clamp-none", { token: 1, company: 1, ip: 1 }, 20_000),
        "unknown",
        undefined
      )
      assert.isTrue(Duration.toMillis(missing) >= 20_000 && Duration.toMillis(missing) <= 22_000)
      const status = yield* budget.status(bucketsOf("clamp-none", { token: 1, company: 1, ip: 1 }, 20_000))
      assert.isTrue(
        status.every((bucket) => bucket.blockedUntil !== undefined),
        "an unnamed limit blocks all three"
      )
    })
  )

  it.effect("estimates the time until N more requests can be sent", () =>
    Effect.gen(function* () {
      const budget = yield* RateBudget
      const buckets = bucketsOf("eta", { token: 10, company: 100, ip: 100 }, 60_000)
      assert.strictEqual(Duration.toMillis(yield* budget.timeUntil(buckets, 5, "interactive")), 0)
      yield* budget.acquire(buckets, { priority: "interactive", permits: 10 })
      const next = Duration.toMillis(yield* budget.timeUntil(buckets, 1, "interactive"))
      assert.isTrue(next > 50_000 && next <= 60_050, `one more request waits for the window: ${next} ms`)
      const three = Duration.toMillis(yield* budget.timeUntil(buckets, 25, "interactive"))
      assert.isTrue(three > 2 * 60_000, `25 requests at 10 a minute need two more windows: ${three} ms`)
    })
  )

  it.effect("waits for a full window to end, then starts a fresh one", () =>
    TestClock.withLive(
      Effect.gen(function* () {
        const budget = yield* RateBudget
        const buckets = bucketsOf("reset", { token: 3, company: 100, ip: 100 }, 1_000)
        yield* budget.acquire(buckets, { priority: "interactive", permits: 3 })
        yield* budget.acquire(buckets, { priority: "interactive" })
        const status = yield* budget.status(buckets)
        assert.strictEqual(status.find((bucket) => bucket.scope === "token")!.used, 1)
      })
    )
  )
})

describe("RateBudget validation", () => {
  it.effect("refuses more permits than the smallest limit", () =>
    Effect.gen(function* () {
      const budget = yield* RateBudget
      const error = yield* Effect.flip(
        budget.acquire(bucketsOf("too-many", { token: 2, company: 9, ip: 9 }), { priority: "interactive", permits: 3 })
      )
      assert.strictEqual(error._tag, "BudgetError")
    }).pipe(Effect.provide(RateBudget.layerWith(policy).pipe(Layer.provide(TestDatabase))))
  )
})
