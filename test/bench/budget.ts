/**
 * Rate-budget benchmark: `npx node test/bench/budget.ts [--windows N] [--no-docs]`.
 *
 * Three independent client stacks — each with its own RateBudget, Credentials, CrmClient, HTTP
 * client and PostgreSQL pool, as three processes would have — share one database and one OAuth
 * connection, and crawl `GET /v1/financial_accounts` (bulk priority) as fast as the budget lets
 * them, against the in-process sandbox with its rate-limit window shortened to 10 seconds (spec
 * §8's limits, per window: 500 per user, 1,000 per app, 10,000 per IP — the user bucket is the
 * strictest). The budget's configuration is the default one (reserves 10% + 10%, safety margin
 * 2 s, which a 10-second window caps at 1 s).
 *
 * The windows are the sandbox's own, rebuilt from its request log exactly as it opens them (a
 * window begins at the first request after the previous one ended). Printed: requests per server
 * window, 429 answers, and the strictest bucket's utilization per full window; the figures are
 * written into docs/performance.md between the bench markers. Requires nothing but this
 * repository: PostgreSQL is embedded, in a temporary folder.
 *
 * Scenarios: crm-sync alone on its grant; a co-tenant (the firm's other integrations) that
 * spends 40% of the user bucket as each window opens, so crm-sync must learn what is left; the
 * same co-tenant leaving half-way through, so crm-sync must win its share back; a co-tenant
 * that spends its 40% evenly through each window, whose requests crm-sync must not take early; the
 * first co-tenant with probing off; and the first co-tenant staying for a long run
 * (`--probe-windows N`, default 30), where each refused probe doubles the wait before the next:
 * refused probes per window and in all, and the wait the run ends with.
 */
import { CrmHttpClient } from "../../src/cli/ApiStack.ts"
import { PgClient } from "@effect/sql-pg"
import { Duration, Effect, Exit, Fiber, Layer, Redacted, Scope, Stream } from "effect"
import { Reactivity } from "effect/reactivity"
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import { recordFigures } from "./figures.ts"
import { availableParallelism, tmpdir } from "node:os"
import { join } from "node:path"
import { RateBudget } from "../../src/budget/RateBudget.ts"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { CrmClient } from "../../src/crm/CrmClient.ts"
import { Credentials } from "../../src/crm/Credentials.ts"
import { Sandbox } from "@crm-sync/sandbox"
import type { RequestLogEntry } from "@crm-sync/sandbox"
import { acquireEmbeddedDatabase } from "../../src/warehouse/EmbeddedDatabase.ts"
import { migrate } from "../../src/warehouse/Migrations.ts"

const argument = (name: string) => {
  const index = process.argv.indexOf(name)
  return index < 0 ? undefined : process.argv[index + 1]
}

const WINDOW_MS = 10_000
/** Full windows to measure; the run lasts a little longer, and the last, partial window is dropped. */
const WINDOWS = Number(argument("--windows") ?? 5)
/** Full windows of the long co-tenant run (`staying`). */
const PROBE_WINDOWS = Number(argument("--probe-windows") ?? 30)
const STACKS = 3
/** Crawlers per stack. */
const WORKERS = 2
const POOL_SIZE = 4
/** Spec §8, OAuth app defaults, per (shortened) window. */
const STRICTEST_LIMIT = 500

/** A migrated database of its own on the embedded server. */
const databaseUrl = (adminUrl: string, name: string) =>
  Effect.gen(function* () {
    const admin = yield* PgClient.make({ url: Redacted.make(adminUrl), maxConnections: 1 })
    yield* admin.unsafe(`CREATE DATABASE ${name}`)
    const url = new URL(adminUrl)
    url.pathname = `/${name}`
    yield* Effect.scoped(
      Effect.asVoid(migrate).pipe(
        Effect.provide(PgClient.layer({ url: Redacted.make(url.toString()), maxConnections: 1 }))
      )
    )
    return url.toString()
  }).pipe(Effect.provide(Reactivity.layer))

/** One "process": its own budget, credentials, client, HTTP client and pool. */
const stack = <E>(config: Layer.Layer<AppConfig, E>, url: string) =>
  CrmClient.layerFor("bench").pipe(
    Layer.provideMerge(Layer.mergeAll(RateBudget.layer, Credentials.layer)),
    Layer.provide(config),
    Layer.provide(CrmHttpClient),
    Layer.provide(PgClient.layer({ url: Redacted.make(url), maxConnections: POOL_SIZE })),
    Layer.fresh
  )

/** A crawler: pages through the financial accounts again and again. */
const crawler = Effect.gen(function* () {
  const client = yield* CrmClient
  while (true) {
    yield* Stream.runDrain(client.paginate((page) => client.listFinancialAccounts(page)))
  }
})

interface ServerWindow {
  readonly startedAt: number
  /** Requests the sandbox admitted. */
  readonly requests: number
  /** 429 answers in the window. */
  readonly limited: number
}

/**
 * `steady`: the co-tenant throughout, with probing off (`budget.probe_step: 0`); `staying`: the
 * co-tenant throughout a long run (`PROBE_WINDOWS`), budget defaults.
 */
type Scenario = "alone" | "cotenant" | "departs" | "even" | "steady" | "staying"
/** The co-tenant's share of the strictest bucket, spent as each window opens. */
const COTENANT = 200

/** The sandbox's windows for one bucket, rebuilt from its log: each opens at the first request after the last ended. */
const serverWindows = (entries: ReadonlyArray<RequestLogEntry>): ReadonlyArray<ServerWindow> => {
  const windows: Array<{ startedAt: number; requests: number; limited: number }> = []
  for (const entry of entries) {
    const at = Date.parse(entry.at)
    let current = windows[windows.length - 1]
    // A window opens at an admitted request (the sandbox does not count a rejected one).
    if ((current === undefined || at >= current.startedAt + WINDOW_MS) && entry.status !== 429) {
      windows.push((current = { startedAt: at, requests: 0, limited: 0 }))
    }
    if (current === undefined) continue
    if (entry.status === 429) current.limited++
    else current.requests++
  }
  return windows
}

/** The token bucket's wait before its next probe, in clean windows, as the run left it. */
const tokenProbeWait = (url: string) =>
  Effect.scoped(
    Effect.gen(function* () {
      const sql = yield* PgClient.make({ url: Redacted.make(url), maxConnections: 1 })
      const rows = yield* sql<{ probe_wait: number }>`
        SELECT probe_wait FROM crm_sync.rate_windows WHERE scope = 'token'`
      return rows[0]?.probe_wait
    })
  ).pipe(Effect.provide(Reactivity.layer))

const main = (scenario: Scenario) =>
  Effect.gen(function* () {
    const folder = mkdtempSync(join(tmpdir(), "crm-sync-bench-budget-"))
    yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(folder, { recursive: true, force: true })))
    const server = yield* acquireEmbeddedDatabase(folder)
    const url = yield* databaseUrl(Redacted.value(server.url), `bench_budget_${randomBytes(3).toString("hex")}`)

    const sandboxScope = yield* Scope.make()
    const sandboxContext = yield* Layer.buildWithScope(
      Sandbox.layer({ window: "10 seconds", records: 1500, seed: 42, logSize: 50_000 }),
      sandboxScope
    )
    const sandbox = yield* Effect.provide(Effect.service(Sandbox), sandboxContext)
    // An OAuth grant for the sandbox's own user: the strictest limits of spec §8.
    const grant = yield* sandbox.admin.connect({
      clientId: sandbox.credentials.oauthClientId,
      userId: sandbox.credentials.userId,
      companyId: sandbox.credentials.companyId
    })
    const config = AppConfig.layerFrom({
      connections: [
        {
          name: "bench",
          base_url: sandbox.baseUrl,
          credential: "oauth",
          token: grant.access_token,
          limits: { window: "10 seconds" }
        }
      ],
      ...(scenario === "steady" ? { budget: { probe_step: 0 } } : {})
    })

    const userBucket = `user:${sandbox.credentials.oauthClientId}:${sandbox.credentials.userId}`
    if (scenario !== "alone")
      yield* sandbox.admin.setCotenant(userBucket, COTENANT, scenario === "even" ? "even" : "start")

    const scopes = yield* Effect.forEach(Array.from({ length: STACKS }), () => Scope.make())
    const contexts = yield* Effect.forEach(scopes, (scope) => Layer.buildWithScope(stack(config, url), scope))
    const measured = scenario === "staying" ? PROBE_WINDOWS : WINDOWS
    const duration = Duration.millis(measured * (WINDOW_MS + 2_000) + WINDOW_MS / 2)
    yield* Effect.logInfo(
      `${STACKS} stacks × ${WORKERS} crawlers, sandbox window 10 s, running ${Duration.format(duration)}`
    )
    const started = Date.now()
    const fibers = yield* Effect.forEach(contexts, (context) =>
      Effect.forEach(Array.from({ length: WORKERS }), () => Effect.forkDetach(Effect.provide(crawler, context)))
    )
    let departedAt: number | undefined
    if (scenario === "departs") {
      // Two windows with the co-tenant (it is learned), then it leaves for the rest of the run.
      const before = 2 * (WINDOW_MS + 2_000)
      yield* Effect.sleep(Duration.millis(before))
      yield* sandbox.admin.setCotenant(userBucket, 0)
      departedAt = Date.now()
      yield* Effect.sleep(Duration.millis(Math.max(0, Duration.toMillis(duration) - before)))
    } else yield* Effect.sleep(duration)
    yield* Effect.forEach(fibers.flat(), Fiber.interrupt)
    const elapsedMs = Date.now() - started
    const probeWait = yield* tokenProbeWait(url)

    const entries = (yield* sandbox.admin.requests({ path: "/v1/financial_accounts" })).toSorted((a, b) =>
      a.at < b.at ? -1 : a.at > b.at ? 1 : a.seq - b.seq
    )
    yield* Effect.forEach(scopes, (scope) => Scope.close(scope, Exit.void))
    yield* Scope.close(sandboxScope, Exit.void)

    const windows = serverWindows(entries)
    // The last window was cut short by the end of the run.
    const full = windows.slice(0, Math.max(0, windows.length - 1))
    const tooMany = entries.filter((entry) => entry.status === 429).length
    const errors = entries.filter((entry) => entry.status !== 200 && entry.status !== 429).length
    return {
      scenario,
      departedAt,
      cpus: availableParallelism(),
      elapsedMs,
      total: entries.length,
      tooMany,
      errors,
      full,
      probeWait
    }
  })

const percent = (share: number) => `${(share * 100).toFixed(1)}%`
const met = (ok: boolean) => (ok ? "met" : "**not met**")

type Figures = Effect.Success<ReturnType<typeof main>>

const aloneReport = (figures: Figures) => {
  const utilization = figures.full.map((window) => window.requests / STRICTEST_LIMIT)
  const minimum = utilization.length === 0 ? 0 : Math.min(...utilization)
  const lostMs = Math.max(
    0,
    ...figures.full.slice(1).map((window, index) => window.startedAt - (figures.full[index]!.startedAt + WINDOW_MS))
  )
  return [
    `Measured ${new Date().toISOString().slice(0, 10)} on this machine (${figures.cpus} CPUs shared by the sandbox, PostgreSQL and the three stacks): ` +
      `${STACKS} independent stacks × ${WORKERS} crawlers on one embedded PostgreSQL, one OAuth connection, sandbox window 10 s, ` +
      `budget defaults (reserves 10% + 10%, safety margin capped at 1 s), ${(figures.elapsedMs / 1000).toFixed(0)} s run.`,
    "",
    "| server window | requests | utilization of the strictest bucket (500) |",
    "|---|---|---|",
    ...figures.full.map((window, index) => `| ${index + 1} | ${window.requests} | ${percent(utilization[index]!)} |`),
    "",
    "| measure | figure | target | |",
    "|---|---|---|---|",
    `| 429 answers | ${figures.tooMany} | 0 | ${met(figures.tooMany === 0)} |`,
    `| lowest utilization of a full window | ${percent(minimum)} | ≥ 98% | ${met(minimum >= 0.98 && figures.full.length > 0)} |`,
    `| other non-2xx answers | ${figures.errors} | 0 | ${met(figures.errors === 0)} |`,
    `| seconds lost at a window boundary (the next window's first request after the last one's end), worst | ${(lostMs / 1000).toFixed(2)} s | ≤ 1 s | ${met(lostMs <= 1_000 && figures.full.length > 1)} |`,
    "",
    `${figures.total} requests in all; the last, partial window is not counted.`
  ].join("\n")
}

/** The co-tenant scenarios: what crm-sync used of what the co-tenant left, and its 429s, window by window. */
const cotenantReport = (cotenant: Figures, departs: Figures, even: Figures, steady: Figures) => {
  const left = (figures: Figures, window: ServerWindow) =>
    figures.departedAt !== undefined && window.startedAt >= figures.departedAt
      ? STRICTEST_LIMIT
      : STRICTEST_LIMIT - COTENANT
  const cell = (figures: Figures, index: number) => {
    const window = figures.full[index]
    if (window === undefined) return ""
    const use = `${window.requests} of ${left(figures, window)} (${percent(window.requests / left(figures, window))})`
    return window.limited > 0 ? `${use}, **${window.limited}** × 429` : use
  }
  const runs = [cotenant, departs, even, steady]
  const rows = Array.from(
    { length: Math.max(...runs.map((figures) => figures.full.length)) },
    (_, index) => `| ${index + 1} | ${runs.map((figures) => cell(figures, index)).join(" | ")} |`
  )
  const bursts = cotenant.full.filter((window) => window.limited > 0)
  const steadyBursts = steady.full.filter((window) => window.limited > 0)
  const burstFigure = (figures: Figures, windows: ReadonlyArray<ServerWindow>) =>
    `${windows.length}${windows.length > 0 ? ` (window${windows.length > 1 ? "s" : ""} ${windows.map((w) => figures.full.indexOf(w) + 1).join(", ")}: ${windows.map((w) => w.limited).join(", ")} answers)` : ""}`
  const oneBurst = (figures: Figures, windows: ReadonlyArray<ServerWindow>) =>
    windows.length <= 1 && (windows.length === 0 || figures.full.indexOf(windows[0]!) === 0)
  const laterUse = cotenant.full.slice(1).map((window) => window.requests / left(cotenant, window))
  const lowest = laterUse.length === 0 ? 0 : Math.min(...laterUse)
  const afterLeaving = departs.full.filter(
    (window) => departs.departedAt !== undefined && window.startedAt >= departs.departedAt
  )
  const regained = afterLeaving.findIndex((window) => window.requests >= 0.95 * STRICTEST_LIMIT)
  return [
    `Same setup; a co-tenant spends ${COTENANT} of the user bucket's 500 as each window opens (sandbox \`setCotenant\`, spread \`start\`), budget defaults (probe step 20%).`,
    "",
    "Each cell: crm-sync's requests of what the co-tenant leaves in that server window, and its 429s. Runs: the co-tenant stays throughout; it leaves after two windows; it spends its share evenly through each window (`spread` `even`: the sandbox charges it whatever crm-sync took, so a use over 100% is what its own requests would have met as 429s); it stays, with probing off (`budget.probe_step: 0`: a departed co-tenant's share would come back only when the learned ceiling expires).",
    "",
    "| server window | co-tenant throughout | co-tenant leaves | co-tenant spends evenly | throughout, probing off |",
    "|---|---|---|---|---|",
    ...rows,
    "",
    "| measure | figure | target | |",
    "|---|---|---|---|",
    `| windows with 429s (co-tenant throughout) | ${burstFigure(cotenant, bursts)} | one burst, in the first | ${met(oneBurst(cotenant, bursts))} |`,
    `| windows with 429s (co-tenant throughout, probing off) | ${burstFigure(steady, steadyBursts)} | one burst, in the first | ${met(oneBurst(steady, steadyBursts))} |`,
    `| lowest use of what is left, later windows | ${percent(lowest)} | ≥ 95% | ${met(lowest >= 0.95)} |`,
    `| windows until the freed share is in use (≥ 95% of 500) | ${regained < 0 ? "not within the run" : regained + 1} | ≤ 3 | ${met(regained >= 0 && regained + 1 <= 3)} |`
  ].join("\n")
}

/** Seconds of `windowCount` server windows as this benchmark's runs span them (10 s and the margins). */
const seconds = (windowCount: number) => ((windowCount * (WINDOW_MS + 1_500)) / 1000).toFixed(0)

/**
 * The long co-tenant run: per window, crm-sync's requests and its 429s; the first window's are the
 * burst that teaches the ceiling, every later one is a refused probe.
 */
const probesReport = (staying: Figures) => {
  const windows = staying.full.slice(0, PROBE_WINDOWS)
  const refused = windows.slice(1).reduce((sum, window) => sum + window.limited, 0)
  const probed = windows.flatMap((window, index) => (index > 0 && window.limited > 0 ? [index + 1] : []))
  const laterUse = windows.slice(1).map((window) => window.requests / (STRICTEST_LIMIT - COTENANT))
  const lowest = laterUse.length === 0 ? 0 : Math.min(...laterUse)
  const wait = staying.probeWait
  return [
    `Same setup, ${windows.length} windows (${(staying.elapsedMs / 1000).toFixed(0)} s); the co-tenant spends ${COTENANT} of the user bucket's 500 as each window opens and stays throughout; budget defaults (probe step 20%; \`learned_ceiling_ttl\` 6 hours, so the wait's cap is far off in 10-s windows). The first window's 429s teach the ceiling; each later one is a refused probe.`,
    "",
    `Per server window, crm-sync's requests of the ${STRICTEST_LIMIT - COTENANT} left and its 429s: ${windows
      .map((window, index) => `${index + 1}: ${window.requests}${window.limited > 0 ? `, **${window.limited}**` : ""}`)
      .join(" · ")}.`,
    "",
    "| measure | figure | target | |",
    "|---|---|---|---|",
    `| refused probes in ${windows.length} windows | ${refused}${probed.length > 0 ? ` (windows ${probed.join(", ")})` : ""} | ≤ 6 | ${met(refused <= 6 && windows.length >= PROBE_WINDOWS)} |`,
    `| 429s of the first window (learning) | ${windows[0]?.limited ?? 0} | | |`,
    `| lowest use of what is left, later windows | ${percent(lowest)} | ≥ 95% | ${met(lowest >= 0.95)} |`,
    `| wait before the next probe at the end, in clean windows | ${wait ?? "none"} | | |`,
    "",
    wait === undefined
      ? "No wait was left: the bucket's ceiling was not learned."
      : `Had the co-tenant left after the last refused probe, the next probe would come ${wait + 1} windows after it (the window after the block, then ${wait} clean ones) and the whole 500 would be in use one window later: ${wait + 2} windows, about ${seconds(wait + 2)} s of these 11.5-s windows.`
  ].join("\n")
}

Effect.runPromise(
  Effect.gen(function* () {
    const alone = yield* Effect.scoped(main("alone"))
    const text = aloneReport(alone)
    console.log(`\n${text}\n`)
    yield* Effect.promise(() => recordFigures("budget", text))
    if (process.argv.includes("--no-cotenant")) return
    const cotenant = yield* Effect.scoped(main("cotenant"))
    const departs = yield* Effect.scoped(main("departs"))
    const even = yield* Effect.scoped(main("even"))
    const steady = yield* Effect.scoped(main("steady"))
    const shared = cotenantReport(cotenant, departs, even, steady)
    console.log(`\n${shared}\n`)
    yield* Effect.promise(() => recordFigures("budget-cotenant", shared))
    const staying = yield* Effect.scoped(main("staying"))
    const probes = probesReport(staying)
    console.log(`\n${probes}\n`)
    yield* Effect.promise(() => recordFigures("budget-probes", probes))
  })
).then(
  () => process.exit(0),
  (error) => {
    console.error(error)
    process.exit(1)
  }
)
