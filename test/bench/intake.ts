/**
 * Webhook intake and processing benchmark: `npx node test/bench/intake.ts [--quick] [--no-docs]`.
 *
 * In one run, on this machine, against an embedded PostgreSQL of its own (in a temporary folder):
 *   1. verified deliveries durably accepted per second, closed loop (64 connections), and the p99
 *      time to 2xx at a paced 1,000 deliveries per second, for the intake (group commit) and for a
 *      plain baseline handler (parse, verify, one INSERT per request) measured the same way;
 *   2. events applied per second by the EventProcessor draining what the intake accepted.
 * Loopback only; every loop is bounded. The load comes from a child process (this file with
 * `--generator`), so the client does not share the server's event loop. Bodies are the spec's
 * event fixtures (~1 KB) with distinct ids, signed with `standardwebhooks` before the clock starts.
 * Latency is measured from each request's scheduled start (no coordinated omission).
 *
 * The figures are printed and written into docs/performance.md between the bench markers.
 * For investigation: `--skip-baseline` measures the intake alone, and `BENCH_TRACE=1` prints
 * when the slow requests were due and the status of failed answers.
 */
import { NodeHttpServer } from "@effect/platform-node"
import { PgClient } from "@effect/sql-pg"
import { Duration, Effect, Exit, Layer, Metric, Redacted, Result, Scope } from "effect"
import { HttpRouter, HttpServer, HttpServerRequest, HttpServerResponse } from "effect/http"
import { Reactivity } from "effect/reactivity"
import { SqlClient } from "effect/sql/SqlClient"
import { fork } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { recordFigures } from "./figures.ts"
import { Connection } from "./loopback.ts"
import { createServer } from "node:http"
import { availableParallelism, loadavg, tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { Webhook } from "standardwebhooks"
import { AppConfig } from "../../src/config/AppConfig.ts"
import * as Metrics from "../../src/observability/Metrics.ts"
import { acquireEmbeddedDatabase } from "../../src/warehouse/EmbeddedDatabase.ts"
import { migrate } from "../../src/warehouse/Migrations.ts"
import { Warehouse } from "../../src/warehouse/Warehouse.ts"
import { EventProcessor } from "../../src/webhooks/EventProcessor.ts"
import { InboxWriter } from "../../src/webhooks/InboxWriter.ts"
import { TranscriptReader } from "../../src/webhooks/TranscriptReader.ts"
import { WebhookInbox } from "../../src/webhooks/WebhookInbox.ts"
import { WebhookIntake } from "../../src/webhooks/WebhookIntake.ts"
import { makeSignatureVerifier, readDeliveryHeaders } from "../../src/webhooks/WebhookSignature.ts"

const quick = process.argv.includes("--quick")
/** For profiling the intake alone: the baseline is not measured (its figures print as 0). */
const skipBaseline = process.argv.includes("--skip-baseline")
const THROUGHPUT_DELIVERIES = quick ? 4_000 : 20_000
const CONCURRENCY = 64
const PACED_RATE = 1_000
const PACED_SECONDS = quick ? 3 : 10
const POOL_SIZE = 8

// ---------------------------------------------------------------------------------------------
// Load generator (child process)
// ---------------------------------------------------------------------------------------------

interface LoadSpec {
  readonly url: string
  readonly secret: string
  readonly bodies: ReadonlyArray<string>
  /** The first `warmup` requests are sent (opening connections, warming caches) but not counted. */
  readonly warmup: number
  /** Closed loop with `concurrency` connections, or open loop at `rate` per second. */
  readonly mode:
    { readonly _tag: "closed"; readonly concurrency: number } | { readonly _tag: "paced"; readonly rate: number }
}

interface LoadResult {
  readonly sent: number
  readonly ok: number
  readonly failed: number
  readonly elapsedMs: number
  readonly p50Ms: number
  readonly p99Ms: number
  readonly maxMs: number
  /** CPU time the load generator itself used (user + system). */
  readonly clientCpuMs: number
}

const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!

const rate = (result: LoadResult) => Math.round((result.ok / result.elapsedMs) * 1000)

const cpuMillis = (usage: NodeJS.CpuUsage) => (usage.user + usage.system) / 1000

/** Runs one load in this (child) process: every request pre-signed, then sent on loopback. */
const generate = (spec: LoadSpec): Effect.Effect<LoadResult> =>
  Effect.callback<LoadResult>((resume) => {
    const target = new URL(spec.url)
    const host = target.hostname
    const port = Number(target.port)
    const webhook = new Webhook(spec.secret)
    const now = new Date()
    const timestamp = String(Math.floor(now.getTime() / 1000))
    const requests = spec.bodies.map((body) => {
      const id = `msg_${randomBytes(10).toString("hex")}`
      const head =
        `POST ${target.pathname} HTTP/1.1\r\nhost: ${target.host}\r\ncontent-type: application/json\r\n` +
        `content-length: ${Buffer.byteLength(body)}\r\nhook-id: ${id}\r\nhook-timestamp: ${timestamp}\r\n` +
        `hook-signature: ${webhook.sign(id, now, body)}\r\n\r\n`
      return Buffer.from(head + body)
    })
    const connections: Array<Connection> = []
    const idle = () => {
      const free = connections.find((connection) => !connection.busy && !connection.closed)
      if (free !== undefined) return free
      const opened = new Connection(host, port)
      connections.push(opened)
      return opened
    }
    const latencies: Array<number> = []
    const trace: Array<[number, number]> = []
    const statuses = new Map<number, number>()
    let ok = 0
    let failed = 0
    let done = 0
    let next = 0
    const started = performance.now()
    const cpuBefore = process.cpuUsage()
    // The clock of a measurement starts when its first counted request is due.
    let measuredFrom = started
    const finish = () => {
      const elapsedMs = performance.now() - measuredFrom
      for (const connection of connections) connection.close()
      latencies.sort((a, b) => a - b)
      if (statuses.size > 0) console.error(`failed answers by status: ${JSON.stringify([...statuses])}`)
      if (trace.length > 0) {
        // When the slow requests were due: one stall shows as a cluster.
        const bySecond = new Map<number, number>()
        for (const [at, ms] of trace) {
          if (ms > 50) bySecond.set(Math.floor(at / 1000), (bySecond.get(Math.floor(at / 1000)) ?? 0) + 1)
        }
        console.error(`over 50 ms, by second: ${[...bySecond].map(([second, n]) => `${second}s:${n}`).join(" ")}`)
      }
      resume(
        Effect.succeed({
          sent: requests.length - spec.warmup,
          ok,
          failed,
          elapsedMs,
          p50Ms: percentile(latencies, 50),
          p99Ms: percentile(latencies, 99),
          maxMs: latencies.at(-1) ?? 0,
          clientCpuMs: cpuMillis(process.cpuUsage(cpuBefore))
        })
      )
    }
    const send = (connection: Connection, index: number, scheduledAt: number, then: () => void) => {
      if (index === spec.warmup) measuredFrom = scheduledAt
      connection.send(requests[index]!, (status) => {
        if (index >= spec.warmup) {
          const elapsed = performance.now() - scheduledAt
          latencies.push(elapsed)
          if (process.env.BENCH_TRACE !== undefined) trace.push([scheduledAt - started, elapsed])
          if (status >= 200 && status < 300) ok++
          else {
            failed++
            if (process.env.BENCH_TRACE !== undefined) statuses.set(status, (statuses.get(status) ?? 0) + 1)
          }
        }
        done++
        then()
        if (done === requests.length) finish()
      })
    }
    if (spec.mode._tag === "closed") {
      // `concurrency` connections, each sending its next request as soon as the last is answered.
      const loop = (connection: Connection) => () => {
        if (next < requests.length) send(connection, next++, performance.now(), loop(connection))
      }
      for (let i = 0; i < Math.min(spec.mode.concurrency, requests.length); i++) loop(idle())()
    } else {
      // Open loop: every request goes out at its scheduled time on a free connection, whatever
      // the earlier ones are doing; latency counts from that time.
      const interval = 1000 / spec.mode.rate
      const tick = () => {
        const elapsed = performance.now() - started
        while (next < requests.length && next * interval <= elapsed) {
          const index = next++
          send(idle(), index, started + index * interval, () => {})
        }
        if (next < requests.length) setTimeout(tick, Math.max(0, (next * interval - elapsed) / 2))
      }
      tick()
    }
  })

if (process.argv.includes("--generator")) {
  process.once("message", (spec: LoadSpec) => {
    Effect.runPromise(generate(spec)).then((result) => {
      process.send!(result, () => process.exit(0))
    })
  })
}

/** Runs a load from a child process and returns its result. */
const load = (spec: LoadSpec) =>
  Effect.callback<LoadResult, Error>((resume) => {
    const child = fork(fileURLToPath(import.meta.url), ["--generator"], {
      stdio: ["ignore", "inherit", "inherit", "ipc"]
    })
    child.once("message", (result) => resume(Effect.succeed(result as LoadResult)))
    child.once("exit", (code) => {
      if (code !== 0) resume(Effect.fail(new Error(`load generator exited with ${code}`)))
    })
    child.send(spec)
    return Effect.sync(() => child.kill())
  })

// ---------------------------------------------------------------------------------------------
// Deliveries: the fixtures of spec §6.4 with distinct ids
// ---------------------------------------------------------------------------------------------

const fixture = (eventType: string) =>
  JSON.parse(readFileSync(new URL(`../fixtures/events/${eventType}.json`, import.meta.url), "utf8")) as Record<
    string,
    any
  >

/** `count` delivery bodies: a realistic mix over ~count/4 distinct records, newer snapshots later. */
const makeBodies = (count: number, seed: string): ReadonlyArray<string> => {
  const mix = [
    "task.updated",
    "task.updated",
    "task.created",
    "task.completed",
    "note.created",
    "note.updated",
    "meeting.updated",
    "meeting.created",
    "task.deleted",
    "note.deleted",
    "meeting.deleted",
    "task.reopened"
  ]
  const templates = new Map(mix.map((type) => [type, fixture(type)]))
  const records = Math.max(1, Math.floor(count / 4))
  const base = Date.parse("2025-01-01T00:00:00Z")
  return Array.from({ length: count }, (_, i) => {
    const type = mix[i % mix.length]!
    const body = structuredClone(templates.get(type)!)
    const id = `${type.split(".")[0]}_${seed}_${i % records}`
    body.id = id
    const snapshot = body.task ?? body.note ?? body.meeting
    if (snapshot !== undefined) {
      snapshot.id = id
      snapshot.updated_at = new Date(base + i * 1000).toISOString()
    }
    return JSON.stringify(body)
  })
}

// ---------------------------------------------------------------------------------------------
// Servers
// ---------------------------------------------------------------------------------------------

const secret = `whsec_${randomBytes(24).toString("base64")}`
const config = AppConfig.layerFrom({ webhooks: { endpoints: [{ name: "default", secrets: [secret] }] } })

/** The intake as the daemon runs it: group commit through InboxWriter. */
const IntakeLive = HttpRouter.serve(WebhookIntake.routes, { disableLogger: true, disableListenLog: true }).pipe(
  Layer.provideMerge(WebhookIntake.layer),
  Layer.provideMerge(InboxWriter.layer),
  Layer.provideMerge(WebhookInbox.layer)
)

/**
 * The baseline: the same HTTP stack and the same verification, then JSON.parse and one INSERT per
 * request, answered after its own commit. What a straightforward handler does.
 */
const BaselineRoutes = HttpRouter.use(
  Effect.fnUntraced(function* (router) {
    const sql = yield* SqlClient
    const verifier = makeSignatureVerifier([Redacted.make(secret)], Duration.minutes(5))
    yield* router.add("POST", "/webhooks/default", (req: HttpServerRequest.HttpServerRequest) =>
      Effect.gen(function* () {
        const headers = readDeliveryHeaders(req.headers)
        if (Result.isFailure(headers)) return HttpServerResponse.jsonUnsafe({ error: "bad headers" }, { status: 400 })
        const body = new Uint8Array(yield* Effect.orDie(req.arrayBuffer))
        if (Result.isFailure(verifier.verify(headers.success, body, Date.now()))) {
          return HttpServerResponse.jsonUnsafe({ error: "bad signature" }, { status: 401 })
        }
        const json = JSON.parse(new TextDecoder().decode(body)) as { event_type?: string }
        return yield* sql`
          INSERT INTO crm_sync.webhook_inbox (hook_id, endpoint, event_type, body)
          VALUES (${headers.success.id}, 'default', ${json.event_type ?? null}, ${body})
          ON CONFLICT (hook_id) DO NOTHING`.pipe(
          Effect.as(HttpServerResponse.jsonUnsafe({ status: "accepted" })),
          Effect.orElseSucceed(() => HttpServerResponse.jsonUnsafe({ error: "unavailable" }, { status: 503 }))
        )
      })
    )
  })
)
const BaselineLive = HttpRouter.serve(BaselineRoutes, { disableLogger: true, disableListenLog: true })

/** A database of its own on the bench server, migrated; the pool every server of a run shares. */
const database = (adminUrl: string, name: string) =>
  Layer.unwrap(
    Effect.gen(function* () {
      const admin = yield* PgClient.make({ url: Redacted.make(adminUrl), maxConnections: 1 }).pipe(
        Effect.provide(Reactivity.layer)
      )
      yield* admin.unsafe(`CREATE DATABASE ${name}`)
      const url = new URL(adminUrl)
      url.pathname = `/${name}`
      return Layer.effectDiscard(Effect.asVoid(migrate)).pipe(
        Layer.provideMerge(PgClient.layer({ url: Redacted.make(url.toString()), maxConnections: POOL_SIZE }))
      )
    })
  )

const serverUrl = Effect.gen(function* () {
  const server = yield* HttpServer.HttpServer
  const address = server.address as { readonly port: number }
  return `http://127.0.0.1:${address.port}/webhooks/default`
})

interface Measured {
  readonly throughput: LoadResult
  readonly paced: LoadResult
  readonly stored: number
  /** CPU time this (server) process used during the closed-loop load. */
  readonly serverCpuMs: number
  /** Group-commit statements during the closed-loop load, and their mean size. */
  readonly statements: number
  readonly batchRows: number
}

const nothing: LoadResult = { sent: 0, ok: 0, failed: 0, elapsedMs: 1, p50Ms: 0, p99Ms: 0, maxMs: 0, clientCpuMs: 0 }
const notMeasured: Measured = {
  throughput: nothing,
  paced: nothing,
  stored: 0,
  serverCpuMs: 0,
  statements: 0,
  batchRows: 0
}

/** Both loads against one server; then how many rows the inbox holds. */
const measure = (label: string, seed: string) =>
  Effect.gen(function* () {
    const url = yield* serverUrl
    // Warm-up (JIT, pool, prepared statements), not counted.
    yield* load({
      url,
      secret,
      bodies: makeBodies(1_000, `${seed}w`),
      warmup: 1_000,
      mode: { _tag: "closed", concurrency: CONCURRENCY }
    })
    const bodies = makeBodies(THROUGHPUT_DELIVERIES, seed)
    const cpuBefore = process.cpuUsage()
    const batchesBefore = yield* Metric.value(Metrics.webhookInboxBatchRows)
    const throughput = yield* load({
      url,
      secret,
      bodies,
      warmup: 0,
      mode: { _tag: "closed", concurrency: CONCURRENCY }
    })
    const serverCpuMs = cpuMillis(process.cpuUsage(cpuBefore))
    const batchesAfter = yield* Metric.value(Metrics.webhookInboxBatchRows)
    const statements = batchesAfter.count - batchesBefore.count
    const batchRows = statements === 0 ? 0 : (batchesAfter.sum - batchesBefore.sum) / statements
    // One second of the same pace first, uncounted: a sender's connections are already open.
    const paced = yield* load({
      url,
      secret,
      bodies: makeBodies(PACED_RATE * (PACED_SECONDS + 1), `${seed}p`),
      warmup: PACED_RATE,
      mode: { _tag: "paced", rate: PACED_RATE }
    })
    const sql = yield* SqlClient
    const rows = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM crm_sync.webhook_inbox`
    yield* Effect.logInfo(
      `${label}: ${rate(throughput)}/s, p99 ${paced.p99Ms.toFixed(1)} ms; ${statements} group commits of ${batchRows.toFixed(1)} rows on average; CPU per delivery: server ${((serverCpuMs / throughput.ok) * 1000).toFixed(0)} µs, client ${((throughput.clientCpuMs / throughput.ok) * 1000).toFixed(0)} µs`
    )
    return { throughput, paced, stored: rows[0]!.n, serverCpuMs, statements, batchRows } satisfies Measured
  })

const NoTranscripts = Layer.succeed(
  TranscriptReader,
  TranscriptReader.of({ read: (_endpoint, meetingId) => Effect.succeed({ meeting_id: meetingId, transcript: null }) })
)

/** Drains the inbox the intake filled; events applied per second. */
const applyAll = Effect.gen(function* () {
  const processor = yield* EventProcessor
  const started = performance.now()
  const report = yield* processor.drain
  const elapsedMs = performance.now() - started
  return { report, elapsedMs }
})

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

const main = Effect.gen(function* () {
  const folder = mkdtempSync(join(tmpdir(), "crm-sync-bench-"))
  yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(folder, { recursive: true, force: true })))
  const server = yield* acquireEmbeddedDatabase(folder)
  const adminUrl = Redacted.value(server.url)
  const suffix = randomBytes(3).toString("hex")
  yield* Effect.logInfo(
    `embedded PostgreSQL up; ${THROUGHPUT_DELIVERIES} deliveries closed loop, ${PACED_RATE}/s for ${PACED_SECONDS} s paced`
  )

  const listen = NodeHttpServer.layer(createServer, { port: 0, host: "127.0.0.1" })

  const baseline = yield* (skipBaseline ? Effect.succeed(notMeasured) : measure("baseline", "b")).pipe(
    Effect.provide(
      BaselineLive.pipe(Layer.provideMerge(listen), Layer.provideMerge(database(adminUrl, `bench_baseline_${suffix}`)))
    )
  )
  const intakeScope = yield* Scope.make()
  const intakeContext = yield* Layer.buildWithScope(
    IntakeLive.pipe(
      Layer.provideMerge(listen),
      Layer.provideMerge(config),
      Layer.provideMerge(database(adminUrl, `bench_intake_${suffix}`))
    ),
    intakeScope
  )
  const intake = yield* measure("intake", "i").pipe(Effect.provide(intakeContext))
  const applied = yield* applyAll.pipe(
    Effect.provide(
      EventProcessor.layerWith({ workerId: "bench", batchSize: 500 }).pipe(
        Layer.provide(Layer.mergeAll(WebhookInbox.layer, Warehouse.layer, NoTranscripts, config))
      )
    ),
    Effect.provide(intakeContext)
  )
  yield* Scope.close(intakeScope, Exit.void)

  const eventsPerSecond = Math.round((applied.report.claimed / applied.elapsedMs) * 1000)
  const figures = {
    cpus: availableParallelism(),
    load: loadavg()
      .map((value) => value.toFixed(1))
      .join(" / "),
    intake,
    baseline,
    applied: { ...applied.report, elapsedMs: applied.elapsedMs, eventsPerSecond }
  }
  return figures
})

/** A row of the figures table: a target and whether it is met, or `—` for a figure without one. */
const line = (label: string, value: string, target?: { readonly text: string; readonly met: boolean }) =>
  `| ${label} | ${value} | ${target?.text ?? ""} | ${target === undefined ? "—" : target.met ? "met" : "**not met**"} |`

const latency = (result: LoadResult) =>
  `${result.p99Ms.toFixed(1)} ms (p50 ${result.p50Ms.toFixed(1)}, max ${result.maxMs.toFixed(1)})`

const perDelivery = (cpuMs: number, deliveries: number) => `${((cpuMs / Math.max(1, deliveries)) * 1000).toFixed(0)} µs`

const report = (figures: Effect.Success<typeof main>) => {
  const { intake, baseline, applied } = figures
  const ratio = rate(intake.throughput) / Math.max(1, rate(baseline.throughput))
  return [
    `Measured ${new Date().toISOString().slice(0, 10)} on this machine (${figures.cpus} CPUs shared by the server, PostgreSQL, the load generator and whatever else ran; load average ${figures.load}), embedded PostgreSQL, loopback, ${quick ? "quick run" : "full run"}: ${THROUGHPUT_DELIVERIES} deliveries closed loop with ${CONCURRENCY} connections; ${PACED_RATE * PACED_SECONDS} deliveries paced at ${PACED_RATE}/s after one uncounted second.`,
    "",
    "| measure | figure | target | |",
    "|---|---|---|---|",
    line("deliveries durably accepted per second (intake, group commit)", `${rate(intake.throughput)}/s`, {
      text: "≥ 5,000/s",
      met: rate(intake.throughput) >= 5000
    }),
    line("the same, plain baseline (one INSERT per request)", `${rate(baseline.throughput)}/s`),
    line("intake ÷ baseline", `${ratio.toFixed(2)}×`, { text: "≥ 2×", met: ratio >= 2 }),
    line(`time to 2xx at ${PACED_RATE}/s, p99 (intake)`, latency(intake.paced), {
      text: "≤ 50 ms",
      met: intake.paced.p99Ms <= 50
    }),
    line(`time to 2xx at ${PACED_RATE}/s, p99 (baseline)`, latency(baseline.paced)),
    line(
      "events applied per second (EventProcessor, batches of 500, two at a time)",
      `${applied.eventsPerSecond}/s (${applied.claimed} events in ${(applied.elapsedMs / 1000).toFixed(1)} s)`,
      { text: "≥ 5,000/s", met: applied.eventsPerSecond >= 5000 }
    ),
    "",
    `Closed loop, intake: ${intake.statements} group-commit INSERTs of ${intake.batchRows.toFixed(1)} rows on average; ` +
      `CPU per delivery ${perDelivery(intake.serverCpuMs, intake.throughput.ok)} in the server process and ` +
      `${perDelivery(intake.throughput.clientCpuMs, intake.throughput.ok)} in the load generator ` +
      `(baseline: ${perDelivery(baseline.serverCpuMs, baseline.throughput.ok)} and ${perDelivery(baseline.throughput.clientCpuMs, baseline.throughput.ok)}). ` +
      `Non-2xx answers: intake ${intake.throughput.failed + intake.paced.failed}, baseline ${baseline.throughput.failed + baseline.paced.failed}. ` +
      `Inbox rows equal 2xx answers: intake ${intake.stored}, baseline ${baseline.stored} (warm-ups included). ` +
      `Processor: ${applied.processed} processed, ${applied.unhandled} unhandled, ${applied.dead} dead, ${applied.failed} failed.`
  ].join("\n")
}

if (!process.argv.includes("--generator")) {
  Effect.runPromise(
    Effect.scoped(main).pipe(
      Effect.flatMap((figures) => {
        const text = report(figures)
        console.log(`\n${text}\n`)
        return Effect.promise(() => recordFigures("intake", text))
      })
    )
  ).then(
    () => process.exit(0),
    (error) => {
      console.error(error)
      process.exit(1)
    }
  )
}
