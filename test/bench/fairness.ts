/**
 * Egress fairness benchmark: `npx node test/bench/fairness.ts [--windows N] [--no-docs]`.
 *
 * A partner serving 20 firms: 20 connections (personal tokens) leave through one address, so the
 * per-IP bucket binds (sandbox window 10 s, 400 requests per window per IP; each token may send
 * 1,000). Every connection keeps four requests in flight, wanting far more than its share. From
 * the sandbox's request log, window by window (each opens at the first request after the last
 * ended): what each connection got, against an even share of what was sent. The figures go into
 * docs/performance.md. PostgreSQL is embedded, in a temporary folder.
 */
import { PgClient } from "@effect/sql-pg"
import { Context, Effect, Fiber, Layer, Redacted } from "effect"
import { FetchHttpClient } from "effect/http"
import { Reactivity } from "effect/reactivity"
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { RateBudget } from "../../src/budget/RateBudget.ts"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { CrmClient } from "../../src/crm/CrmClient.ts"
import { Credentials } from "../../src/crm/Credentials.ts"
import { Sandbox } from "@crm-sync/sandbox"
import { acquireEmbeddedDatabase } from "../../src/warehouse/EmbeddedDatabase.ts"
import { migrate } from "../../src/warehouse/Migrations.ts"
import { recordFigures } from "./figures.ts"

const argument = (name: string) => {
  const index = process.argv.indexOf(name)
  return index < 0 ? undefined : process.argv[index + 1]
}

const CONNECTIONS = 20
const IP_LIMIT = 400
const WINDOW_MS = 10_000
const WINDOWS = Number(argument("--windows") ?? 4)
const IN_FLIGHT = 4

const main = Effect.gen(function* () {
  const folder = mkdtempSync(join(tmpdir(), "crm-sync-bench-fairness-"))
  yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(folder, { recursive: true, force: true })))
  const server = yield* acquireEmbeddedDatabase(folder)
  const admin = yield* PgClient.make({ url: server.url, maxConnections: 1 }).pipe(Effect.provide(Reactivity.layer))
  const name = `bench_fairness_${randomBytes(3).toString("hex")}`
  yield* admin.unsafe(`CREATE DATABASE ${name}`)
  const url = new URL(Redacted.value(server.url))
  url.pathname = `/${name}`
  const Database = PgClient.layer({ url: Redacted.make(url.toString()), maxConnections: 8 }).pipe(
    Layer.provide(Reactivity.layer)
  )
  yield* Effect.asVoid(migrate).pipe(Effect.provide(Database))

  const sandboxLayer = Sandbox.layer({
    seed: 9,
    records: 200,
    window: `${WINDOW_MS} millis`,
    logSize: 50_000,
    limits: { personal: { token: 1_000, company: 1_000_000, ip: IP_LIMIT } }
  })
  const sandbox = Context.get(yield* Layer.build(sandboxLayer), Sandbox)
  const names = Array.from({ length: CONNECTIONS }, (_, index) => `firm-${String(index + 1).padStart(2, "0")}`)
  const tokens = yield* Effect.forEach(names, () => sandbox.admin.createToken({ userId: sandbox.credentials.userId }))
  const config = AppConfig.layerFrom({
    connections: names.map((connection, index) => ({
      name: connection,
      base_url: sandbox.baseUrl,
      credential: "personal",
      token: tokens[index]!.token,
      limits: { token: 1_000, company: 1_000_000, ip: IP_LIMIT, window: `${WINDOW_MS} millis` },
      egress: "partner-nat",
      company_bucket: connection
    }))
  })
  const stack = Layer.mergeAll(RateBudget.layer, Credentials.layer).pipe(
    Layer.provideMerge(FetchHttpClient.layer),
    Layer.provideMerge(config),
    Layer.provideMerge(Database)
  )

  const since = yield* sandbox.admin.lastRequestSeq
  yield* Effect.gen(function* () {
    const clients = yield* Effect.forEach(names, (connection) => CrmClient.make(connection).pipe(Effect.orDie))
    const fibers = yield* Effect.forEach(clients, (client) =>
      Effect.forkChild(
        Effect.forEach(
          Array.from({ length: IN_FLIGHT }),
          () => Effect.forever(client.listFinancialAccounts({ page: 1, per_page: 1 }, { priority: "bulk" })),
          { concurrency: "unbounded", discard: true }
        )
      )
    )
    yield* Effect.sleep(`${WINDOWS * (WINDOW_MS + 1_500) + WINDOW_MS / 2} millis`)
    yield* Effect.forEach(fibers, Fiber.interrupt, { discard: true })
  }).pipe(Effect.provide(stack))

  const entries = (yield* sandbox.admin.requests({ since })).filter((entry) => entry.path.startsWith("/v1/"))
  const windows: Array<{ start: number; byToken: Map<string, number> }> = []
  for (const entry of entries) {
    if (entry.status === 429) continue
    const at = Date.parse(entry.at)
    let current = windows.at(-1)
    if (current === undefined || at >= current.start + WINDOW_MS)
      windows.push((current = { start: at, byToken: new Map() }))
    const token = entry.headers.authorization ?? ""
    current.byToken.set(token, (current.byToken.get(token) ?? 0) + 1)
  }
  const limited = entries.filter((entry) => entry.status === 429).length
  return { windows: windows.slice(0, -1), limited }
})

const met = (ok: boolean) => (ok ? "met" : "**not met**")

const report = ({ windows, limited }: Effect.Success<typeof main>) => {
  const rows = windows.map((window, index) => {
    const counts = [...window.byToken.values()]
    const total = counts.reduce((sum, n) => sum + n, 0)
    const fair = total / CONNECTIONS
    const least = counts.length < CONNECTIONS ? 0 : Math.min(...counts)
    return { index: index + 1, total, fair, least, most: Math.max(...counts), share: least / fair }
  })
  const worst = rows.length === 0 ? 0 : Math.min(...rows.map((row) => row.share))
  return [
    `Measured ${new Date().toISOString().slice(0, 10)} on this machine: ${CONNECTIONS} connections (personal tokens) on one egress address, ` +
      `sandbox window 10 s, ${IP_LIMIT} requests per window per IP (the binding bucket), ${IN_FLIGHT} requests in flight per connection.`,
    "",
    "| server window | requests | even share | least-served | most-served | least / even |",
    "|---|---|---|---|---|---|",
    ...rows.map(
      (row) =>
        `| ${row.index} | ${row.total} | ${row.fair.toFixed(1)} | ${row.least} | ${row.most} | ${(row.share * 100).toFixed(0)}% |`
    ),
    "",
    "| measure | figure | target | |",
    "|---|---|---|---|",
    `| least-served connection, worst full window | ${(worst * 100).toFixed(0)}% of an even share | ≥ 90% | ${met(worst >= 0.9 && rows.length > 0)} |`,
    `| 429 answers | ${limited} | 0 | ${met(limited === 0)} |`
  ].join("\n")
}

Effect.runPromise(
  Effect.scoped(main).pipe(
    Effect.flatMap((figures) => {
      const text = report(figures)
      console.log(`\n${text}\n`)
      return Effect.promise(() => recordFigures("fairness", text))
    })
  )
).then(
  () => process.exit(0),
  (error) => {
    console.error(error)
    process.exit(1)
  }
)
