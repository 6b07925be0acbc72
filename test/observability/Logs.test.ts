/**
 * A JSON log line as a log tool reads it: flat, conventional keys (`time`, `level`, `msg`, the
 * annotations beside them, `error` with the cause), no `fiberId`, `spans` or `annotations`
 * object, and `trace_id`/`span_id` only while a span is current.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Logger, Redacted, References, Schema } from "effect"
import { jsonLine } from "../../src/observability/Logs.ts"

class Refused extends Schema.TaggedError<Refused>()("Refused", { message: Schema.String }) {}

/** The lines `program` logs, each parsed. */
const logged = <A, E>(program: Effect.Effect<A, E>) =>
  Effect.gen(function* () {
    const lines: Array<string> = []
    const capture = Logger.map(jsonLine, (line) => {
      lines.push(line)
    })
    yield* Effect.exit(
      program.pipe(Effect.provide(Logger.layer([capture])), Effect.provideService(References.MinimumLogLevel, "Debug"))
    )
    for (const line of lines) assert.notInclude(line, "\n", "one line per record")
    return lines.map((line) => JSON.parse(line) as Record<string, unknown>)
  })

describe("JSON log lines", () => {
  it.effect("time, level and msg first, then each annotation as a top-level field", () =>
    Effect.gen(function* () {
      const [line] = yield* logged(
        Effect.logWarning("sync job failed; it will be tried again").pipe(
          Effect.annotateLogs({ job: "poll:businesses", connection: "default", retry_in_seconds: 30 })
        )
      )
      assert.deepStrictEqual(line, {
        time: new Date(0).toISOString(),
        level: "warn",
        msg: "sync job failed; it will be tried again",
        job: "poll:businesses",
        connection: "default",
        retry_in_seconds: 30
      })
      assert.deepStrictEqual(Object.keys(line!).slice(0, 3), ["time", "level", "msg"])
    })
  )

  it.effect("levels are lowercase; a message in parts is one string; a secret stays redacted", () =>
    Effect.gen(function* () {
      const lines = yield* logged(
        Effect.gen(function* () {
          yield* Effect.logDebug("a")
          yield* Effect.logInfo("outbox 7: the database failed", "connection refused")
          yield* Effect.logError("c", { page: 3 })
        }).pipe(Effect.annotateLogs({ token: Redacted.make("pat_secret") }))
      )
      assert.deepStrictEqual(
        lines.map((line) => [line.level, line.msg, line.token]),
        [
          ["debug", "a", "<redacted>"],
          ["info", "outbox 7: the database failed connection refused", "<redacted>"],
          ["error", 'c {"page":3}', "<redacted>"]
        ]
      )
    })
  )

  it.effect("a failure's cause is `error`, one line; a defect adds its stack", () =>
    Effect.gen(function* () {
      const [failed, died] = yield* logged(
        Effect.gen(function* () {
          const failure = yield* Effect.exit(Effect.fail(new Refused({ message: "outbox 7: refused\n  by the CRM" })))
          if (failure._tag === "Failure") yield* Effect.logWarning("outbox: refused", failure.cause)
          const defect = yield* Effect.exit(Effect.die(new TypeError("x is undefined")))
          if (defect._tag === "Failure") yield* Effect.logError("sync job crashed", defect.cause)
        })
      )
      assert.strictEqual(failed!.error, "outbox 7: refused by the CRM")
      assert.notProperty(failed, "stack")
      assert.strictEqual(died!.error, "x is undefined")
      assert.include(String(died!.stack), "TypeError: x is undefined")
      assert.include(String(died!.stack), "Logs.test.ts", "the stack says where")
    })
  )

  it.effect("trace_id and span_id while a span is current, and only then", () =>
    Effect.gen(function* () {
      const ids: Array<string> = []
      const [inside, outside] = yield* logged(
        Effect.gen(function* () {
          yield* Effect.gen(function* () {
            yield* Effect.logInfo("in a span")
            const span = yield* Effect.currentSpan
            ids.push(span.traceId, span.spanId)
          }).pipe(Effect.withSpan("JobRuns.record"))
          yield* Effect.logInfo("outside")
        })
      )
      assert.lengthOf(ids, 2)
      assert.deepStrictEqual([inside!.trace_id, inside!.span_id], ids)
      assert.notProperty(outside, "trace_id")
      assert.notProperty(outside, "span_id")
    })
  )

  it.effect(
    "an annotation does not replace time, level or msg; nothing is nested under fiberId, spans or annotations",
    () =>
      Effect.gen(function* () {
        const [line] = yield* logged(
          Effect.logInfo("started").pipe(
            Effect.annotateLogs({ time: "later", level: "loud", msg: "other" }),
            Effect.withLogSpan("startup")
          )
        )
        assert.strictEqual(line!.time, new Date(0).toISOString())
        assert.strictEqual(line!.level, "info")
        assert.strictEqual(line!.msg, "started")
        for (const key of ["fiberId", "spans", "annotations", "message", "timestamp", "cause"]) {
          assert.notProperty(line, key)
        }
      })
  )
})
