/**
 * `crm-sync plan` as a firm meets it: a personal-token connection whose last crawl of financial
 * accounts counted a million records, on the default schedules; and an OAuth connection whose
 * user's bucket (`token:oauth:<app>:<user>`, spec §8) learned a lower ceiling from a 429, which
 * plan, `status` and the plan's verdict must all read, and nothing else under that connection.
 */
import { assert, describe, it } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Effect, Redacted } from "effect"
import { Reactivity } from "effect/reactivity"
import { spawnSync } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
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

  it.live("an OAuth connection: the user's bucket, once the user is known, everywhere", () =>
    Effect.gen(function* () {
      const url = yield* freshDatabase
      assert.strictEqual(cli(["migrate"], { DATABASE_URL: url }).code, 0)
      const app = "crm-sync-partner-app-0123456789abcdef"
      const userBucket = `token:oauth:${app}:usr_000042`
      const sql = yield* PgClient.make({ url: Redacted.make(url), maxConnections: 1 })
      // `connect` recorded the grant's user; its /v1/me ran before the user was known (token:firm).
      yield* sql`INSERT INTO crm_sync.credentials (connection, user_id) VALUES ('firm', 'usr_000042')`
      yield* sql`INSERT INTO crm_sync.rate_windows (bucket, scope, request_limit, window_ms, window_start, used)
                   VALUES ('token:firm', 'token', 500, 3600000, now(), 1)`
      // A 429 on the user's bucket taught the budget that others leave it 100 requests an hour.
      yield* sql`INSERT INTO crm_sync.rate_windows
                   (bucket, scope, request_limit, window_ms, window_start, used, learned_limit, learned_at, learned_base)
                   VALUES (${userBucket}, 'token', 500, 3600000, now(), 100, 100, now(), 100)`
      yield* sql`INSERT INTO crm_sync.crawl_runs (connection, resource, status, total_count, total_pages)
                   VALUES ('firm', 'financial_accounts', 'complete', 100000, 1000)`
      const folder = mkdtempSync(join(tmpdir(), "crm-sync-plan-"))
      const configFile = join(folder, "config.json")
      writeFileSync(
        configFile,
        JSON.stringify({
          encryption_key: randomBytes(32).toString("hex"),
          connections: [
            {
              name: "firm",
              base_url: "http://127.0.0.1:9/",
              credential: "oauth",
              oauth: {
                client_id: app,
                client_secret: "secret",
                auth_url: "http://127.0.0.1:9/oauth/authorize",
                token_url: "http://127.0.0.1:9/oauth/token",
                redirect_uri: "http://127.0.0.1:8765/oauth/callback"
              }
            }
          ]
        })
      )
      const env = { DATABASE_URL: url, CRM_SYNC_CONFIG: configFile }

      const json = cli(["plan", "--json"], env)
      assert.strictEqual(json.code, 0, json.stderr)
      const [plan] = JSON.parse(json.stdout).connections
      assert.strictEqual(plan.bucket, userBucket)
      assert.strictEqual(plan.limit_per_window, 100)
      assert.isTrue(plan.limit_learned)
      assert.isFalse(plan.fits)

      const status = cli(["status", "--json"], env)
      assert.strictEqual(status.code, 0, status.stderr)
      const report = JSON.parse(status.stdout)
      assert.isFalse(report.plan[0].fits)
      assert.deepStrictEqual(
        report.buckets
          .filter((bucket: { scope: string }) => bucket.scope === "token")
          .map((bucket: { bucket: string }) => bucket.bucket),
        [userBucket],
        "one token bucket for the one OAuth grant"
      )
      // The text form: the bucket's name and its count stay apart however long the name.
      const text = cli(["status"], env)
      assert.strictEqual(text.code, 0, text.stderr)
      assert.match(text.stdout, new RegExp(`bucket ${userBucket} +100/500 `))
      assert.notInclude(text.stdout, "token:firm")
    }).pipe(Effect.scoped, Effect.provide(Reactivity.layer))
  )
})
