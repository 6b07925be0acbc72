/**
 * `crm-sync outbox retry ID` on a row there is nothing to retry for (it succeeded): a real process.
 * A script must not read "done" from it: it exits 1 with one line saying why, and `--json` still
 * prints one object that says nothing changed.
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

describe("crm-sync outbox retry", () => {
  it.live("of a succeeded row exits 1 with one line", () =>
    Effect.gen(function* () {
      const url = yield* freshDatabase
      const env = { DATABASE_URL: url }
      assert.strictEqual(cli(["migrate"], env).code, 0)
      const sql = yield* PgClient.make({ url: Redacted.make(url), maxConnections: 1 })
      const [row] = yield* sql<{ id: number }>`
        INSERT INTO crm_sync.outbox (operation, payload, status, record_id)
        VALUES ('prospect.create', '{"book_id": "bk_x", "first_name": "A"}'::jsonb, 'succeeded', 'pr_1')
        RETURNING id::int AS id`
      const id = row!.id

      const text = cli(["outbox", "retry", String(id)], env)
      assert.strictEqual(text.code, 1, text.stdout + text.stderr)
      assert.strictEqual(
        text.stderr.trim(),
        `crm-sync: outbox ${id} is succeeded: only a failed or needs_review row is sent again`
      )

      const json = cli(["outbox", "retry", String(id), "--json"], env)
      assert.strictEqual(json.code, 1)
      assert.deepStrictEqual(JSON.parse(json.stdout), { id, changed: false, status: "succeeded", new_key: false })
      const [after] = yield* sql<{ status: string }>`SELECT status FROM crm_sync.outbox WHERE id = ${id}`
      assert.strictEqual(after!.status, "succeeded")
    }).pipe(Effect.scoped, Effect.provide(Reactivity.layer))
  )
})
