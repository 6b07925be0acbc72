/**
 * Startup benchmark: `node test/bench/startup.ts [--quick] [--no-docs]`.
 *
 * What a command costs before it does anything, as a user meets it: each command runs as its own
 * process, started as the image starts it (`node <the command's V8 flags> bin/crm-sync.js`, see
 * bin/v8-flags.js), several times, and the bench prints medians. GNU time gives each run's wall
 * time and peak resident memory. Node's compile cache is on (bin/crm-sync.js turns it on), so the
 * runs after the first read compiled modules.
 *   1. `crm-sync --help` (targets: ≤ 0.35 s, ≤ 120 MB peak);
 *   2. `crm-sync status` against a migrated embedded PostgreSQL (target ≤ 0.5 s);
 *   3. the idle daemon: `crm-sync run` against the bundled sandbox (1,000 records), its resident
 *      memory a minute after start, once the first sync is done (target ≤ 140 MB); started once
 *      before for 15 s, so its modules come from the compile cache as in the image.
 */
import { Effect, Exit, Redacted, Scope } from "effect"
import { type ChildProcess, spawn, spawnSync } from "node:child_process"
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { acquireEmbeddedDatabase, freePort } from "../../src/warehouse/EmbeddedDatabase.ts"
import { recordFigures } from "./figures.ts"
import { v8FlagsFor } from "../../bin/v8-flags.js"

const quick = process.argv.includes("--quick")
const RUNS = quick ? 3 : 7
const IDLE_SECONDS = quick ? 20 : 60
const WARM_UP_SECONDS = 15
const main = fileURLToPath(new URL("../../bin/crm-sync.js", import.meta.url))
const gnuTime = "/usr/bin/time"
const nodeArgs = (args: ReadonlyArray<string>) => [...v8FlagsFor(args), main, ...args]
const baseEnv = { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", CRM_SYNC_LOG_LEVEL: "warn" }

const median = (values: ReadonlyArray<number>) => {
  const sorted = values.toSorted((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]!
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** One run of `crm-sync args` under GNU time: seconds and peak resident MB. */
const timed = (args: ReadonlyArray<string>, env: Record<string, string>) => {
  const result = spawnSync(gnuTime, ["-f", "%e %M", process.execPath, ...nodeArgs(args)], {
    env: { ...baseEnv, ...env },
    encoding: "utf8",
    timeout: 60_000
  })
  if (result.status !== 0) throw new Error(`crm-sync ${args.join(" ")} failed: ${result.stderr.slice(-500)}`)
  const [seconds, kilobytes] = result.stderr.trim().split("\n").at(-1)!.split(" ").map(Number)
  return { seconds: seconds!, megabytes: kilobytes! / 1024 }
}

const measure = (args: ReadonlyArray<string>, env: Record<string, string> = {}) => {
  const runs = Array.from({ length: RUNS }, () => timed(args, env))
  return {
    seconds: median(runs.map((run) => run.seconds)),
    megabytes: median(runs.map((run) => run.megabytes)),
    all: runs.map((run) => run.seconds.toFixed(2)).join(", ")
  }
}

/** Resolves with the first match of `pattern` in the child's stdout. */
const readLine = (child: ChildProcess, pattern: RegExp, timeoutMs: number) =>
  new Promise<string>((resolve, reject) => {
    let seen = ""
    const timer = setTimeout(() => reject(new Error(`no line matching ${pattern} in ${timeoutMs} ms`)), timeoutMs)
    child.stdout!.on("data", (chunk: Buffer) => {
      seen += chunk.toString()
      const match = pattern.exec(seen)
      if (match !== null) {
        clearTimeout(timer)
        resolve(match[1] ?? match[0])
      }
    })
  })

const residentMegabytes = (pid: number) => {
  const status = readFileSync(`/proc/${pid}/status`, "utf8")
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) / 1024
}

const children: Array<ChildProcess> = []
process.once("exit", () => {
  for (const child of children) if (child.exitCode === null) child.kill("SIGTERM")
})

const start = (args: ReadonlyArray<string>, env: Record<string, string>) => {
  const child = spawn(process.execPath, nodeArgs(args), {
    env: { ...baseEnv, ...env },
    stdio: ["ignore", "pipe", "inherit"]
  })
  children.push(child)
  return child
}

/** The daemon on the sandbox: resident memory after `IDLE_SECONDS`. */
const idleDaemon = async (databaseUrl: string, dataDir: string) => {
  const sandboxPort = await Effect.runPromise(freePort)
  const sandbox = start(["sandbox", "--port", String(sandboxPort), "--records", "1000"], {})
  const token = await readLine(sandbox, /CRM_TOKEN=(\S+)/, 60_000)
  const config = join(dataDir, "crm-sync.json")
  writeFileSync(
    config,
    JSON.stringify({
      database_url: databaseUrl,
      webhook_port: await Effect.runPromise(freePort),
      admin_port: await Effect.runPromise(freePort),
      connections: [{ name: "default", base_url: `http://127.0.0.1:${sandboxPort}`, credential: "personal", token }]
    })
  )
  // A first start compiles the modules the daemon loads into Node's compile cache, as the image's
  // build does; the start measured reads them from it.
  const warmUp = start(["run"], { CRM_SYNC_CONFIG: config })
  await sleep(WARM_UP_SECONDS * 1000)
  warmUp.kill("SIGTERM")
  await new Promise((resolve) => warmUp.once("exit", resolve))
  const daemon = start(["run"], { CRM_SYNC_CONFIG: config })
  await sleep(IDLE_SECONDS * 1000)
  if (daemon.exitCode !== null) throw new Error(`the daemon exited with ${daemon.exitCode}`)
  const megabytes = residentMegabytes(daemon.pid!)
  daemon.kill("SIGTERM")
  sandbox.kill("SIGTERM")
  return megabytes
}

const bench = Effect.gen(function* () {
  if (!existsSync(gnuTime)) return yield* Effect.die(new Error(`${gnuTime} (GNU time) is needed: apt-get install time`))
  const help = measure(["--help"])
  const scope = yield* Scope.make()
  const dataDir = mkdtempSync(join(tmpdir(), "crm-sync-startup-"))
  try {
    const database = yield* Scope.provide(acquireEmbeddedDatabase(dataDir), scope)
    const url = Redacted.value(database.url)
    timed(["migrate"], { CRM_SYNC_DATABASE_URL: url })
    const status = measure(["status"], { CRM_SYNC_DATABASE_URL: url })
    const idle = yield* Effect.promise(() => idleDaemon(url, dataDir))
    return { help, status, idle }
  } finally {
    yield* Scope.close(scope, Exit.void)
    rmSync(dataDir, { recursive: true, force: true })
  }
})

const { help, status, idle } = await Effect.runPromise(bench)
const mark = (ok: boolean) => (ok ? "meets" : "**misses**")
const figures = [
  `Measured by \`npm run bench -- startup\` (${RUNS} runs each, medians; Node ${process.versions.node}):`,
  "",
  "| what | figure | target |",
  "| --- | --- | --- |",
  `| \`crm-sync --help\` | ${help.seconds.toFixed(2)} s, ${Math.round(help.megabytes)} MB peak | ≤ 0.35 s, ≤ 120 MB: ${mark(help.seconds <= 0.35 && help.megabytes <= 120)} |`,
  `| \`crm-sync status\` (embedded PostgreSQL) | ${status.seconds.toFixed(2)} s, ${Math.round(status.megabytes)} MB peak | ≤ 0.5 s: ${mark(status.seconds <= 0.5)} |`,
  `| idle daemon, ${IDLE_SECONDS} s after start | ${Math.round(idle)} MB resident | ≤ 140 MB: ${mark(idle <= 140)} |`,
  "",
  `Runs: \`--help\` ${help.all} s; \`status\` ${status.all} s.`
].join("\n")
console.log(figures)
await recordFigures("startup", figures)
