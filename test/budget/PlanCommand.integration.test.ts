/**
 * `crm-sync plan` as a firm meets it: a personal-token connection whose last crawl of financial
 * accounts counted a million records, on the default schedules.
 */
import { assert, describe, it } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Effect, Redacted } from "effect"
import { Reactivity } from "effect/reactivity"
import { spawnSync } from "node:child_process"
import { freshDatabase } from "../support/TestDatabase.ts"

const main = new URL("../../src/main.ts", import.meta.url).pathname

const cli = (args: ReadonlyArray<string>, env: Record<string, string>) => {
  const result = spawnSync(process.execPath, [main, ...args], {
    encoding: "utf8",
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", ...env },
    timeout: 60_000
  })
  return { code: result.status, stdout: result.stdout, stderr: result.stderr }
}

describe("crm-sync plan", () => {
  it.live("explains a million-account personal-token connection: ~10 h a crawl, 6-hour schedule flagged", () =>
    Effect.gen(function* () {
      const url = yield* freshDatabase
      assert.strictEqual(cli(["migrate"], { DATABASE_URL: url }).code, 0)
      const sql = yield* PgClient.make({ url: Redacted.make(url), maxConnections: 1 })
      yield* sql`INSERT INTO crm_sync.crawl_runs (connection, resource, status, total_count, total_pages)
                   VALUES ('default', 'financial_accounts', 'complete', 1000000, 10000)`
      const env = {
        DATABASE_URL: url,
        CRM_BASE_URL: "http://127.0.0.1:9/",
        CRM_TOKEN: "pat_plan_test",
        CRM_TOKEN_KIND: "personal"
      }
      const text = cli(["plan"], env)
      assert.strictEqual(text.code, 0, text.stderr)
      assert.match(text.stdout, /1,000 requests per window = 1,000\/hour/)
      assert.match(
        text.stdout,
        /financial_accounts\s+1,000,000 records, 10,000 pages: a full crawl takes 10 h \d+ min \(every 6 h\)\s+DOES NOT FIT/
      )
      assert.match(text.stdout, /set schedules\.crawl to "11 hours"/)

      const json = cli(["plan", "--json"], env)
      assert.strictEqual(json.code, 0, json.stderr)
      const output = JSON.parse(json.stdout)
      assert.isString(output.generated_at)
      const [plan] = output.connections
      assert.strictEqual(plan.connection, "default")
      assert.isFalse(plan.fits)
      assert.deepStrictEqual(plan.suggestions[0].setting, "schedules.crawl")
      assert.notInclude(json.stdout, "pat_plan_test")

      const status = cli(["status", "--json"], env)
      assert.strictEqual(status.code, 0, status.stderr)
      assert.isFalse(JSON.parse(status.stdout).plan[0].fits)
      const statusText = cli(["status"], env)
      assert.match(statusText.stdout, /plan {8}default: WARNING financial_accounts: a full crawl takes 10 h \d+ min/)
    }).pipe(Effect.scoped, Effect.provide(Reactivity.layer))
  )
})
