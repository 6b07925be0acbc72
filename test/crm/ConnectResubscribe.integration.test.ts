/**
 * `crm-sync connect` after a revoked grant (issue 33, point 7), as a user runs it: a real
 * `node src/main.ts` process against the sandbox's OAuth server. The CRM removed the webhook
 * subscription with the grant (spec §3); `connect` stores the new grant, makes the subscription
 * again and says so in one line. A connection crm-sync never subscribed gets one line saying what
 * to run instead.
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdtempSync, writeFileSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Sandbox } from "@crm-sync/sandbox"
import { freshDatabase } from "../support/TestDatabase.ts"

const main = new URL("../../src/main.ts", import.meta.url).pathname

interface Run {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/**
 * Runs the CLI; when it prints an address to open, plays the browser (the sandbox approves at
 * once and redirects to the callback crm-sync listens on).
 */
const cli = (args: ReadonlyArray<string>, env: Record<string, string>) =>
  Effect.callback<Run>((resume) => {
    const child = spawn(process.execPath, [main, ...args], {
      env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", ...env },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    let browsed = false
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString()
      const address = /https?:\/\/\S+\/oauth\/authorize\S*/.exec(stdout)?.[0]
      if (address !== undefined && !browsed) {
        browsed = true
        void fetch(address, { redirect: "manual" })
          .then((authorize) => fetch(authorize.headers.get("location")!))
          .then((callback) => callback.text())
      }
    })
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()))
    child.on("exit", (code) => resume(Effect.succeed({ code, stdout, stderr })))
    return Effect.sync(() => child.kill("SIGKILL"))
  })

const freePort = Effect.callback<number>((resume) => {
  const server = createServer()
  server.listen(0, "127.0.0.1", () => {
    const address = server.address()
    const port = typeof address === "object" && address !== null ? address.port : 0
    server.close(() => resume(Effect.succeed(port)))
  })
})

layer(Sandbox.layer({ records: 20, seed: 11 }), { timeout: 180_000, excludeTestServices: true })(
  "crm-sync connect",
  (it) => {
    it.effect("says to subscribe when crm-sync never did; after a revoked grant, subscribes again", () =>
      Effect.gen(function* () {
        const sandbox = yield* Sandbox
        const folder = mkdtempSync(join(tmpdir(), "crm-sync-connect-"))
        const config = join(folder, "config.json")
        writeFileSync(
          config,
          JSON.stringify({
            connections: [
              {
                name: "firm",
                base_url: sandbox.baseUrl,
                credential: "oauth",
                oauth: {
                  client_id: sandbox.credentials.oauthClientId,
                  client_secret: sandbox.credentials.oauthClientSecret,
                  auth_url: `${sandbox.baseUrl}/oauth/authorize`,
                  token_url: `${sandbox.baseUrl}/oauth/token`,
                  redirect_uri: `http://127.0.0.1:${yield* freePort}/oauth/callback`
                }
              }
            ]
          })
        )
        const env = {
          DATABASE_URL: yield* freshDatabase,
          CRM_SYNC_CONFIG: config,
          CRM_SYNC_ENCRYPTION_KEY: randomBytes(32).toString("base64")
        }

        const first = yield* cli(["connect", "firm"], env)
        assert.strictEqual(first.code, 0, first.stderr.slice(-1500))
        assert.include(
          first.stdout,
          "webhooks: firm has no subscription made by crm-sync; run `crm-sync webhooks subscribe firm` to receive events"
        )
        assert.lengthOf(yield* sandbox.admin.subscriptions, 0)

        const subscribed = yield* cli(["webhooks", "subscribe", "firm"], env)
        assert.strictEqual(subscribed.code, 0, subscribed.stderr.slice(-1500))
        assert.lengthOf(yield* sandbox.admin.subscriptions, 1)

        // The CRM's administrator disconnects the app: the grant and the subscription are gone.
        yield* sandbox.admin.disconnect({
          clientId: sandbox.credentials.oauthClientId,
          userId: sandbox.credentials.userId,
          companyId: sandbox.credentials.companyId
        })
        assert.lengthOf(yield* sandbox.admin.subscriptions, 0)

        const again = yield* cli(["connect", "firm"], env)
        assert.strictEqual(again.code, 0, again.stderr.slice(-1500))
        assert.match(again.stdout, /^webhooks: firm subscribed \(subscription \S+\)$/m)
        assert.lengthOf(yield* sandbox.admin.subscriptions, 1)
      }).pipe(Effect.scoped)
    )
  }
)
