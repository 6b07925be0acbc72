/**
 * `status --watch`'s frames: on a terminal drawn over the last one, in place, and cut to the
 * screen; to a pipe or a file, one after another under a plain line.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Schema } from "effect"
import { TestClock, TestConsole } from "effect/testing"
import { frame, watch } from "../../src/cli/StatusWatch.ts"

class Unreachable extends Schema.TaggedError<Unreachable>()("Unreachable", { message: Schema.String }) {}

const report = ["config      environment", "database    external: db.internal/w", "", "inbox       empty"].join("\n")
const HOME = "\x1b[H"
const CLEAR_LINE = "\x1b[K"
const CLEAR_BELOW = "\x1b[J"

describe("status --watch frames", () => {
  it("on a terminal: cursor home, each line cleared to its end, then the rest of the screen", () => {
    const drawn = frame(report, "status every 5 s", { rows: 40, columns: 100 })
    assert.isTrue(drawn.startsWith(HOME))
    assert.isTrue(drawn.endsWith(CLEAR_BELOW))
    assert.notInclude(drawn, "\x1b[2J", "not the whole screen at once: that flickers")
    const lines = drawn.slice(HOME.length, -CLEAR_BELOW.length).split("\n")
    assert.deepStrictEqual(
      lines.map((line) => line.replace(CLEAR_LINE, "")),
      ["status every 5 s", "", ...report.split("\n")]
    )
    for (const line of lines) assert.isTrue(line.endsWith(CLEAR_LINE), JSON.stringify(line))
  })

  it("on a small terminal: lines cut to its width, and what does not fit said in the last row", () => {
    const drawn = frame(report, "status every 5 s", { rows: 5, columns: 12 })
    const lines = drawn
      .slice(HOME.length, -CLEAR_BELOW.length)
      .split("\n")
      .map((line) => line.replace(CLEAR_LINE, ""))
    assert.deepStrictEqual(lines, ["status every", "", "config      ", "… 3 more lin"])
    assert.isBelow(lines.length, 5, "the last row left free for the line's end: the screen must not scroll")
    for (const line of lines) assert.isAtMost(line.length, 12)
  })

  it("off a terminal: the report after a plain line, then an empty one; no escape codes", () => {
    const drawn = frame(report, "status every 5 s", undefined)
    assert.strictEqual(`${drawn}\n`, `--- status every 5 s\n${report}\n\n`)
    assert.notInclude(drawn, "\x1b")
  })

  it.effect("a refresh that fails is shown in its frame, and the next one is tried at the interval", () =>
    Effect.gen(function* () {
      let calls = 0
      const render = Effect.suspend(() => {
        calls += 1
        return calls === 2
          ? Effect.fail(new Unreachable({ message: "connect ECONNREFUSED 127.0.0.1:5432" }))
          : Effect.succeed({ text: `inbox       pending ${calls}`, at: `t${calls}` })
      })
      const fiber = yield* Effect.forkChild(watch(render, 5, () => undefined))
      for (let i = 0; i < 3; i++) yield* TestClock.adjust("5 seconds")
      yield* Fiber.interrupt(fiber)
      const frames = (yield* TestConsole.logLines).map(String)
      assert.deepStrictEqual(frames, [
        "--- crm-sync status at t1, every 5 s\ninbox       pending 1\n",
        "--- crm-sync status, every 5 s: trying again\nstatus could not be read: connect ECONNREFUSED 127.0.0.1:5432\n",
        "--- crm-sync status at t3, every 5 s\ninbox       pending 3\n",
        "--- crm-sync status at t4, every 5 s\ninbox       pending 4\n"
      ])
    }).pipe(Effect.provide(TestConsole.layer))
  )
})
