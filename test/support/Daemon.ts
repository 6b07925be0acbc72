/**
 * A `crm-sync run` process for tests that meet the daemon as an operator does: free ports, polling
 * its HTTP answers in real time, and the process itself (killed with the test's scope).
 */
import { Duration, Effect } from "effect"
import { assert } from "@effect/vitest"
import { spawn } from "node:child_process"
import { createServer } from "node:net"
import { Webhook } from "standardwebhooks"

const main = new URL("../../src/main.ts", import.meta.url).pathname

/** A TCP port nothing listens on right now. */
export const freePort = Effect.promise(
  () =>
    new Promise<number>((resolve) => {
      const server = createServer()
      server.listen(0, "127.0.0.1", () => {
        const address = server.address()
        const port = typeof address === "object" && address !== null ? address.port : 0
        server.close(() => resolve(port))
      })
    })
)

/** GET `url`: its status and text (status 0 when nothing answers). */
export const get = (url: string, headers: Record<string, string> = {}) =>
  Effect.promise(() =>
    fetch(url, { headers }).then(
      async (response) => ({ status: response.status, text: await response.text() }),
      () => ({ status: 0, text: "" })
    )
  )

/** Polls until `check` holds (real time: the daemon is another process). */
export const eventually = <A>(what: string, probe: Effect.Effect<A>, check: (value: A) => boolean, seconds = 30) =>
  Effect.gen(function* () {
    for (let i = 0; i < seconds * 4; i++) {
      const value = yield* probe
      if (check(value)) return value
      yield* Effect.sleep(Duration.millis(250))
    }
    return assert.fail(`timed out waiting for ${what}`)
  })

/** Starts `crm-sync run` with `env` (and PATH); killed with SIGKILL when the scope closes. */
export const startDaemon = (env: Record<string, string>) =>
  Effect.gen(function* () {
    const child = spawn(process.execPath, [main, "run"], {
      env: { PATH: process.env.PATH ?? "", ...env },
      stdio: ["ignore", "pipe", "pipe"]
    })
    const output: Array<string> = []
    child.stdout.on("data", (chunk: Buffer) => output.push(chunk.toString()))
    child.stderr.on("data", (chunk: Buffer) => output.push(chunk.toString()))
    yield* Effect.addFinalizer(() => Effect.sync(() => child.kill("SIGKILL")))
    return { child, output: () => output.join("") }
  })

/** POSTs `body` to `url` signed with `secret` as the CRM's sender does (Standard Webhooks). */
export const postSigned = (url: string, secret: string, id: string, body: string, init: RequestInit = {}) => {
  const at = new Date()
  return fetch(url, {
    ...init,
    method: "POST",
    headers: {
      "content-type": "application/json",
      "hook-id": id,
      "hook-timestamp": String(Math.floor(at.getTime() / 1000)),
      "hook-signature": new Webhook(secret).sign(id, at, body)
    },
    body
  })
}

/** A signed delivery to `/webhooks/default` of a running daemon; its HTTP status. */
export const deliverSigned = (base: string, secret: string, id: string, body: string) =>
  Effect.promise(() => postSigned(`${base}/webhooks/default`, secret, id, body).then((response) => response.status))
