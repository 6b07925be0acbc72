/**
 * The status served over HTTP is a snapshot: however many callers ask at once, the report (a count
 * over every table, each connection's jobs) is made once per SNAPSHOT_TTL; past it, a caller is
 * answered at once with the last report while a fresh one is made in the background.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { StatusSnapshot } from "../../src/admin/StatusReport.ts"
import { DatabaseInfo } from "../../src/warehouse/Database.ts"
import { TestDatabase } from "../support/TestDatabase.ts"

const World = StatusSnapshot.layer.pipe(
  Layer.provideMerge(AppConfig.layerFrom({})),
  Layer.provideMerge(Layer.succeed(DatabaseInfo, { kind: "external", location: "the test database" })),
  Layer.provideMerge(TestDatabase)
)

layer(World, { timeout: 60_000, excludeTestServices: true })("status snapshot", (it) => {
  it.effect("twenty callers at once get one report; a later caller the last one, and then a fresh one", () =>
    Effect.gen(function* () {
      const snapshot = yield* StatusSnapshot
      const reports = yield* Effect.all(
        Array.from({ length: 20 }, () => snapshot.current),
        { concurrency: "unbounded" }
      )
      assert.strictEqual(new Set(reports.map((report) => report.generated_at)).size, 1)
      yield* Effect.sleep("5500 millis")
      // Past the TTL: answered with the last report, while the fresh one is made.
      const later = yield* snapshot.current
      assert.strictEqual(later.generated_at, reports[0]!.generated_at)
      let fresh = later
      while (fresh.generated_at === later.generated_at) {
        yield* Effect.sleep("100 millis")
        fresh = yield* snapshot.current
      }
      assert.isAbove(Date.parse(fresh.generated_at), Date.parse(later.generated_at))
    })
  )
})
