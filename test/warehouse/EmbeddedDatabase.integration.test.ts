import { assert, describe, it } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Effect, Exit, Scope } from "effect"
import { Reactivity } from "effect/reactivity"
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { acquireEmbeddedDatabase } from "../../src/warehouse/EmbeddedDatabase.ts"

const count = (url: Parameters<typeof PgClient.make>[0]["url"]) =>
  Effect.scoped(
    Effect.gen(function* () {
      const sql = yield* PgClient.make({ url, maxConnections: 1 })
      const rows = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM crm_sync_test_marker`
      return rows[0]!.n
    })
  ).pipe(Effect.provide(Reactivity.layer))

describe("embedded PostgreSQL", () => {
  it.live("persists data, keeps its port, and a second user joins the running server", () =>
    Effect.gen(function* () {
      const dataDir = mkdtempSync(join(tmpdir(), "crm-sync-embedded-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dataDir, { recursive: true, force: true })))

      const firstScope = yield* Scope.make()
      const first = yield* acquireEmbeddedDatabase(dataDir).pipe(Scope.provide(firstScope))
      assert.isTrue(first.owned)
      yield* Effect.scoped(
        Effect.gen(function* () {
          const sql = yield* PgClient.make({ url: first.url, maxConnections: 1 })
          yield* sql`CREATE TABLE crm_sync_test_marker (id int)`
          yield* sql`INSERT INTO crm_sync_test_marker VALUES (1)`
          // A new cluster sorts text by code point whatever the host's locale, and still knows
          // Unicode's upper case. New WAL segments are not zero-filled first.
          const [sorted] = yield* sql<{ provider: string; sorted: Array<string>; upper: string; walInitZero: string }>`
            SELECT (SELECT datlocprovider FROM pg_database WHERE datname = current_database()) AS provider,
              (SELECT array_agg(x ORDER BY x) FROM unnest(ARRAY['b', 'é', 'B', 'a', 'Z', 'fa_10', 'fa_9']) AS x) AS sorted,
              upper('déjà') AS upper, current_setting('wal_init_zero') AS "walInitZero"`
          assert.deepStrictEqual(sorted, {
            provider: "b",
            sorted: ["B", "Z", "a", "b", "fa_10", "fa_9", "é"],
            upper: "DÉJÀ",
            walInitZero: "off"
          })
        })
      )

      // A second process finds the running server through postmaster.pid and shares it.
      const secondScope = yield* Scope.make()
      const second = yield* acquireEmbeddedDatabase(dataDir).pipe(Scope.provide(secondScope))
      assert.isFalse(second.owned)
      assert.strictEqual(second.port, first.port)
      assert.strictEqual(yield* count(second.url), 1)
      yield* Scope.close(secondScope, Exit.void)

      yield* Scope.close(firstScope, Exit.void)
      assert.isFalse(existsSync(join(first.dataDirectory, "postmaster.pid")), "the owner stopped the server")

      // Started again: same port, same data.
      const thirdScope = yield* Scope.make()
      const third = yield* acquireEmbeddedDatabase(dataDir).pipe(Scope.provide(thirdScope))
      assert.isTrue(third.owned)
      assert.strictEqual(third.port, first.port)
      assert.strictEqual(Number(readFileSync(join(dataDir, "port"), "utf8")), first.port)
      assert.strictEqual(yield* count(third.url), 1)
      yield* Scope.close(thirdScope, Exit.void)
    }).pipe(Effect.scoped, Effect.provide(Reactivity.layer))
  )
})
