/**
 * `crm-sync status --watch` as a script or a log file meets it (stdout not a terminal): a
 * snapshot of the status view at each interval, one after another, until SIGTERM (exit 0).
 * With `--json` it refuses at once (exit 2): a stream of redrawn views is not one JSON object.
 */
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { spawn, spawnSync } from "node:child_process"
import { freshDatabase } from "./support/TestDatabase.ts"

const main = new URL("../src/main.ts", import.meta.url).pathname
const baseEnv = { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", CRM_SYNC_LOG_LEVEL: "warn" }

/** The frames printed so far: each starts with a `--- ` line. */
const framesOf = (stdout: string) => stdout.split(/^--- /m).slice(1)

const refused = (args: ReadonlyArray<string>) => {
  const result = spawnSync(process.execPath, [main, "status", ...args], { encoding: "utf8", env: baseEnv })
  return { code: result.status, stdout: result.stdout, stderr: result.stderr }
}

describe("status --watch", () => {
  it.live(
    "prints a snapshot at each interval until SIGTERM, then exits 0",
    () =>
      Effect.gen(function* () {
        const child = spawn(process.execPath, [main, "status", "--watch", "--interval", "1"], {
          env: { ...baseEnv, DATABASE_URL: yield* freshDatabase },
          stdio: ["ignore", "pipe", "pipe"]
        })
        let stdout = ""
        let stderr = ""
        child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()))
        child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()))
        yield* Effect.addFinalizer(() => Effect.sync(() => child.kill("SIGKILL")))
        const exited = Effect.callback<number | null>((resume) => {
          if (child.exitCode !== null) return resume(Effect.succeed(child.exitCode))
          child.once("exit", (code) => resume(Effect.succeed(code)))
        })

        for (let i = 0; i < 240 && framesOf(stdout).length < 2 && child.exitCode === null; i++) {
          yield* Effect.sleep(Duration.millis(250))
        }
        child.kill("SIGTERM")
        assert.strictEqual(yield* exited, 0, `${stdout}\n${stderr}`)

        const frames = framesOf(stdout)
        assert.isAtLeast(frames.length, 2, stdout)
        assert.isTrue(stdout.startsWith("--- crm-sync status at "), stdout.slice(0, 200))
        for (const frame of frames) {
          assert.match(frame, /^crm-sync status at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z, every 1 s\n/, frame)
          assert.include(frame, "database    external:")
          assert.include(frame, "\ninbox       empty\n")
          assert.isTrue(frame.endsWith("\n\n"), "a frame is printed whole")
          assert.notInclude(frame, "\x1b", "no escape codes off a terminal")
        }
        const [first, second] = frames.map((frame) => frame.split("\n")[0])
        assert.notStrictEqual(first, second, "each frame is a new snapshot")
      }).pipe(Effect.scoped),
    120_000
  )

  it("refuses --json with --watch, and --interval without it (exit 2, one line)", () => {
    const json = refused(["--watch", "--json"])
    assert.strictEqual(json.code, 2, json.stderr)
    assert.strictEqual(json.stdout, "")
    assert.match(json.stderr, /^crm-sync: status --watch .*--json.*\n$/)

    const interval = refused(["--interval", "2"])
    assert.strictEqual(interval.code, 2, interval.stderr)
    assert.match(interval.stderr, /^crm-sync: status --interval .*--watch.*\n$/)

    const tooFast = refused(["--watch", "--interval", "0.1"])
    assert.strictEqual(tooFast.code, 2, tooFast.stderr)
    assert.match(tooFast.stderr, /^crm-sync: status --interval .*\n$/)
  })
})
