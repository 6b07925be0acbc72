/**
 * A backfill whose requests wait on a blocked window (a 429 told the budget to hold the token
 * bucket for an hour): its progress line says what it waits for and how long, instead of keeping
 * the ETA of the pages before the wait (`< 1 s`, for an hour).
 */
import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Fiber, Logger } from "effect"
import { RateBudget } from "../../src/budget/RateBudget.ts"
import { backfill } from "../../src/sync/Backfill.ts"
import { client, harness } from "./harness.ts"

layer(harness(), { timeout: 120_000, excludeTestServices: true })("backfill waiting on the budget", (it) => {
  it.effect("shows the wait for the blocked window on its progress line", () =>
    Effect.gen(function* () {
      const budget = yield* RateBudget
      const crm = yield* client
      yield* budget.markExhausted(crm.buckets, "token", Duration.hours(1))
      const lines: Array<string> = []
      const collect = Logger.make((options) => {
        lines.push(String(options.message))
      })
      const fiber = yield* backfill({ progress: "lines" }).pipe(
        Effect.provideService(Logger.CurrentLoggers, new Set([collect])),
        Effect.forkChild
      )
      // Real time: the line comes from a check every few seconds; the test's timeout bounds it.
      let waiting: string | undefined
      while (waiting === undefined) {
        yield* Effect.sleep("100 millis")
        waiting = lines.find((line) => line.includes("waiting"))
        if (fiber.pollUnsafe() !== undefined) return assert.fail(`the backfill ended:\n${lines.join("\n")}`)
      }
      yield* Fiber.interrupt(fiber)
      assert.match(waiting, /^backfill: reference waiting (1 h|59 min|60 min) for the token window \(token:default\)/)
      assert.notInclude(waiting, "< 1 s")
    })
  )
})
