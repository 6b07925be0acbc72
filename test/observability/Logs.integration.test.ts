/**
 * A daemon's log as a log tool reads it: `crm-sync run` against the sandbox with
 * `CRM_SYNC_LOG_FORMAT=json`, its stderr read line by line from start to SIGTERM. Every line is
 * one JSON object with flat, conventional keys; a bad `CRM_SYNC_LOG_FORMAT` stops a command
 * before it starts.
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { Sandbox } from "@crm-sync/sandbox"
import { spawn } from "node:child_process"
import { eventually, freePort, get } from "../support/Daemon.ts"
import { freshDatabase } from "../support/TestDatabase.ts"

const main = new URL("../../src/main.ts", import.meta.url).pathname

const LEVELS = ["debug", "info", "warn", "error"]
/** What Effect's own JSON logger writes, which log tools cannot index without a mapping. */
const NESTED = ["fiberId", "spans", "annotations", "message", "timestamp", "cause"]

/** `crm-sync <args>` with `env`: the child and what it wrote on stderr so far (killed with the scope). */
const start = (args: ReadonlyArray<string>, env: Record<string, string>) =>
  Effect.gen(function* () {
    const child = spawn(process.execPath, [main, ...args], {
      env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", ...env },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stderr = ""
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()))
    child.stdout.resume()
    const exited = Effect.callback<number | null>((resume) => {
      if (child.exitCode !== null) return resume(Effect.succeed(child.exitCode))
      child.once("exit", (code) => resume(Effect.succeed(code)))
    })
    yield* Effect.addFinalizer(() => Effect.sync(() => child.kill("SIGKILL")))
    return { child, exited, stderr: () => stderr }
  })

/** Each line parsed; one that is not a JSON object fails the test, naming it. */
const parseLines = (stderr: string): ReadonlyArray<Record<string, unknown>> =>
  stderr
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => {
      let parsed: unknown
      try {
        parsed = JSON.parse(line)
      } catch {
        return assert.fail(`not a JSON line: ${line}`)
      }
      assert.isTrue(typeof parsed === "object" && parsed !== null && !Array.isArray(parsed), line)
      return parsed as Record<string, unknown>
    })

layer(
  Sandbox.layer({ records: 60, seed: 5, limits: { personal: { token: 100_000, company: 100_000, ip: 100_000 } } }),
  { timeout: 120_000, excludeTestServices: true }
)("logs", (it) => {
  it.effect(
    "a daemon's stderr with CRM_SYNC_LOG_FORMAT=json is flat JSON lines, from start to stop",
    () =>
      Effect.gen(function* () {
        const sandbox = yield* Sandbox
        const adminPort = yield* freePort
        const daemon = yield* start(["run"], {
          DATABASE_URL: yield* freshDatabase,
          CRM_BASE_URL: sandbox.baseUrl,
          CRM_TOKEN: sandbox.credentials.personalAccessToken,
          CRM_SYNC_WEBHOOK_PORT: String(yield* freePort),
          CRM_SYNC_ADMIN_PORT: String(adminPort),
          CRM_SYNC_LOG_LEVEL: "info",
          CRM_SYNC_LOG_FORMAT: "json"
        })
        yield* eventually("readiness", get(`http://127.0.0.1:${adminPort}/readyz`), (r) => r.status === 200, 60)
        // A crawl's last line is logged inside its job's span, with the job's annotations.
        yield* eventually(
          "a crawl's end in the log",
          Effect.sync(daemon.stderr),
          (stderr) => stderr.includes('"msg":"crawl: complete"'),
          60
        )
        daemon.child.kill("SIGTERM")
        assert.strictEqual(yield* daemon.exited, 0, daemon.stderr().slice(-2000))

        const lines = parseLines(daemon.stderr())
        assert.isAbove(lines.length, 5)
        for (const line of lines) {
          const shown = JSON.stringify(line)
          assert.deepStrictEqual(Object.keys(line).slice(0, 3), ["time", "level", "msg"], shown)
          assert.strictEqual(new Date(String(line.time)).toISOString(), line.time, shown)
          assert.include(LEVELS, line.level, shown)
          assert.isString(line.msg, shown)
          for (const key of NESTED) assert.notProperty(line, key, shown)
          assert.strictEqual("trace_id" in line, "span_id" in line, shown)
        }
        const crawled = lines.find((line) => line.msg === "crawl: complete")!
        assert.strictEqual(crawled.connection, "default", "an annotation is a top-level field")
        assert.isString(crawled.job)
        assert.match(String(crawled.trace_id), /^[0-9a-f]{32}$/)
        assert.match(String(crawled.span_id), /^[0-9a-f]{16}$/)
        const stopped = lines.at(-1)!
        assert.strictEqual(stopped.msg, "crm-sync stopped")
        assert.notProperty(stopped, "trace_id", "no span is current as the daemon stops")
      }).pipe(Effect.scoped),
    120_000
  )

  it.effect(
    "CRM_SYNC_LOG_FORMAT=text writes text even off a terminal; another value stops the command (exit 2)",
    () =>
      Effect.gen(function* () {
        const sandbox = yield* Sandbox
        const env = {
          DATABASE_URL: yield* freshDatabase,
          CRM_BASE_URL: sandbox.baseUrl,
          CRM_TOKEN: sandbox.credentials.personalAccessToken,
          CRM_SYNC_LOG_LEVEL: "info"
        }
        const text = yield* start(["backfill"], { ...env, CRM_SYNC_LOG_FORMAT: "text" })
        assert.strictEqual(yield* text.exited, 0, text.stderr())
        assert.match(text.stderr(), /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO \(#\d+\): crawl: complete$/m)
        assert.notMatch(text.stderr(), /^\{/m)

        const bad = yield* start(["backfill"], { ...env, CRM_SYNC_LOG_FORMAT: "xml" })
        assert.strictEqual(yield* bad.exited, 2)
        assert.strictEqual(bad.stderr(), 'config: CRM_SYNC_LOG_FORMAT: Expected "json" | "text"\n')
      }).pipe(Effect.scoped),
    120_000
  )
})
