/**
 * The admin port with `CRM_SYNC_ADMIN_TOKEN` set, as a browser, a script and an annotation-based
 * Prometheus meet it: a real `crm-sync run` against the sandbox. A browser is challenged with HTTP
 * Basic and gets in with the token as its password; a script sends it as a Bearer token; with
 * `CRM_SYNC_OPEN_METRICS=true`, `/metrics` answers without it (the pod annotations cannot send
 * one) while the page and `/status` still ask. Stopped by SIGTERM, the daemon says so in its log.
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { Sandbox } from "@crm-sync/sandbox"
import { eventually, freePort, get, startDaemon } from "../support/Daemon.ts"
import { freshDatabase } from "../support/TestDatabase.ts"

const TOKEN = "admin-access-test-token"

const basic = (user: string, password: string) => ({
  authorization: `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}`
})

/** GET with the response's WWW-Authenticate header. */
const challenge = (url: string) =>
  Effect.promise(() =>
    fetch(url).then((response) => ({ status: response.status, header: response.headers.get("www-authenticate") }))
  )

layer(
  Sandbox.layer({ records: 50, seed: 9, limits: { personal: { token: 100_000, company: 100_000, ip: 100_000 } } }),
  { timeout: 120_000, excludeTestServices: true }
)("the admin token", (it) => {
  it.effect("lets a browser in with the token as its password, and leaves /metrics open when told to", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      const url = yield* freshDatabase
      const adminPort = yield* freePort
      const daemon = yield* startDaemon({
        DATABASE_URL: url,
        CRM_BASE_URL: sandbox.baseUrl,
        CRM_TOKEN: sandbox.credentials.personalAccessToken,
        CRM_SYNC_WEBHOOK_PORT: String(yield* freePort),
        CRM_SYNC_ADMIN_PORT: String(adminPort),
        CRM_SYNC_ADMIN_TOKEN: TOKEN,
        CRM_SYNC_OPEN_METRICS: "true",
        CRM_SYNC_LOG_LEVEL: "info"
      })
      const admin = `http://127.0.0.1:${adminPort}`
      yield* eventually("readiness", get(`${admin}/readyz`), (response) => response.status === 200)

      // A browser without credentials is asked for them (Basic makes it prompt).
      for (const path of ["/", "/status"]) {
        const refused = yield* challenge(`${admin}${path}`)
        assert.strictEqual(refused.status, 401, path)
        assert.match(refused.header ?? "", /^Basic realm="crm-sync admin"/, path)
      }
      // The token as the password, whatever the user name; a wrong one is refused.
      const page = yield* get(`${admin}/`, basic("admin", TOKEN))
      assert.strictEqual(page.status, 200)
      assert.include(page.text, "<h2>Rate budget</h2>")
      assert.strictEqual((yield* get(`${admin}/status`, basic("", TOKEN))).status, 200)
      assert.strictEqual((yield* get(`${admin}/`, basic("admin", "wrong"))).status, 401)
      assert.strictEqual((yield* get(`${admin}/`, basic(TOKEN, ""))).status, 401, "the token is the password")
      // Scripts send it as a Bearer token.
      assert.strictEqual((yield* get(`${admin}/status`, { authorization: `Bearer ${TOKEN}` })).status, 200)
      // Prometheus, from pod annotations, sends nothing.
      const metrics = yield* get(`${admin}/metrics`)
      assert.strictEqual(metrics.status, 200)
      assert.match(metrics.text, /^crm_sync_process_resident_memory_bytes \d+/m)

      // SIGTERM: the log says the daemon stopped.
      const exited = Effect.callback<number | null>((resume) => {
        if (daemon.child.exitCode !== null) return resume(Effect.succeed(daemon.child.exitCode))
        daemon.child.once("exit", (code) => resume(Effect.succeed(code)))
      })
      daemon.child.kill("SIGTERM")
      assert.strictEqual(yield* exited, 0, daemon.output().slice(-2000))
      const messages = daemon
        .output()
        .split("\n")
        .flatMap((line) => (line.startsWith("{") ? [String(JSON.parse(line).msg)] : []))
      assert.include(messages, "crm-sync stopping: finishing the work in hand")
      assert.strictEqual(messages.at(-1), "crm-sync stopped", messages.slice(-5).join("\n"))
    }).pipe(Effect.scoped)
  )
})
