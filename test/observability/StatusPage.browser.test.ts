/**
 * The status page in a real browser (Debian's Chromium, driven by playwright-core) against a
 * running daemon syncing the sandbox: it loads without console errors, leads with the connections'
 * summary, draws its charts with data (a bucket's requests per minute against its limit, the
 * events received and applied, each resource's freshness, the day's runs as ticks), and shows
 * every warehouse resource, a budget bar, the inbox counts, a dead delivery with its reason and a
 * refused write under the name of the record it would create — an HTML-looking name, which
 * renders as text, never as markup. Times read "3 min ago" with the exact time on hover. The
 * screenshots are written to `test-results/status-page.png` (the page) and `status-page-charts.png` (the charts). `.ci/run` installs Chromium (`apt-get install chromium`);
 * `CHROMIUM_PATH` points elsewhere.
 */
import { assert, layer } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Effect, Redacted } from "effect"
import { Reactivity } from "effect/reactivity"
import { existsSync, mkdirSync } from "node:fs"
import { chromium } from "playwright-core"
import { Sandbox } from "@crm-sync/sandbox"
import { eventFixture } from "../fixtures/Fixtures.ts"
import { deliverSigned, eventually, freePort, get, startDaemon } from "../support/Daemon.ts"
import { freshDatabase } from "../support/TestDatabase.ts"

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium"
const OUTPUT = new URL("../../test-results/", import.meta.url).pathname
const SECRET = `whsec_${Buffer.from("crm-sync status page test secret").toString("base64")}`
const TOKEN = "status-page-test-token"
/** What a hostile or careless CRM user might type; the page must show it, not run it. */
const HTML_LOOKING = `<img src=x onerror="window.__injected=1"><script>window.__injected=2</script>`

/** A signed delivery of a task whose title and deadline are that text: it cannot decode, so it goes dead with the value in its reason. */
const deliverPoison = (base: string) => {
  const event = eventFixture("task.created") as { task: Record<string, unknown> }
  const body = JSON.stringify({ ...event, task: { ...event.task, title: HTML_LOOKING, deadline_at: HTML_LOOKING } })
  return deliverSigned(base, SECRET, "msg_status_page_poison", body)
}

layer(
  Sandbox.layer({ records: 200, seed: 8, limits: { personal: { token: 100_000, company: 100_000, ip: 100_000 } } }),
  { timeout: 120_000, excludeTestServices: true }
)("the status page in a browser", (it) => {
  it.effect(
    "shows every resource, a budget bar and the inbox, renders user data as text, without console errors",
    () =>
      Effect.gen(function* () {
        assert.isTrue(
          existsSync(CHROMIUM),
          `no Chromium at ${CHROMIUM}: apt-get install chromium (or set CHROMIUM_PATH)`
        )
        const sandbox = yield* Sandbox
        const url = yield* freshDatabase
        const port = yield* freePort
        const adminPort = yield* freePort
        const daemon = yield* startDaemon({
          DATABASE_URL: url,
          CRM_BASE_URL: sandbox.baseUrl,
          CRM_TOKEN: sandbox.credentials.personalAccessToken,
          CRM_WEBHOOK_SECRET: SECRET,
          WEBHOOK_PORT: String(port),
          ADMIN_PORT: String(adminPort),
          CRM_SYNC_ADMIN_TOKEN: TOKEN,
          LOG_LEVEL: "warn"
        })
        const admin = `http://127.0.0.1:${adminPort}`
        const authorized = { authorization: `Bearer ${TOKEN}` }
        yield* eventually("readiness", get(`${admin}/readyz`), (response) => response.status === 200)
        assert.strictEqual(yield* deliverPoison(`http://127.0.0.1:${port}`), 200, daemon.output().slice(-2000))
        // And one that applies, for the events chart.
        const task = JSON.stringify(eventFixture("task.created"))
        assert.strictEqual(yield* deliverSigned(`http://127.0.0.1:${port}`, SECRET, "msg_status_page_ok", task), 200)
        // The firm queues a prospect with that name and no book: the CRM refuses it, for a person to see.
        const sql = yield* PgClient.make({ url: Redacted.make(url), maxConnections: 1 }).pipe(
          Effect.provide(Reactivity.layer)
        )
        yield* sql`INSERT INTO crm_sync.outbox (operation, payload)
        VALUES ('prospect.create', ${JSON.stringify({ first_name: HTML_LOOKING, last_name: "Example" })}::jsonb)`
        // The first sync done and the poison delivery set aside (the page is a snapshot of at most 5 s).
        const report = yield* eventually(
          "the first sync and the dead delivery",
          Effect.map(get(`${admin}/status`, authorized), (response) =>
            response.status === 200 ? JSON.parse(response.text) : {}
          ),
          (status) =>
            status.resources?.financial_accounts?.rows > 0 &&
            status.resources?.businesses?.rows > 0 &&
            status.inbox?.dead === 1 &&
            status.inbox?.processed === 1 &&
            status.last_jobs?.some(
              (job: { job: string; status: string }) => job.job === "poll:businesses" && job.status === "succeeded"
            ) &&
            (status.outbox?.needs_review ?? 0) + (status.outbox?.failed ?? 0) === 1
        )

        const browser = yield* Effect.acquireRelease(
          Effect.promise(() => chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] })),
          (opened) => Effect.promise(() => opened.close())
        )
        const page = yield* Effect.promise(async () => {
          const context = await browser.newContext({
            extraHTTPHeaders: authorized,
            viewport: { width: 1280, height: 900 }
          })
          return context.newPage()
        })
        const problems: Array<string> = []
        page.on("console", (message) => {
          if (message.type() === "error") problems.push(message.text())
        })
        page.on("pageerror", (error) => problems.push(error.message))
        const response = yield* Effect.promise(() => page.goto(`${admin}/`, { waitUntil: "load" }))
        assert.strictEqual(response?.status(), 200)
        // The picture first, so that a failure below leaves one to look at.
        mkdirSync(OUTPUT, { recursive: true })
        yield* Effect.promise(() => page.screenshot({ path: `${OUTPUT}status-page.png`, fullPage: true }))
        assert.isTrue(existsSync(`${OUTPUT}status-page.png`))
        // The charts alone, at the browser's scale, to look at closely.
        yield* Effect.promise(() => page.locator("#glance").screenshot({ path: `${OUTPUT}status-page-charts.png` }))

        const text = yield* Effect.promise(() => page.locator("body").innerText())
        // The page leads with the connections' summary.
        const summary = yield* Effect.promise(() => page.locator("#summary").innerText())
        assert.match(
          summary,
          /^1 connection\(s\): [01] healthy · 0 late · 0 failing · 0 needing re-authorization · [01] not synced yet$/
        )
        assert.isBelow(text.indexOf(summary), text.indexOf("CONNECTIONS"))
        for (const resource of Object.keys(report.resources)) assert.include(text, resource)
        assert.match(text, /Webhook inbox: .*processed \d+.*dead 1|Webhook inbox: .*dead 1/)
        assert.isAtLeast(yield* Effect.promise(() => page.locator(".bar > span").count()), 1, "a budget bar")
        // The dead delivery with its reason; the refused write under the name the user typed, shown
        // as text and never run.
        assert.include(text, "msg_status_page_poison")
        assert.include(text, `${HTML_LOOKING} Example`)
        assert.strictEqual(
          yield* Effect.promise(() => page.locator("img, script").count()),
          0,
          "no markup from user data"
        )
        assert.isUndefined(
          yield* Effect.promise(() => page.evaluate(() => (globalThis as { __injected?: number }).__injected))
        )
        assert.deepStrictEqual(problems, [], "no console errors")

        // The charts, each drawn with data, with words beside the colours.
        const count = (selector: string) => Effect.promise(() => page.locator(selector).count())
        const textOf = (selector: string) => Effect.promise(() => page.locator(selector).innerText())
        assert.isBelow(text.indexOf("AT A GLANCE"), text.indexOf("CONNECTIONS"), "the charts come first")
        assert.isAtLeast(yield* count("figure.chart-budget"), 1, "a chart per bucket")
        assert.isAtLeast(yield* count("figure.chart-budget rect.req"), 1, "requests per minute drawn")
        const budget = yield* Effect.promise(() => page.locator("figure.chart-budget").first().innerHTML())
        assert.match(budget, /limit [\d,]+/, "against the limit (a line, or a word when far above)")
        assert.include(budget, "counted")
        assert.isAtLeast(yield* count("figure.chart-events rect.received"), 1, "events received")
        assert.isAtLeast(yield* count("figure.chart-events rect.applied"), 1, "events applied")
        assert.strictEqual(yield* count("figure.chart-events polyline.lag"), 1, "their lag")
        assert.isAtLeast(yield* count("figure.chart-freshness rect.fresh"), 1, "a freshness bar")
        const freshness = yield* textOf("figure.chart-freshness")
        assert.match(freshness, /businesses[\s\S]*(ok|due|late) · read .* ago by poll:businesses/)
        assert.include(freshness, "on events")
        assert.isAtLeast(yield* count("figure.chart-runs rect.tick"), 1, "run ticks")
        assert.include(yield* textOf("figure.chart-runs"), "poll:businesses")
        // "3 min ago", the exact time on hover.
        const times = yield* count("time[title]")
        assert.isAtLeast(times, 1)
        assert.match(
          (yield* Effect.promise(() => page.locator("time[title]").first().getAttribute("title"))) ?? "",
          /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d/
        )
      }).pipe(Effect.scoped),
    // A daemon's first sync, a processed delivery and Chromium: past the default minute on a busy machine.
    120_000
  )
})
