/**
 * `crm-sync backfill` stopped by SIGTERM (an evicted pod, a Ctrl-C): a real `node src/main.ts
 * backfill` process against the in-process sandbox and a fresh database, told to stop while it
 * crawls financial accounts. It must not pass for done: it exits 1, prints the summary of what it
 * did (the crawl it was in marked interrupted, with its page) and one line saying how to resume.
 */
import { PgClient } from "@effect/sql-pg"
import { assert, layer } from "@effect/vitest"
import { Context, Deferred, Effect, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { spawn } from "node:child_process"
import { Sandbox } from "@crm-sync/sandbox"
import { JobLease } from "../../src/sync/JobLease.ts"
import { migrate } from "../../src/warehouse/Migrations.ts"
import { freshDatabase } from "../support/TestDatabase.ts"
import { unthrottled } from "./harness.ts"

/** A count as the summary table prints it. */
const number = (value: number) => value.toLocaleString("en-US")

class DatabaseUrl extends Context.Service<DatabaseUrl, string>()("test/sync/InterruptDatabaseUrl") {}

const database = Layer.unwrap(
  Effect.map(freshDatabase, (url) =>
    Layer.effectDiscard(Effect.asVoid(migrate)).pipe(
      Layer.provideMerge(JobLease.layer),
      Layer.provideMerge(PgClient.layer({ url: Redacted.make(url), maxConnections: 4 })),
      Layer.provideMerge(Layer.succeed(DatabaseUrl, url))
    )
  )
)

const TestLayer = Layer.mergeAll(Sandbox.layer({ seed: 7, records: 3000, limits: { personal: unthrottled } }), database)

const main = new URL("../../src/main.ts", import.meta.url).pathname

/** `crm-sync backfill` as its own process, with its output; killed with the test's scope. */
const startBackfill = Effect.gen(function* () {
  const running = yield* Sandbox
  const url = yield* DatabaseUrl
  const stdout: Array<string> = []
  const stderr: Array<string> = []
  const child = yield* Effect.acquireRelease(
    Effect.sync(() => {
      const process_ = spawn(process.execPath, [main, "backfill"], {
        env: {
          PATH: process.env.PATH ?? "",
          CRM_SYNC_DATABASE_URL: url,
          CRM_BASE_URL: running.baseUrl,
          CRM_TOKEN: running.credentials.personalAccessToken
        },
        stdio: ["ignore", "pipe", "pipe"]
      })
      process_.stdout.on("data", (chunk: Buffer) => stdout.push(chunk.toString()))
      process_.stderr.on("data", (chunk: Buffer) => stderr.push(chunk.toString()))
      return process_
    }),
    (process_) =>
      Effect.sync(() => process_.exitCode === null && process_.signalCode === null && process_.kill("SIGKILL"))
  )
  const exited = Effect.callback<number | null>((resume) => {
    if (child.exitCode !== null || child.signalCode !== null) return resume(Effect.succeed(child.exitCode))
    child.once("exit", (code) => resume(Effect.succeed(code)))
  })
  return { child, stdout, stderr, exited }
})

layer(TestLayer, { timeout: 180_000, excludeTestServices: true })("backfill stopped by SIGTERM", (it) => {
  it.effect("exits 1 with the summary of what it did and how to resume", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const running = yield* Sandbox
      // Slow financial-account pages, so that the signal surely arrives in the middle of them.
      yield* running.admin.addFault({ kind: "latency", ms: 250, path: "/v1/financial_accounts" })
      const { child, stdout, stderr, exited } = yield* startBackfill

      // Stop it once it has stored a few pages of financial accounts.
      while (true) {
        const [run] = yield* sql<{ last_page: number }>`
          SELECT last_page FROM crm_sync.crawl_runs WHERE resource = 'financial_accounts' AND source = 'backfill'`
        if ((run?.last_page ?? 0) >= 3) break
        if (child.exitCode !== null)
          return assert.fail(`the backfill ended early:\n${stdout.join("")}${stderr.join("")}`)
        yield* Effect.sleep("20 millis")
      }
      child.kill("SIGTERM")
      const code = yield* exited
      const out = stdout.join("")
      const err = stderr.join("")
      const [stopped] = yield* sql<{ last_page: number; total_pages: number; seen: number; inserted: number }>`
        SELECT last_page, total_pages, seen, inserted FROM crm_sync.crawl_runs
        WHERE resource = 'financial_accounts' AND source = 'backfill'`

      assert.strictEqual(code, 1, `exit code; stdout:\n${out}\nstderr:\n${err}`)
      // The summary: what was done, and where the interrupted crawl stopped.
      const row = (resource: string) =>
        out.split("\n").find((line) => line.startsWith("default ") && line.split(/\s+/)[1] === resource)
      assert.match(row("businesses") ?? "", /\bdone\b/, out)
      assert.match(row("financial_accounts") ?? "", /\binterrupted\b/, out)
      // The page it names is the last one stored (or the one before, if the signal came between
      // the page's commit and its progress update): the next backfill goes on after it.
      const stoppedAt = /stopped after page (\d+) of (\d+): the next backfill goes on after it/.exec(out)
      assert.isNotNull(stoppedAt, out)
      assert.include([stopped!.last_page, stopped!.last_page - 1], Number(stoppedAt![1]), `${out}\n${err}`)
      assert.strictEqual(Number(stoppedAt![2]), stopped!.total_pages)
      // Its row counts what the crawl stored: pages, records, inserted.
      const cells = (row("financial_accounts") ?? "").trim().split(/\s+/)
      assert.deepStrictEqual(
        [cells[3], cells[5], cells[6]],
        [number(stopped!.last_page), number(stopped!.seen), number(stopped!.inserted)],
        out
      )
      // One line on stderr: interrupted, and how to resume.
      const last = err.trim().split("\n").at(-1) ?? ""
      assert.match(last, /^crm-sync: backfill interrupted/, err)
      assert.include(last, "run `crm-sync backfill` again to resume")
    })
  )

  it.effect("stopped while it waits for another backfill, it exits 1 saying it read nothing", () =>
    Effect.gen(function* () {
      const running = yield* Sandbox
      yield* running.admin.clearFaults
      // Another backfill holds the lease for as long as the test needs (the lease a backfill
      // process takes, through the same service), so the second cannot finish first by any timing.
      const leases = yield* JobLease
      const held = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      yield* Effect.forkScoped(
        leases.tryRun("backfill", Effect.andThen(Deferred.succeed(held, undefined), Deferred.await(release)))
      )
      yield* Deferred.await(held)

      const second = yield* startBackfill
      while (!second.stderr.join("").includes("another backfill is running")) {
        if (second.child.exitCode !== null) return assert.fail(`the second backfill ended:\n${second.stderr.join("")}`)
        yield* Effect.sleep("20 millis")
      }
      second.child.kill("SIGTERM")
      const code = yield* second.exited
      const err = second.stderr.join("")
      assert.strictEqual(code, 1, err)
      assert.strictEqual(
        err.trim().split("\n").at(-1),
        "crm-sync: backfill interrupted before it read anything; run `crm-sync backfill` again"
      )
      assert.strictEqual(second.stdout.join(""), "", "no table: it did nothing")
      yield* Deferred.succeed(release, undefined)
    })
  )
})
