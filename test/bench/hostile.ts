/**
 * Hostile-connection benchmark: `npx node test/bench/hostile.ts [--connections N] [--no-docs]`.
 *
 * Anyone who can reach the webhook port can open connections without knowing a secret. This runs
 * `crm-sync run` (a child process, embedded PostgreSQL, default intake limits) and floods its
 * webhook port from this process: N connections (default 3,000) that each declare a 262,144-byte
 * body with a fresh timestamp and a junk signature, send all but its last byte, and hold; plus 200
 * that send their headers at one byte a second. Meanwhile, and after, it sends valid signed
 * deliveries every 100 ms. Printed: the daemon's resident memory (VmRSS) before, at the peak and
 * after the flood, what the valid deliveries got during and after it, and how long the slow
 * clients were kept. Written into docs/reliability.md.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { connect, type Socket } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { Effect, Exit, Redacted, Scope } from "effect"
import { postSigned } from "../support/Daemon.ts"
import { acquireEmbeddedDatabase, freePort } from "../../src/warehouse/EmbeddedDatabase.ts"
import { recordFigures } from "./figures.ts"
import { v8FlagsFor } from "../../bin/v8-flags.js"

const argument = (name: string) => {
  const index = process.argv.indexOf(name)
  return index < 0 ? undefined : process.argv[index + 1]
}
const CONNECTIONS = Number(argument("--connections") ?? 3_000)
const SLOW = 200
const BODY = 262_144
const TARGET_MB = 300
const main = fileURLToPath(new URL("../../bin/crm-sync.js", import.meta.url))
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

const rssMb = (pid: number) => {
  const status = readFileSync(`/proc/${pid}/status`, "utf8")
  const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0)
  return Math.round(kb / 1024)
}

const waitReady = async (port: number) => {
  for (let i = 0; i < 600; i++) {
    const ok = await fetch(`http://127.0.0.1:${port}/readyz`).then(
      (response) => response.ok,
      () => false
    )
    if (ok) return
    await sleep(200)
  }
  throw new Error("the daemon did not become ready")
}

/** A valid delivery, signed now; its status (0: no answer). */
const deliver = (port: number, secret: string, index: number) => {
  const id = `msg_bench_${index}_${randomBytes(4).toString("hex")}`
  const body = JSON.stringify({ event_type: "task.deleted", id: `tsk_${index}`, book_id: "bk_1", household_id: null })
  return postSigned(`http://127.0.0.1:${port}/webhooks/default`, secret, id, body, {
    signal: AbortSignal.timeout(15_000)
  }).then(
    (response) => response.status,
    () => 0
  )
}

/** A connection that declares a full body, sends all but one byte, and holds. */
const hostile = (port: number, filler: Buffer) => {
  const socket = connect(port, "127.0.0.1")
  socket.on("error", () => {})
  socket.on("connect", () => {
    socket.write(
      `POST /webhooks/default HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${BODY}\r\n` +
        `hook-id: msg_hostile\r\nhook-timestamp: ${Math.floor(Date.now() / 1000)}\r\nhook-signature: v1,AAAA\r\n\r\n`
    )
    socket.write(filler.subarray(0, BODY - 1))
  })
  return socket
}

/** A connection that sends its headers one byte a second; when the server closed it. */
const slowHeaders = (port: number) =>
  new Promise<number>((resolve) => {
    const started = Date.now()
    const socket = connect(port, "127.0.0.1")
    const text = "POST /webhooks/default HTTP/1.1\r\nHost: x\r\n"
    let index = 0
    const timer = setInterval(() => {
      if (index < text.length) socket.write(text[index++]!)
    }, 1_000)
    const done = () => {
      clearInterval(timer)
      resolve(Date.now() - started)
    }
    socket.on("close", done)
    socket.on("error", () => {})
  })

const bench = Effect.gen(function* () {
  const scope = yield* Scope.make()
  const dir = mkdtempSync(join(tmpdir(), "crm-sync-hostile-"))
  const children: Array<ChildProcess> = []
  try {
    const database = yield* Scope.provide(acquireEmbeddedDatabase(dir), scope)
    const webhookPort = yield* freePort
    const adminPort = yield* freePort
    const secret = `whsec_${randomBytes(24).toString("base64")}`
    const config = join(dir, "crm-sync.json")
    writeFileSync(
      config,
      JSON.stringify({
        database_url: Redacted.value(database.url),
        webhook_port: webhookPort,
        admin_port: adminPort,
        // Nothing answers here: the sync jobs fail and retry; only the intake is measured.
        connections: [{ name: "default", base_url: "http://127.0.0.1:9", credential: "personal", token: "x" }],
        webhooks: { endpoints: [{ name: "default", secrets: [secret] }] }
      })
    )
    return yield* Effect.promise(async () => {
      const daemon = spawn(process.execPath, [...v8FlagsFor(["run"]), main, "run"], {
        env: { ...process.env, CRM_SYNC_CONFIG: config, LOG_LEVEL: "error" },
        stdio: "ignore"
      })
      children.push(daemon)
      await waitReady(adminPort)
      await sleep(3_000)
      const before = rssMb(daemon.pid!)

      // Valid deliveries throughout, every 100 ms.
      const phase = { name: "during" as "during" | "after" }
      const answers = { during: new Map<number, number>(), after: new Map<number, number>() }
      const control = { sending: true }
      const sender = (async () => {
        for (let index = 0; control.sending; index++) {
          const bucket = answers[phase.name]
          void deliver(webhookPort, secret, index).then((status) => bucket.set(status, (bucket.get(status) ?? 0) + 1))
          await sleep(100)
        }
      })()

      const filler = Buffer.alloc(BODY, 0x20)
      const sockets: Array<Socket> = []
      const slow = Array.from({ length: SLOW }, () => slowHeaders(webhookPort))
      let peak = before
      for (let i = 0; i < CONNECTIONS; i++) {
        sockets.push(hostile(webhookPort, filler))
        if (i % 100 === 99) {
          await sleep(50)
          peak = Math.max(peak, rssMb(daemon.pid!))
        }
      }
      const floodEnd = Date.now() + 20_000
      while (Date.now() < floodEnd) {
        peak = Math.max(peak, rssMb(daemon.pid!))
        await sleep(250)
      }
      const slowHeld = await Promise.all(slow)
      for (const socket of sockets) socket.destroy()
      phase.name = "after"
      await sleep(10_000)
      control.sending = false
      await sender
      await sleep(1_000)
      const after = rssMb(daemon.pid!)
      return { before, peak, after, answers, slowMaxMs: Math.max(...slowHeld) }
    })
  } finally {
    for (const child of children) child.kill("SIGTERM")
    yield* Effect.promise(() => sleep(2_000))
    yield* Scope.close(scope, Exit.void)
    rmSync(dir, { recursive: true, force: true })
  }
})

const describe = (counts: Map<number, number>) =>
  [...counts.entries()]
    .toSorted((a, b) => a[0] - b[0])
    .map(([status, n]) => `${n} × ${status === 0 ? "no answer" : status}`)
    .join(", ")

const figures = await Effect.runPromise(bench)
const met = (ok: boolean) => (ok ? "met" : "**not met**")
const afterOk = figures.answers.after.get(200) ?? 0
const afterAll = [...figures.answers.after.values()].reduce((a, b) => a + b, 0)
const table = [
  `Measured ${new Date().toISOString().slice(0, 10)} on this machine: \`crm-sync run\` with the default intake limits (read timeout 10 s, headers 5 s, 500 connections, 32 MB of bodies in flight), ` +
    `${CONNECTIONS.toLocaleString("en-US")} connections each declaring a ${BODY.toLocaleString("en-US")}-byte body with a junk signature, sending all but its last byte and holding, plus ${SLOW} sending headers at 1 byte/s; valid signed deliveries every 100 ms throughout.`,
  "",
  "| measure | figure | target | |",
  "| --- | --- | --- | --- |",
  `| daemon resident memory before / peak / 10 s after the flood | ${figures.before} / ${figures.peak} / ${figures.after} MB | peak ≤ ${TARGET_MB} MB | ${met(figures.peak <= TARGET_MB)} |`,
  `| valid deliveries during the flood | ${describe(figures.answers.during)} | answered (2xx, or 503 to retry); a refused connection the sender retries | ${met((figures.answers.during.get(200) ?? 0) > 0)} |`,
  `| valid deliveries after it | ${describe(figures.answers.after)} | all 2xx | ${met(afterOk === afterAll && afterAll > 0)} |`,
  `| longest a slow-headers client was kept | ${(figures.slowMaxMs / 1000).toFixed(1)} s | ≤ 10 s | ${met(figures.slowMaxMs <= 10_000)} |`
].join("\n")
console.log(`\n${table}\n`)
await recordFigures("hostile", table)
process.exit(0)
