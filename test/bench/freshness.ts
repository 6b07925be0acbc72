/**
 * Freshness benchmark: `node test/bench/freshness.ts [--quick] [--no-docs]`.
 *
 * How old is a change when it reaches the warehouse? The whole daemon (`crm-sync run`, a child
 * process) runs against the bundled sandbox (another child, `crm-sync sandbox`) and an embedded
 * PostgreSQL in a temporary folder, and the bench measures:
 *   1. by webhook: signed `task.created` deliveries sent the way the CRM's sender sends them (a
 *      third child process, paced at 100/s and then 1,000/s), from each delivery's send to the
 *      commit of its task's row — intake, inbox, processor and warehouse together;
 *   2. by poll: businesses changed in the sandbox at random moments (no event exists for them),
 *      from the change to the commit of its row, against `schedules.businesses` (15 s here).
 *
 * Commit times come from a trigger that NOTIFYs each written id: PostgreSQL delivers a
 * notification only when its transaction commits, so the moment the bench's LISTEN connection
 * receives it is the commit plus a loopback hop. Send and receive times are both `Date.now()` on
 * this machine. Loopback only; every loop is bounded in count and time.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Exit, Redacted, Fiber, Queue, Scope } from "effect"
import { Reactivity } from "effect/reactivity"
import { type ChildProcess, fork, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { loadavg, tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { Webhook } from "standardwebhooks"
import { acquireEmbeddedDatabase, freePort } from "../../src/warehouse/EmbeddedDatabase.ts"
import { recordFigures } from "./figures.ts"
import { Connection } from "./loopback.ts"
import { v8FlagsFor } from "../../bin/v8-flags.js"

const quick = process.argv.includes("--quick")
const SECONDS_PER_RATE = quick ? 3 : 10
const RATES = [100, 1_000] as const
const POLL_INTERVAL_SECONDS = 15
const POLL_CHANGES = quick ? 3 : 8
const main = fileURLToPath(new URL("../../bin/crm-sync.js", import.meta.url))
const fixture = JSON.parse(
  readFileSync(fileURLToPath(new URL("../fixtures/events/task.created.json", import.meta.url)), "utf8")
) as Record<string, any>

const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

// ---------------------------------------------------------------------------------------------
// The sender (child process): paced, signed deliveries; reports when each was written
// ---------------------------------------------------------------------------------------------

interface SendSpec {
  readonly url: string
  readonly secret: string
  readonly rate: number
  readonly seconds: number
  readonly prefix: string
}

const send = (spec: SendSpec): Promise<{ sent: Record<string, number>; failed: number }> =>
  new Promise((resolve) => {
    const target = new URL(spec.url)
    const webhook = new Webhook(spec.secret)
    const total = spec.rate * spec.seconds
    const connections: Array<Connection> = []
    const idle = () => {
      const free = connections.find((connection) => !connection.busy && !connection.closed)
      if (free !== undefined) return free
      const opened = new Connection(target.hostname, Number(target.port))
      connections.push(opened)
      return opened
    }
    const sent: Record<string, number> = {}
    let failed = 0
    let answered = 0
    let next = 0
    const started = Date.now()
    const tick = () => {
      const due = Math.min(total, Math.floor(((Date.now() - started) * spec.rate) / 1000) + 1)
      while (next < due) {
        const index = next++
        const id = `${spec.prefix}_${index}`
        const body = JSON.stringify({ ...fixture, id, task: { ...fixture.task, id, title: `Freshness ${index}` } })
        const hookId = `msg_${randomBytes(10).toString("hex")}`
        const now = new Date()
        const request = Buffer.from(
          `POST ${target.pathname} HTTP/1.1\r\nhost: ${target.host}\r\ncontent-type: application/json\r\n` +
            `content-length: ${Buffer.byteLength(body)}\r\nhook-id: ${hookId}\r\n` +
            `hook-timestamp: ${Math.floor(now.getTime() / 1000)}\r\nhook-signature: ${webhook.sign(hookId, now, body)}\r\n\r\n` +
            body
        )
        sent[id] = Date.now()
        idle().send(request, (status) => {
          if (status < 200 || status >= 300) failed++
          if (++answered === total) {
            for (const connection of connections) connection.close()
            resolve({ sent, failed })
          }
        })
      }
      if (next < total) setTimeout(tick, 1)
    }
    tick()
  })

if (process.argv.includes("--sender")) {
  process.once("message", (spec: SendSpec) => {
    void send(spec).then((result) => process.send?.(result, () => process.exit(0)))
  })
}

// ---------------------------------------------------------------------------------------------
// The bench (parent process)
// ---------------------------------------------------------------------------------------------

const COMMIT_TRIGGER = [
  `CREATE FUNCTION public.bench_committed() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     PERFORM pg_notify('bench_committed', TG_TABLE_NAME || ':' || NEW.id);
     RETURN NULL;
   END $$`,
  `CREATE TRIGGER bench_committed AFTER INSERT OR UPDATE ON crm.tasks
     FOR EACH ROW EXECUTE FUNCTION public.bench_committed()`,
  `CREATE TRIGGER bench_committed AFTER INSERT OR UPDATE ON crm.businesses
     FOR EACH ROW EXECUTE FUNCTION public.bench_committed()`
]

/** First commit seen per `table:id`, by the LISTEN connection. */
const committed = new Map<string, number>()

const children: Array<ChildProcess> = []

const child = (args: ReadonlyArray<string>, env: Record<string, string>): ChildProcess => {
  const process_ = spawn(process.execPath, [...v8FlagsFor(args), main, ...args], {
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", LOG_LEVEL: "warn", ...env },
    stdio: ["ignore", "pipe", "inherit"]
  })
  children.push(process_)
  return process_
}

const stopChildren = () => {
  for (const process_ of children) if (process_.exitCode === null) process_.kill("SIGTERM")
}
// Whatever ends the bench (a failure included), its children end with it.
process.once("exit", stopChildren)

/** Resolves when `check` holds, polling every 200 ms, or fails after `timeoutMs`. */
const until = async (what: string, check: () => Promise<boolean>, timeoutMs: number) => {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (await check()) return
    await sleep(200)
  }
  throw new Error(`timed out waiting for ${what}`)
}

const sandboxGet = async (base: string, path: string) => (await fetch(`${base}${path}`)).json() as Promise<any>

interface WebhookFigures {
  readonly rate: number
  readonly sent: number
  readonly failed: number
  readonly missing: number
  readonly p50: number
  readonly p99: number
  readonly max: number
}

const measureWebhooks = async (url: string, secret: string, rate: number): Promise<WebhookFigures> => {
  const sender = fork(fileURLToPath(import.meta.url), ["--sender"], { execArgv: v8FlagsFor(["run"]) })
  children.push(sender)
  const prefix = `tsk_fresh_${rate}`
  const result = await new Promise<{ sent: Record<string, number>; failed: number }>((resolve) => {
    sender.once("message", (message) => resolve(message as { sent: Record<string, number>; failed: number }))
    sender.send({ url, secret, rate, seconds: SECONDS_PER_RATE, prefix } satisfies SendSpec)
  })
  const ids = Object.keys(result.sent)
  await until(
    "the processor to apply every delivery",
    async () => ids.every((id) => committed.has(`tasks:${id}`)),
    60_000
  ).catch(() => undefined)
  const latencies = ids
    .filter((id) => committed.has(`tasks:${id}`))
    .map((id) => committed.get(`tasks:${id}`)! - result.sent[id]!)
    .toSorted((a, b) => a - b)
  return {
    rate,
    sent: ids.length,
    failed: result.failed,
    missing: ids.length - latencies.length,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    max: latencies.at(-1) ?? 0
  }
}

const measurePoll = async (sandbox: string, businessIds: ReadonlyArray<string>) => {
  const changes: Array<{ id: string; at: number }> = []
  const window = POLL_INTERVAL_SECONDS * 2 * 1000
  for (const [index, id] of businessIds.slice(0, POLL_CHANGES).entries()) {
    await sleep(Math.floor(Math.random() * (window / POLL_CHANGES)))
    committed.delete(`businesses:${id}`)
    const at = Date.now()
    const response = await fetch(`${sandbox}/_sandbox/businesses/${id}`, {
      method: "PATCH",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ additional_info: `freshness ${index} ${at}` })
    })
    if (!response.ok) throw new Error(`sandbox refused a business change: ${response.status}`)
    changes.push({ id, at })
  }
  await until(
    "the poller to read every change",
    async () => changes.every((change) => committed.has(`businesses:${change.id}`)),
    (POLL_INTERVAL_SECONDS + 60) * 1000
  ).catch(() => undefined)
  const latencies = changes
    .filter((change) => committed.has(`businesses:${change.id}`))
    .map((change) => committed.get(`businesses:${change.id}`)! - change.at)
    .toSorted((a, b) => a - b)
  return {
    changes: changes.length,
    missing: changes.length - latencies.length,
    p50: percentile(latencies, 50),
    max: latencies.at(-1) ?? 0
  }
}

const readLine = (process_: ChildProcess, pattern: RegExp, timeoutMs: number) =>
  new Promise<RegExpExecArray>((resolve, reject) => {
    let text = ""
    const timer = setTimeout(() => reject(new Error(`no line matching ${pattern} within ${timeoutMs} ms`)), timeoutMs)
    process_.stdout!.on("data", (chunk: Buffer) => {
      text += chunk.toString("utf8")
      const match = pattern.exec(text)
      if (match !== null) {
        clearTimeout(timer)
        resolve(match)
      }
    })
  })

const bench = Effect.gen(function* () {
  const scope = yield* Scope.make()
  const dataDir = mkdtempSync(join(tmpdir(), "crm-sync-freshness-"))
  try {
    const database = yield* Scope.provide(acquireEmbeddedDatabase(dataDir), scope)
    const databaseUrl = Redacted.value(database.url)
    const sandboxPort = yield* freePort
    const webhookPort = yield* freePort
    const sql = yield* Scope.provide(PgClient.make({ url: database.url, maxConnections: 2 }), scope).pipe(
      Effect.provide(Reactivity.layer)
    )
    const query = <A extends object>(statement: string) => Effect.runPromise(sql.unsafe<A>(statement))
    return yield* Effect.promise(async () => {
      const sandboxProcess = child(["sandbox", "--port", String(sandboxPort), "--records", "1000"], {})
      await readLine(sandboxProcess, /CRM_BASE_URL=(\S+)/, 60_000)
      const sandbox = `http://127.0.0.1:${sandboxPort}`
      const state = await sandboxGet(sandbox, "/_sandbox")
      const secret = `whsec_${randomBytes(24).toString("base64")}`
      const configFile = join(dataDir, "crm-sync.json")
      writeFileSync(
        configFile,
        JSON.stringify({
          database_url: databaseUrl,
          webhook_port: webhookPort,
          connections: [
            {
              name: "default",
              base_url: sandbox,
              credential: "personal",
              token: state.credentials.personal_access_token.token
            }
          ],
          webhooks: { endpoints: [{ name: "default", secrets: [secret] }] },
          schedules: { businesses: `${POLL_INTERVAL_SECONDS} seconds` }
        })
      )
      const migrate = child(["migrate"], { CRM_SYNC_CONFIG: configFile })
      await new Promise((resolve) => migrate.once("exit", resolve))
      for (const statement of COMMIT_TRIGGER) await query(statement)
      const listening = Effect.runFork(
        Effect.scoped(
          Effect.gen(function* () {
            const notifications = yield* sql.listen("bench_committed")
            while (true) {
              const { payload } = yield* Queue.take(notifications)
              if (!committed.has(payload)) committed.set(payload, Date.now())
            }
          })
        )
      )
      await sleep(500)

      child(["run"], { CRM_SYNC_CONFIG: configFile })
      // Let the first sync finish (businesses, crawls, reference) so it does not share the CPUs.
      await until(
        "the first sync",
        async () => {
          const rows = await query<{ n: number }>(
            "SELECT count(DISTINCT job)::int AS n FROM crm_sync.job_runs WHERE status = 'succeeded'"
          )
          return (rows[0]?.n ?? 0) >= 4
        },
        180_000
      )
      await sleep(2_000)

      const webhooks: Array<WebhookFigures> = []
      for (const rate of RATES) {
        webhooks.push(await measureWebhooks(`http://127.0.0.1:${webhookPort}/webhooks/default`, secret, rate))
        await sleep(2_000)
      }
      // Businesses the token can see: those the first sync stored (other books' are invisible to it).
      const visible = await query<{ id: string }>(
        `SELECT id FROM crm.businesses WHERE deleted_at IS NULL ORDER BY random() LIMIT ${POLL_CHANGES}`
      )
      const ids = visible.map((row) => row.id)
      const poll = await measurePoll(sandbox, ids)
      await Effect.runPromise(Fiber.interrupt(listening))
      return { webhooks, poll }
    })
  } finally {
    stopChildren()
    yield* Effect.promise(() => sleep(1_000))
    yield* Scope.close(scope, Exit.void)
    rmSync(dataDir, { recursive: true, force: true })
  }
})

const ms = (value: number) => `${Math.round(value)} ms`

if (!process.argv.includes("--sender")) {
  process.once("SIGINT", () => {
    stopChildren()
    process.exit(130)
  })
  const { webhooks, poll } = await Effect.runPromise(bench)
  const at1000 = webhooks.find((row) => row.rate === 1_000)!
  const pollBound = POLL_INTERVAL_SECONDS * 1000
  const lines = [
    "| from a change in the CRM to its committed row | p50 | p99 | max | sent | lost | target | verdict |",
    "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ...webhooks.map(
      (row) =>
        `| by webhook at ${row.rate.toLocaleString("en-US")} events/s (task.created, ${SECONDS_PER_RATE} s) | ${ms(row.p50)} | ${ms(row.p99)} | ${ms(row.max)} | ${row.sent.toLocaleString("en-US")} | ${row.missing + row.failed} | ${row.rate === 1_000 ? "p99 ≤ 250 ms" : ""} | ${row.rate === 1_000 ? (row.p99 <= 250 && row.missing === 0 ? "met" : "not met") : "—"} |`
    ),
    `| by poll (businesses, \`schedules.businesses\` ${POLL_INTERVAL_SECONDS} s, ${poll.changes} changes) | ${ms(poll.p50)} | — | ${ms(poll.max)} | ${poll.changes} | ${poll.missing} | ≤ interval + one pass | ${poll.missing === 0 && poll.max <= pollBound + 5_000 ? "met" : "not met"} |`
  ]
  const load = loadavg()
    .map((value) => value.toFixed(1))
    .join(" / ")
  const table = [
    `Measured ${new Date().toISOString().slice(0, 10)} on this machine (2 CPUs shared by the daemon, the sandbox, PostgreSQL and the sender; load average ${load}), embedded PostgreSQL, loopback${quick ? ", quick run" : ""}: \`crm-sync run\` against \`crm-sync sandbox\`; a delivery's time runs from its send to the NOTIFY of its row's commit.`,
    "",
    ...lines
  ].join("\n")
  console.log(table)
  console.log(
    at1000.p99 <= 250 ? "freshness by webhook: target met" : "freshness by webhook: target NOT met (p99 > 250 ms)"
  )
  await recordFigures("freshness", table)
  process.exit(0)
}
