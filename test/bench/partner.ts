/**
 * Partner benchmark (issue 28): `npm run bench -- partner [-- --overlapping] [-- --connections=N]
 * [-- --records=N] [-- --cap=SECONDS] [-- --quick] [-- --no-docs]` (`--quick`: 50 firms, or 10
 * advisors).
 *
 * One `crm-sync run` (a child process, embedded PostgreSQL) with N personal-token connections to
 * the sandbox (another child process, the spec's hourly limits), from a cold start:
 *   - default, a partner's disjoint firms: `--connections` firms (default 500) of one book and
 *     `--records` records each (default 20), one connection per firm (its first user's seeded
 *     token), each connection its own company bucket;
 *   - `--overlapping`: one firm of `--connections` advisors (default 50) who all see its three
 *     books (`--records` default 5,000 for the firm), their connections sharing one company bucket.
 * All connections share the sandbox's address bucket, as they would one egress address. From
 * the moment its admin port answers, while the first runs go, it samples `/readyz` and `/status`
 * (each every 500 ms from a prober process of its own, prober.ts; 5-s timeout, a timeout counted
 * as 5 s), the daemon's resident memory, and every 10 s its `/metrics` (heap, event-loop delay),
 * reads `crm_sync.job_runs` every 2 s, and hears each committed page (a NOTIFY from a statement
 * trigger on the crawled tables). It stops when every connection's first runs of every job (poll,
 * the three crawls, reference) have finished, or at the cap (default 360 s), and prints: the time
 * until then, the seconds without a committed page, peak resident memory, failed runs, the
 * p50/p99/max of both probes, the time SIGTERM takes then, and the progress every 10 s. Written
 * between the `bench:partner` (or `bench:partner-overlapping`) markers of docs/performance.md.
 *
 * `--replicas=N [--kill-one]`: N daemons on the one database (the probes sample the first). Each
 * replica's share is its count of finished runs (`crm_sync_sync_runs_total`, read from its
 * `/metrics` at the end, or just before it is killed). With `--kill-one`, the last replica is
 * SIGKILLed once half of the first runs are done; the runs it held are marked `interrupted` by
 * the others' orphan sweep, and the figure is the longest time from the kill until each such job
 * succeeded elsewhere. Written between the `bench:partner-replicas` (`-kill`) markers.
 *
 * `--sigterm-at=S`: SIGTERM the daemon S seconds after its spawn, while its first runs go, and time
 * its exit (the `bench:partner-sigterm` markers).
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Exit, Fiber, Queue, Redacted, Scope } from "effect"
import { Reactivity } from "effect/reactivity"
import { type ChildProcess, spawn } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { loadavg, tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { acquireEmbeddedDatabase, freePort } from "../../src/warehouse/EmbeddedDatabase.ts"
import { recordFigures } from "./figures.ts"
import { v8FlagsFor } from "../../bin/v8-flags.js"

/** `--name=value` or `--name value` (run.ts passes only `--` arguments on: use the first form). */
const argument = (name: string) => {
  const inline = process.argv.find((arg) => arg.startsWith(`${name}=`))
  if (inline !== undefined) return inline.slice(name.length + 1)
  const index = process.argv.indexOf(name)
  return index < 0 ? undefined : process.argv[index + 1]
}
const OVERLAPPING = process.argv.includes("--overlapping")
const QUICK = process.argv.includes("--quick")
const CONNECTIONS = Number(argument("--connections") ?? (OVERLAPPING ? (QUICK ? 10 : 50) : QUICK ? 50 : 500))
const RECORDS = Number(argument("--records") ?? (OVERLAPPING ? 5_000 : 20))
const CAP_SECONDS = Number(argument("--cap") ?? 360)
/** `--replicas=N`: N daemons on the one database, sharing the work through their leases. */
const REPLICAS = Math.max(1, Number(argument("--replicas") ?? 1))
/** `--kill-one` (with replicas): the last replica is SIGKILLed once half of the first runs are done. */
const KILL_ONE = REPLICAS > 1 && process.argv.includes("--kill-one")
/** `--sigterm-at=S`: SIGTERM the daemon S seconds after its spawn, during its start, and time its exit. */
const SIGTERM_AT = argument("--sigterm-at") === undefined ? undefined : Number(argument("--sigterm-at"))
/** A run cut short by `--sigterm-at` reports only its stop. */
const BRIEF = KILL_ONE || SIGTERM_AT !== undefined
/** The jobs of a personal-token connection whose first runs are awaited (src/sync/SyncJobs.ts). */
const FIRST_RUNS = [
  "poll:businesses",
  "crawl:annuity_contracts",
  "crawl:financial_accounts",
  "crawl:businesses",
  "reference"
]
const main = fileURLToPath(new URL("../../bin/crm-sync.js", import.meta.url))
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

const rssMb = (pid: number) => {
  const kb = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0)
  return Math.round(kb / 1024)
}

const quantile = (values: ReadonlyArray<number>, q: number) => {
  if (values.length === 0) return Number.NaN
  const sorted = values.toSorted((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!
}

const children: Array<ChildProcess> = []
process.once("exit", () => {
  for (const child of children) if (child.exitCode === null) child.kill("SIGKILL")
})

const start = (args: ReadonlyArray<string>, env: Record<string, string>) => {
  const extra = (process.env.PARTNER_NODE_FLAGS ?? "").split(" ").filter((flag) => flag !== "")
  const child = spawn(process.execPath, [...v8FlagsFor(args), ...extra, main, ...args], {
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", CRM_SYNC_LOG_LEVEL: "error", ...env },
    stdio: ["ignore", "pipe", "inherit"]
  })
  child.stdout!.resume()
  children.push(child)
  return child
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

/** The sandbox of the chosen mode, and one seeded token per connection. */
const startSandbox = async () => {
  const port = await Effect.runPromise(freePort)
  const shape = OVERLAPPING
    ? ["--companies", "1", "--books-per-company", "3", "--users-per-company", String(CONNECTIONS), "--overlap", "1"]
    : ["--companies", String(CONNECTIONS), "--books-per-company", "1", "--users-per-company", "2"]
  const child = start(
    ["sandbox", "--port", String(port), ...shape, "--records-per-company", String(RECORDS), "--user-tokens"],
    {}
  )
  await readLine(child, /CRM_BASE_URL=(\S+)/, 120_000)
  const baseUrl = `http://127.0.0.1:${port}`
  const state = (await (await fetch(`${baseUrl}/_sandbox`)).json()) as {
    users: Array<{ id: string; company_ids: Array<string> }>
    companies: Array<{ id: string }>
  }
  const tokens = (await (await fetch(`${baseUrl}/_sandbox/tokens`)).json()) as Array<{
    token: string
    user_id: string
    company_id: string
    label: string
  }>
  const tokenOf = (userId: string, companyId: string) =>
    tokens.find((t) => t.label === "user token" && t.user_id === userId && t.company_id === companyId)!.token
  // disjoint: each firm's first user; overlapping: every advisor of the one firm
  const chosen = OVERLAPPING
    ? state.users.slice(0, CONNECTIONS).map((user) => tokenOf(user.id, user.company_ids[0]!))
    : state.companies.map((company) => {
        const user = state.users.find((u) => u.company_ids[0] === company.id)!
        return tokenOf(user.id, company.id)
      })
  return { child, baseUrl, tokens: chosen }
}

interface Probe {
  readonly latencies: Array<number>
  failures: number
}

/**
 * `GET url` every `everyMs` from a process of its own (prober.ts) until `stop` is called, which
 * resolves with its latencies and non-2xx answers.
 */
const probe = (url: string, everyMs: number) => {
  const child = spawn(process.execPath, [fileURLToPath(new URL("prober.ts", import.meta.url)), url, String(everyMs)], {
    stdio: ["pipe", "pipe", "inherit"]
  })
  children.push(child)
  let out = ""
  child.stdout!.on("data", (chunk: Buffer) => (out += chunk.toString()))
  const ended = new Promise<void>((resolve) => child.once("exit", () => resolve()))
  return {
    stop: async (): Promise<Probe> => {
      child.stdin!.end()
      await ended
      return JSON.parse(out) as Probe
    }
  }
}

/**
 * From a process's `/metrics`: its V8 heap in use (MB) and the 99th percentile of its event loop's
 * delay over the last 10 s (ms, RuntimeMetrics); zeros if it does not answer.
 */
const scrape = (adminPort: number) =>
  fetch(`http://127.0.0.1:${adminPort}/metrics`, { signal: AbortSignal.timeout(5_000) })
    .then((response) => response.text())
    .then((text) => {
      const value = (prefix: string) => {
        const line = text.split("\n").find((row) => row.startsWith(prefix))
        return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(" ") + 1))
      }
      return {
        heapMb: Math.round(value("crm_sync_process_heap_used_bytes") / 1024 / 1024),
        loopP99Ms: Math.round(value('crm_sync_event_loop_delay_seconds{quantile="0.99"}') * 1000)
      }
    })
    .catch(() => ({ heapMb: 0, loopP99Ms: 0 }))

/** A replica's finished runs (succeeded or failed), from its `/metrics`. */
const finishedRuns = (adminPort: number) =>
  fetch(`http://127.0.0.1:${adminPort}/metrics`, { signal: AbortSignal.timeout(10_000) })
    .then((response) => response.text())
    .then((text) =>
      text
        .split("\n")
        .filter((line) => line.startsWith("crm_sync_sync_runs_total{") && /status="(succeeded|failed)"/.test(line))
        .reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(" ") + 1)), 0)
    )
    .catch(() => 0)

interface Progress {
  readonly finished: number
  readonly failed: number
  readonly connectionsDone: number
}

const PROGRESS_SQL = `
  WITH firsts AS (
    SELECT connection, job, bool_or(status IN ('succeeded', 'failed')) AS finished
    FROM crm_sync.job_runs WHERE connection IS NOT NULL GROUP BY connection, job
  )
  SELECT
    (SELECT count(*)::int FROM crm_sync.job_runs WHERE status IN ('succeeded', 'failed')) AS finished,
    (SELECT count(*)::int FROM crm_sync.job_runs WHERE status = 'failed') AS failed,
    (SELECT count(*)::int FROM (
       SELECT connection FROM firsts WHERE finished AND job IN (${FIRST_RUNS.map((job) => `'${job}'`).join(", ")})
       GROUP BY connection HAVING count(*) = ${FIRST_RUNS.length}
     ) done) AS "connectionsDone"`

/**
 * A statement on a crawled table notifies `bench_page` once per transaction, delivered when it
 * commits: the bench counts the seconds in which no crawl or poll committed a page.
 */
const PAGE_TRIGGERS = [
  `CREATE FUNCTION public.bench_page() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     PERFORM pg_notify('bench_page', '');
     RETURN NULL;
   END $$`,
  ...["businesses", "annuity_contracts", "financial_accounts"].map(
    (table) => `CREATE TRIGGER bench_page AFTER INSERT OR UPDATE ON crm.${table}
       FOR EACH STATEMENT EXECUTE FUNCTION public.bench_page()`
  )
]

/** Seconds in [from, to) without a committed page, and the longest such run. */
const pageGaps = (commits: ReadonlyArray<number>, from: number, to: number) => {
  const seconds = new Set(commits.map((at) => Math.floor(at / 1000)))
  let idle = 0
  let run = 0
  let longest = 0
  for (let second = Math.floor(from / 1000); second < Math.floor(to / 1000); second++) {
    if (seconds.has(second)) {
      run = 0
      continue
    }
    idle++
    run++
    longest = Math.max(longest, run)
  }
  return { idle, longest }
}

const connectionName = (i: number) => `c${String(i + 1).padStart(4, "0")}`

/** The first runs not finished: each connection's job without a finished run, and its latest run. */
const unfinishedSql = (connections: number) => `
  SELECT name, job, latest.status, round(extract(epoch FROM now() - latest.started_at))::int AS "ageSeconds"
  FROM unnest(ARRAY[${Array.from({ length: connections }, (_, i) => `'${connectionName(i)}'`).join(", ")}]) AS name
  CROSS JOIN unnest(ARRAY[${FIRST_RUNS.map((job) => `'${job}'`).join(", ")}]) AS job
  LEFT JOIN LATERAL (
    SELECT status, started_at FROM crm_sync.job_runs r WHERE r.connection = name AND r.job = job ORDER BY id DESC LIMIT 1
  ) latest ON true
  WHERE NOT EXISTS (
    SELECT 1 FROM crm_sync.job_runs r
    WHERE r.connection = name AND r.job = job AND r.status IN ('succeeded', 'failed')
  )
  ORDER BY name, job LIMIT 20`

interface Unfinished {
  readonly name: string
  readonly job: string
  readonly status: string | null
  readonly ageSeconds: number | null
}

const bench = Effect.gen(function* () {
  const scope = yield* Scope.make()
  const dir = mkdtempSync(join(tmpdir(), "crm-sync-partner-"))
  try {
    const database = yield* Scope.provide(acquireEmbeddedDatabase(dir), scope)
    const sql = yield* Scope.provide(PgClient.make({ url: database.url, maxConnections: 2 }), scope).pipe(
      Effect.provide(Reactivity.layer)
    )
    const progress = () =>
      Effect.runPromise(sql.unsafe<Progress>(PROGRESS_SQL)).then(
        (rows) => rows[0]!,
        () => ({ finished: 0, failed: 0, connectionsDone: 0 })
      )
    const databaseNow = () =>
      Effect.runPromise(sql.unsafe<{ ms: number }>("SELECT (extract(epoch FROM now()) * 1000)::float8 AS ms")).then(
        (rows) => rows[0]!.ms
      )
    // For each job the killed replica held (its runs the others' sweep marked interrupted): the
    // first success after the kill. Null while one has not succeeded again.
    const resumedAfterKill = (killedMs: number) =>
      Effect.runPromise(
        sql.unsafe<{ seconds: number | null }>(`
          SELECT max(extract(epoch FROM s.first_success) - ${killedMs / 1000})::float8 AS seconds,
                 bool_or(s.first_success IS NULL) AS missing
          FROM crm_sync.job_runs o
          CROSS JOIN LATERAL (
            SELECT min(r.finished_at) AS first_success FROM crm_sync.job_runs r
            WHERE r.job = o.job AND r.connection = o.connection AND r.status = 'succeeded' AND r.id > o.id
          ) s
          WHERE o.status = 'interrupted' AND o.started_at <= to_timestamp(${killedMs / 1000})`)
      ).then((rows) => ((rows[0] as { missing?: boolean } | undefined)?.missing ? null : (rows[0]?.seconds ?? null)))
    const ports: Array<{ readonly admin: number; readonly webhook: number }> = []
    for (let i = 0; i < REPLICAS; i++) ports.push({ admin: yield* freePort, webhook: yield* freePort })
    const adminPort = ports[0]!.admin
    return yield* Effect.promise(async () => {
      const sandbox = await startSandbox()
      const configs = ports.map((port, i) => {
        const path = join(dir, `crm-sync-${i + 1}.json`)
        writeFileSync(
          path,
          JSON.stringify({
            database_url: Redacted.value(database.url),
            webhook_port: port.webhook,
            admin_port: port.admin,
            connections: sandbox.tokens.map((token, i) => ({
              name: connectionName(i),
              base_url: sandbox.baseUrl,
              credential: "personal",
              token,
              // one firm's advisors share its company bucket; a partner's firms each have their own
              ...(OVERLAPPING ? { company_bucket: "firm" } : {})
            }))
          })
        )
        return path
      })
      const config = configs[0]!
      const migrate = start(["migrate"], { CRM_SYNC_CONFIG: config })
      await new Promise((resolve) => migrate.once("exit", resolve))
      for (const statement of PAGE_TRIGGERS) await Effect.runPromise(sql.unsafe(statement))
      const commits: Array<number> = []
      const listening = Effect.runFork(
        Effect.scoped(
          Effect.gen(function* () {
            const notifications = yield* sql.listen("bench_page")
            while (true) {
              yield* Queue.take(notifications)
              commits.push(performance.now())
            }
          })
        )
      )
      await sleep(500)

      const started = performance.now()
      const replicas = configs.map((path) => start(["run"], { CRM_SYNC_CONFIG: path }))
      const daemon = replicas[0]!
      const alive = () => replicas.filter((replica) => replica.exitCode === null && replica.signalCode === null)
      const shares = new Map<number, number>()
      let killedAt: number | undefined
      // the probes sample the daemon once its admin port answers (its start is not what they measure)
      while (
        !(await fetch(`http://127.0.0.1:${adminPort}/healthz`).then(
          () => true,
          () => false
        ))
      ) {
        if (daemon.exitCode !== null) throw new Error(`the daemon exited with ${daemon.exitCode}`)
        await sleep(100)
      }
      const listeningAfter = (performance.now() - started) / 1000
      const probes = [
        probe(`http://127.0.0.1:${adminPort}/readyz`, 500),
        probe(`http://127.0.0.1:${adminPort}/status`, 500)
      ]
      let peakMb = 0
      let peakHeapMb = 0
      /** The daemon's own event-loop delay, p99 of each 10 s. */
      const loopP99s: Array<number> = []
      let last: Progress = { finished: 0, failed: 0, connectionsDone: 0 }
      const timeline: Array<string> = []
      let doneAt: number | undefined
      for (let tick = 0; ; tick++) {
        await sleep(2_000)
        if (daemon.exitCode !== null) throw new Error(`the daemon exited with ${daemon.exitCode}`)
        for (const replica of alive()) peakMb = Math.max(peakMb, rssMb(replica.pid!))
        // /metrics renders every series of every connection (tens of ms at 500): read it as a scrape would, not every tick
        if (tick % 5 === 4) {
          const scraped = await scrape(adminPort)
          peakHeapMb = Math.max(peakHeapMb, scraped.heapMb)
          loopP99s.push(scraped.loopP99Ms)
        }
        last = await progress()
        if (KILL_ONE && killedAt === undefined && last.finished >= (CONNECTIONS * FIRST_RUNS.length) / 2) {
          const victim = replicas.length - 1
          shares.set(victim, await finishedRuns(ports[victim]!.admin))
          killedAt = await databaseNow()
          replicas[victim]!.kill("SIGKILL")
          console.log(`replica ${victim + 1} SIGKILLed after ${last.finished} finished runs`)
        }
        const elapsed = (performance.now() - started) / 1000
        if (tick % 5 === 4) {
          const line = `${Math.round(elapsed)} s: ${last.connectionsDone}/${CONNECTIONS} connections done, ${last.finished} runs finished (${last.failed} failed), ${rssMb(daemon.pid!)} MB`
          timeline.push(line)
          console.log(line)
        }
        if (last.connectionsDone >= CONNECTIONS) {
          doneAt = elapsed
          break
        }
        if (elapsed >= CAP_SECONDS || (SIGTERM_AT !== undefined && elapsed >= SIGTERM_AT)) break
      }
      const [readyz, status] = (await Promise.all(probes.map((one) => one.stop()))) as [Probe, Probe]
      if (process.env.PARTNER_DEBUG !== undefined)
        console.log(
          "slow probes (index: ms):",
          JSON.stringify(readyz.latencies.flatMap((ms, i) => (ms > 50 ? [[i, Math.round(ms)]] : []))),
          JSON.stringify(status.latencies.flatMap((ms, i) => (ms > 200 ? [[i, Math.round(ms)]] : [])))
        )
      const endedAt = performance.now()
      await Effect.runPromise(Fiber.interrupt(listening))
      // between the first and the last committed page (the end of the runs is seen up to 2 s late)
      const gaps = pageGaps(commits, commits[0] ?? endedAt, (commits.at(-1) ?? endedAt) + 1)
      const unfinished =
        doneAt === undefined
          ? await Effect.runPromise(sql.unsafe<Unfinished>(unfinishedSql(CONNECTIONS))).catch(() => [])
          : []
      const load = loadavg()[1]!
      for (const [i, replica] of replicas.entries()) {
        if (alive().includes(replica)) shares.set(i, await finishedRuns(ports[i]!.admin))
      }
      const resumedSeconds = killedAt === undefined ? undefined : await resumedAfterKill(killedAt)
      const stopping = performance.now()
      const stoppedAt = (stopping - started) / 1000
      const running = alive()
      for (const replica of running) replica.kill("SIGTERM")
      const exited = await Promise.race([
        Promise.all(running.map((replica) => new Promise((resolve) => replica.once("exit", resolve)))).then(() => true),
        sleep(30_000).then(() => false)
      ])
      const sigtermSeconds = exited ? (performance.now() - stopping) / 1000 : undefined
      sandbox.child.kill("SIGTERM")
      return {
        doneAt,
        peakMb,
        peakHeapMb,
        loopP99s,
        last,
        readyz,
        status,
        timeline,
        sigtermSeconds,
        listeningAfter,
        load,
        gaps,
        pages: commits.length,
        unfinished,
        shares: replicas.map((_, i) => shares.get(i) ?? 0),
        stoppedAt,
        resumedSeconds
      }
    })
  } finally {
    for (const child of children) if (child.exitCode === null) child.kill("SIGKILL")
    yield* Effect.promise(() => sleep(1_000))
    yield* Scope.close(scope, Exit.void)
    rmSync(dir, { recursive: true, force: true })
  }
})

const result = await Effect.runPromise(bench)
const ms = (value: number) => `${Math.round(value)} ms`
const met = (ok: boolean) => (ok ? "met" : "**not met**")
const target = OVERLAPPING ? { seconds: 60 } : { seconds: 180 }
const describeProbe = (p: Probe) =>
  `p50 ${Math.round(quantile(p.latencies, 0.5))}, p99 ${Math.round(quantile(p.latencies, 0.99))}, max ${ms(Math.max(...p.latencies))} (${p.latencies.length} probes, ${p.failures} failed)`
const what = OVERLAPPING
  ? `one firm of ${CONNECTIONS} advisors who all see its 3 books (${RECORDS.toLocaleString("en-US")} records), a connection each, one company bucket`
  : `${CONNECTIONS} disjoint firms of ${RECORDS} records, a connection each`
const totalRuns = result.shares.reduce((sum, runs) => sum + runs, 0)
const shareOf = (runs: number) => (totalRuns === 0 ? 0 : (100 * runs) / totalRuns)
const evenShare = 100 / REPLICAS
const replicaRows =
  REPLICAS === 1
    ? []
    : [
        `| share of the ${totalRuns} runs | ${result.shares.map((runs, i) => `${i + 1}: ${shareOf(runs).toFixed(0)}%${KILL_ONE && i === REPLICAS - 1 ? " (until killed)" : ""}`).join(", ")} | ${evenShare.toFixed(0)}% ± 10 points | ${met(KILL_ONE || result.shares.every((runs) => Math.abs(shareOf(runs) - evenShare) <= 10))} |`,
        ...(KILL_ONE
          ? [
              `| killed replica's jobs done elsewhere | ${result.resumedSeconds === undefined || result.resumedSeconds === null ? "**not all**" : `within ${result.resumedSeconds.toFixed(0)} s`} | ≤ 60 s | ${met(result.resumedSeconds !== undefined && result.resumedSeconds !== null && result.resumedSeconds <= 60)} |`
            ]
          : [])
      ]
const flags = [
  ...(OVERLAPPING ? ["--overlapping"] : []),
  ...(REPLICAS > 1 ? [`--replicas=${REPLICAS}`] : []),
  ...(KILL_ONE ? ["--kill-one"] : []),
  ...(SIGTERM_AT !== undefined ? [`--sigterm-at=${SIGTERM_AT}`] : [])
]
const command = `npm run bench -- partner${flags.length === 0 ? "" : ` -- ${flags.join(" ")}`}`
const figures = [
  `Measured ${new Date().toISOString().slice(0, 10)} by \`${command}\`: ${what}${REPLICAS > 1 ? `, ${REPLICAS} replicas on one database` : ""}.`,
  "",
  "| measure | figure | target | |",
  "| --- | --- | --- | --- |",
  ...(SIGTERM_AT !== undefined
    ? []
    : [
        `| all first runs done (poll, crawls, reference) | ${result.doneAt === undefined ? `**not after ${CAP_SECONDS} s**: ${result.last.connectionsDone} of ${CONNECTIONS} connections` : `${result.doneAt.toFixed(0)} s`} | ≤ ${target.seconds} s | ${met(result.doneAt !== undefined && result.doneAt <= target.seconds)} |`
      ]),
  ...(BRIEF
    ? []
    : [
        `| seconds with no page committed | ${result.gaps.idle}, longest ${result.gaps.longest} s (${result.pages} pages) | 0 | ${met(result.gaps.idle === 0)} |`,
        `| peak resident | ${result.peakMb} MB (heap ≤ ${result.peakHeapMb} MB) | ≤ 400 MB | ${met(result.peakMb <= 400)} |`
      ]),
  `| failed runs | ${result.last.failed} of ${result.last.finished} finished | 0 | ${met(result.last.failed === 0)} |`,
  ...(BRIEF
    ? []
    : [
        `| \`/readyz\` | ${describeProbe(result.readyz)} | p99 ≤ 50 ms | ${met(quantile(result.readyz.latencies, 0.99) <= 50)} |`,
        `| \`/status\` | ${describeProbe(result.status)} | p99 ≤ 200 ms | ${met(quantile(result.status.latencies, 0.99) <= 200)} |`,
        `| the daemon's event-loop delay (its own p99 per 10 s) | median ${quantile(result.loopP99s, 0.5)}, worst ${Math.max(0, ...result.loopP99s)} ms | | |`
      ]),
  ...replicaRows,
  ...(KILL_ONE
    ? []
    : [
        `| SIGTERM to exit, ${SIGTERM_AT === undefined ? "at the end" : `${Math.round(result.stoppedAt)} s into the start`} | ${result.sigtermSeconds === undefined ? "**not within 30 s**" : `${result.sigtermSeconds.toFixed(1)} s`} | ≤ 10 s | ${met(result.sigtermSeconds !== undefined && result.sigtermSeconds <= 10)} |`
      ]),
  ...(result.unfinished.length === 0 || SIGTERM_AT !== undefined
    ? []
    : [
        "",
        `First runs not finished at the cap (up to 20): ${result.unfinished
          .map((u) =>
            u.status === null
              ? `${u.name} ${u.job} never started`
              : `${u.name} ${u.job} ${u.status} for ${u.ageSeconds} s`
          )
          .join("; ")}.`
      ]),
  "",
  `Times from the spawn; admin port up after ${result.listeningAfter.toFixed(1)} s; load average ${result.load.toFixed(1)}.`
].join("\n")
console.log(`\n${figures}\n`)
const marker =
  SIGTERM_AT !== undefined
    ? "partner-sigterm"
    : KILL_ONE
      ? "partner-replicas-kill"
      : REPLICAS > 1
        ? "partner-replicas"
        : OVERLAPPING
          ? "partner-overlapping"
          : "partner"
await recordFigures(marker, figures)
process.exit(0)
