/**
 * `crm-sync doctor` as a user runs it (a real process, its lines and exit code) against the
 * sandbox and a real PostgreSQL: it passes on a setup like the demo's, and fails clearly, with
 * what to do, on each broken one: a bad token, an unreachable CRM, a secret of the wrong form, a
 * pending migration, an unreachable warehouse, a skewed clock.
 */
import { PgClient } from "@effect/sql-pg"
import { assert, describe, layer } from "@effect/vitest"
import { Duration, Effect, Layer, Redacted } from "effect"
import { Reactivity } from "effect/reactivity"
import { SqlClient } from "effect/sql/SqlClient"
import { spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { copyFileSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Sandbox } from "@crm-sync/sandbox"
import { RateBudget } from "../src/budget/RateBudget.ts"
import { CrmHttpClient } from "../src/cli/ApiStack.ts"
import { AppConfig } from "../src/config/AppConfig.ts"
import { Credentials } from "../src/crm/Credentials.ts"
import { migrate, migrateFrom, migrationsDirectory } from "../src/warehouse/Migrations.ts"
import * as Subscriptions from "../src/webhooks/Subscriptions.ts"
import { freshDatabase } from "./support/TestDatabase.ts"

const main = new URL("../src/main.ts", import.meta.url).pathname

interface Run {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/** Runs crm-sync to its end (not blocking: the sandbox answers from this process). */
const cli = (args: ReadonlyArray<string>, env: Record<string, string>) =>
  Effect.callback<Run>((resume) => {
    const child = spawn(process.execPath, [main, ...args], {
      env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", LOG_LEVEL: "warn", ...env },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()))
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()))
    child.on("exit", (code) => resume(Effect.succeed({ code, stdout, stderr })))
    return Effect.sync(() => child.kill("SIGKILL"))
  })

/** A port nothing listens on now (the daemon's ports must not collide with another test's). */
const freePort = Effect.callback<number>((resume) => {
  const server = createServer()
  server.listen(0, "127.0.0.1", () => {
    const address = server.address()
    const port = typeof address === "object" && address !== null ? address.port : 0
    server.close(() => resume(Effect.succeed(port)))
  })
})

const secret = (bytes = 24) => `whsec_${randomBytes(bytes).toString("base64")}`

/** The line of one check, `✓ name: ...` or `✗ name: ...`, asserted present. */
const line = (run: Run, mark: "✓" | "✗" | "–", name: string) => {
  const found = run.stdout.split("\n").find((candidate) => candidate.startsWith(`${mark} ${name}:`))
  assert.isDefined(found, `no "${mark} ${name}" line in:\n${run.stdout}\nstderr:\n${run.stderr.slice(-1500)}`)
  return found!
}

const onDatabase = <A, E>(url: string, effect: Effect.Effect<A, E, SqlClient>) =>
  effect.pipe(
    Effect.provide(PgClient.layer({ url: Redacted.make(url), maxConnections: 2 })),
    Effect.provide(Reactivity.layer)
  )

/** A migrated database and the environment of a single personal connection to the sandbox. */
const personalSetup = Effect.gen(function* () {
  const sandbox = yield* Sandbox
  const url = yield* freshDatabase
  yield* onDatabase(url, migrate)
  const env = {
    CRM_SYNC_DATABASE_URL: url,
    CRM_BASE_URL: sandbox.baseUrl,
    CRM_TOKEN: sandbox.credentials.personalAccessToken,
    CRM_WEBHOOK_SECRET: secret(),
    CRM_SYNC_WEBHOOK_PORT: String(yield* freePort),
    CRM_SYNC_ADMIN_PORT: String(yield* freePort)
  }
  return { sandbox, url, env }
})

/** Requests the sandbox has answered on `/v1/me`. */
const meRequests = Effect.flatMap(Sandbox, (sandbox) =>
  Effect.map(sandbox.admin.requests({ path: "/v1/me" }), (entries) => entries.length)
)

const sandboxOptions = { records: 60, seed: 5, limits: { personal: { token: 100_000, company: 100_000, ip: 100_000 } } }

layer(Sandbox.layer(sandboxOptions), { timeout: 240_000, excludeTestServices: true })("crm-sync doctor", (it) => {
  it.effect(
    "passes on a setup like the demo's: OAuth connection, four endpoints, the subscription",
    () =>
      Effect.gen(function* () {
        const sandbox = yield* Sandbox
        const { credentials, admin } = sandbox
        const url = yield* freshDatabase
        const endpoints = ["default", "client-created", "client-updated", "prospect-created"].map((name) => ({
          name,
          secrets: [secret()],
          connection: "sandbox",
          ...(name === "default" ? {} : { event_type: name.replace("-", ".") })
        }))
        const document = {
          database_url: url,
          encryption_key: randomBytes(32).toString("hex"),
          webhook_port: yield* freePort,
          admin_port: yield* freePort,
          connections: [
            {
              name: "sandbox",
              base_url: sandbox.baseUrl,
              credential: "oauth",
              oauth: {
                client_id: credentials.oauthClientId,
                client_secret: credentials.oauthClientSecret,
                auth_url: `${sandbox.baseUrl}/oauth/authorize`,
                token_url: `${sandbox.baseUrl}/oauth/token`
              }
            }
          ],
          webhooks: { endpoints },
          schedules: { businesses: "1 minute", crawl: "10 minutes", reference: "1 hour" }
        }
        // As the demo does: migrations, tokens stored as `connect` would, then the subscription.
        const tokens = yield* admin.connect({
          clientId: credentials.oauthClientId,
          userId: credentials.userId,
          companyId: credentials.companyId
        })
        const stack = Layer.mergeAll(RateBudget.layer, Credentials.layer).pipe(
          Layer.provideMerge(CrmHttpClient),
          Layer.provideMerge(PgClient.layer({ url: Redacted.make(url), maxConnections: 4 })),
          Layer.provideMerge(AppConfig.layerFrom(document)),
          Layer.provide(Reactivity.layer)
        )
        yield* Effect.gen(function* () {
          yield* migrate
          const config = yield* AppConfig
          yield* (yield* Credentials).store(config.connections[0]!, {
            accessToken: Redacted.make(tokens.access_token),
            refreshToken: Redacted.make(tokens.refresh_token),
            expiresIn: Duration.seconds(tokens.expires_in),
            scope: tokens.scope
          })
          yield* Subscriptions.subscribe("sandbox")
        }).pipe(Effect.provide(stack))
        const dir = mkdtempSync(join(tmpdir(), "crm-sync-doctor-"))
        yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dir, { recursive: true, force: true })))
        const file = join(dir, "config.json")
        writeFileSync(file, JSON.stringify(document))

        const run = yield* cli(["doctor"], { CRM_SYNC_CONFIG: file })
        assert.strictEqual(run.code, 0, `${run.stdout}\n${run.stderr.slice(-1500)}`)
        const lines = run.stdout
          .trim()
          .split("\n")
          .filter((text) => text !== "")
        assert.deepStrictEqual(
          lines.filter((text) => !text.startsWith("✓ ")),
          ["all checks passed"],
          "every check passes, none is skipped"
        )
        for (const name of [
          "config",
          "postgresql",
          "postgresql version",
          "migrations",
          "database role",
          "crm (sandbox)",
          "credential kind (sandbox)",
          "write access (sandbox)",
          "oauth grant (sandbox)",
          "clock (sandbox)",
          "webhook subscription (sandbox)",
          "webhook endpoint default",
          "webhook endpoint prospect-created",
          "webhook port",
          "admin port",
          "schedules of sandbox"
        ])
          line(run, "✓", name)

        const json = yield* cli(["doctor", "--json", "--deep"], { CRM_SYNC_CONFIG: file })
        assert.strictEqual(json.code, 0, json.stdout)
        const report = JSON.parse(json.stdout) as {
          ok: boolean
          checks: ReadonlyArray<{ check: string; status: string }>
        }
        assert.isTrue(report.ok)
        const deep = report.checks.filter((check) => check.check.startsWith("schema of "))
        assert.deepStrictEqual(
          deep.map((check) => [check.check, check.status]),
          ["books", "businesses", "project_templates", "annuity_contracts", "financial_accounts"].map((resource) => [
            `schema of ${resource} (sandbox)`,
            "pass"
          ])
        )
      }).pipe(Effect.scoped),
    120_000
  )

  it.effect("a bad token: ✗ naming the 401 and what to do, after a permit of the budget", () =>
    Effect.gen(function* () {
      const { url, env } = yield* personalSetup
      const before = yield* meRequests
      const run = yield* cli(["doctor"], { ...env, CRM_TOKEN: "crm_pat_not_a_real_token" })
      assert.strictEqual(run.code, 1)
      assert.match(line(run, "✗", "crm (default)"), /401.*paste the token again from the CRM's settings/)
      line(run, "–", "clock (default)")
      assert.strictEqual((yield* meRequests) - before, 1, "one GET /v1/me reached the CRM")
      // The request took its permit: the window it counted in is in the shared budget.
      const windows = yield* onDatabase(
        url,
        Effect.flatMap(SqlClient, (sql) => sql<{ n: number }>`SELECT count(*)::int AS n FROM crm_sync.rate_windows`)
      )
      assert.isAbove(windows[0]!.n, 0)
    }).pipe(Effect.scoped)
  )

  it.effect("an unreachable CRM: ✗ saying so and pointing at base_url", () =>
    Effect.gen(function* () {
      const { env } = yield* personalSetup
      const closed = yield* freePort
      const run = yield* cli(["doctor"], { ...env, CRM_BASE_URL: `http://127.0.0.1:${closed}` })
      assert.strictEqual(run.code, 1)
      assert.match(
        line(run, "✗", "crm (default)"),
        /cannot reach the CRM.*check base_url \(http:\/\/127\.0\.0\.1:\d+\)/
      )
    }).pipe(Effect.scoped)
  )

  it.effect("a CRM that never answers: ✗ after the request's timeout, not after every retry", () =>
    Effect.gen(function* () {
      const { sandbox, env } = yield* personalSetup
      // Each attempt would wait 60 s; the connection's request_timeout is 10 s, and doctor gives
      // the call that and 5 s more: the second attempt is cut short.
      yield* sandbox.admin.addFault({ kind: "latency", ms: 60_000, path: "/v1/me", times: 2 })
      const dir = mkdtempSync(join(tmpdir(), "crm-sync-doctor-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dir, { recursive: true, force: true })))
      const file = join(dir, "config.json")
      writeFileSync(
        file,
        JSON.stringify({
          connections: [
            {
              name: "default",
              base_url: sandbox.baseUrl,
              credential: "personal",
              token: sandbox.credentials.personalAccessToken,
              request_timeout: "10 seconds"
            }
          ]
        })
      )
      const run = yield* cli(["doctor"], { ...env, CRM_BASE_URL: "", CRM_TOKEN: "", CRM_SYNC_CONFIG: file })
      assert.strictEqual(run.code, 1)
      assert.match(line(run, "✗", "crm (default)"), /no answer within 15 s; check base_url .* the firewall/)
    }).pipe(Effect.scoped)
  )

  it.effect("a signing secret of the wrong form: cut short, or without whsec_", () =>
    Effect.gen(function* () {
      const { env } = yield* personalSetup
      // 28 of the 32 characters: still base64, but 21 bytes, another key.
      const short = secret().slice(0, "whsec_".length + 28)
      const cut = yield* cli(["doctor"], { ...env, CRM_WEBHOOK_SECRET: short })
      assert.strictEqual(cut.code, 1)
      assert.match(
        line(cut, "✗", "webhook endpoint default"),
        /decodes to 21 bytes, not 24 to 64; copy .* again, whole/
      )
      line(cut, "✓", "crm (default)")

      const bare = yield* cli(["doctor"], { ...env, CRM_WEBHOOK_SECRET: randomBytes(24).toString("hex") })
      assert.strictEqual(bare.code, 1)
      assert.match(line(bare, "✗", "config"), /secrets\[0\]: a signing secret is whsec_ followed by base64/)
      assert.notInclude(bare.stdout, env.CRM_TOKEN, "no secret is printed")
    }).pipe(Effect.scoped)
  )

  it.effect("a pending migration: ✗ naming it, and the CRM left alone (its permits live in the warehouse)", () =>
    Effect.gen(function* () {
      const { env } = yield* personalSetup
      const url = yield* freshDatabase
      const files = readdirSync(migrationsDirectory)
        .filter((file) => file.endsWith(".sql"))
        .toSorted()
      const dir = mkdtempSync(join(tmpdir(), "crm-sync-migrations-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dir, { recursive: true, force: true })))
      for (const file of files.slice(0, -1)) copyFileSync(join(migrationsDirectory, file), join(dir, file))
      yield* onDatabase(url, migrateFrom(dir))
      const before = yield* meRequests
      const run = yield* cli(["doctor"], { ...env, CRM_SYNC_DATABASE_URL: url })
      assert.strictEqual(run.code, 1)
      const last = files.at(-1)!.replace(/\.sql$/, "")
      assert.match(line(run, "✗", "migrations"), new RegExp(`1 pending: ${last}; run \`crm-sync migrate\``))
      assert.match(line(run, "–", "crm"), /not asked: .*rate budget.*migrations are not applied/)
      assert.strictEqual((yield* meRequests) - before, 0, "no request without a permit")
    }).pipe(Effect.scoped)
  )

  it.effect("an unreachable warehouse: ✗ naming it, the CRM checks skipped, the others still run", () =>
    Effect.gen(function* () {
      const { env } = yield* personalSetup
      const closed = yield* freePort
      const run = yield* cli(["doctor"], {
        ...env,
        CRM_SYNC_DATABASE_URL: `postgres://crm:secret@127.0.0.1:${closed}/warehouse`
      })
      assert.strictEqual(run.code, 1)
      assert.match(line(run, "✗", "postgresql"), /cannot connect to the warehouse at 127\.0\.0\.1:\d+\/warehouse/)
      assert.match(line(run, "–", "crm"), /not asked: .*unreachable/)
      line(run, "✓", "webhook endpoint default")
      assert.notInclude(run.stdout, "secret@", "the database password is not printed")
    }).pipe(Effect.scoped)
  )

  it.effect("an unknown --connection is bad usage (exit 2)", () =>
    Effect.gen(function* () {
      const { env } = yield* personalSetup
      const run = yield* cli(["doctor", "--connection", "nope"], env)
      assert.strictEqual(run.code, 2)
      assert.match(run.stderr, /no connection named nope in this config \(configured: default\)/)
    }).pipe(Effect.scoped)
  )
})

describe("crm-sync doctor, the CRM's clock 10 minutes behind", () => {
  layer(Sandbox.layer({ ...sandboxOptions, clockSkew: "-10 minutes" }), {
    timeout: 120_000,
    excludeTestServices: true
  })("skewed", (it) => {
    it.effect("✗ clock: beyond webhooks.tolerance, every delivery would be refused", () =>
      Effect.gen(function* () {
        const { env } = yield* personalSetup
        const run = yield* cli(["doctor"], env)
        assert.strictEqual(run.code, 1)
        assert.match(
          line(run, "✗", "clock (default)"),
          /the CRM's clock is 10 min behind this machine's, beyond webhooks\.tolerance \(5 min\).*NTP/
        )
        line(run, "✓", "crm (default)")
      }).pipe(Effect.scoped)
    )
  })
})
