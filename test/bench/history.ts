/**
 * History benchmark: `npm run bench -- history [--quick] [--no-docs]` (`--accounts N` to choose).
 *
 * What the history (crm_history, docs/history.md) costs, with history on and off in the same run,
 * each in a fresh database on one embedded PostgreSQL:
 * - client events applied per second by the real `EventProcessor`: E `client.updated` deliveries
 *   (1,000 clients, each delivery a new `tier`, signed times increasing) stored in the webhook inbox
 *   as the intake stores them (`WebhookInbox.insert`, rows of a fixed-type endpoint), then drained
 *   (`processor.drain`, batches of 500, two at a time); checked: every client ends at its last tier;
 * - the warehouse's writes alone: a crawl of N financial accounts as the crawl writes it
 *   (`Warehouse.write` of pages of 100, ten pages a transaction, a `KnownReferences` ledger),
 *   records written per second; then a second crawl in which 10% of the accounts changed, which
 *   must add exactly N/10 versions; and `Warehouse.writeClients` in batches of 100 deliveries
 *   (the processor's batch write without the inbox and the decoding), to show where its cost goes;
 * - as-of reads on a history of N accounts × 30 daily versions (made with SQL, day after day as
 *   the warehouse appends them): one household's daily balances over a year, and every account at
 *   one date (with the indexes its plan reads).
 * The crawl's CRM side (HTTP, decoding pages) is left out here: crawl.ts backfills from the sandbox
 * with history off and on. Targets: on ≥ 90% of off for the crawl and for the events the processor
 * applies, household year ≤ 50 ms, all accounts at one date ≤ 2 s. Figures go into docs/history.md between the `bench:history` markers.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import { readFileSync } from "node:fs"
import { Reactivity } from "effect/reactivity"
import { SqlClient } from "effect/sql/SqlClient"
import { mkdtempSync, rmSync } from "node:fs"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { availableParallelism, tmpdir } from "node:os"
import { join } from "node:path"
import { acquireEmbeddedDatabase } from "../../src/warehouse/EmbeddedDatabase.ts"
import { HistorySettings } from "../../src/warehouse/History.ts"
import { migrate } from "../../src/warehouse/Migrations.ts"
import { combine, KnownReferences, prepare, Warehouse } from "../../src/warehouse/Warehouse.ts"
import { EventProcessor } from "../../src/webhooks/EventProcessor.ts"
import { TranscriptReader } from "../../src/webhooks/TranscriptReader.ts"
import { type InboxRow, WebhookInbox } from "../../src/webhooks/WebhookInbox.ts"
import { recordFigures } from "./figures.ts"

const argument = (name: string) => {
  const index = process.argv.indexOf(name)
  return index < 0 ? undefined : process.argv[index + 1]
}

const QUICK = process.argv.includes("--quick")
/** Only the as-of reads (the writes are not measured): `--reads-only`. */
const READS_ONLY = process.argv.includes("--reads-only")
const ACCOUNTS = Number(argument("--accounts") ?? (QUICK ? 20_000 : 1_000_000))
const EVENTS = Math.min(ACCOUNTS, QUICK ? 10_000 : 100_000)
/** `client.updated` deliveries the EventProcessor drains (`--deliveries N` to choose). */
const DELIVERIES = Number(argument("--deliveries") ?? (QUICK ? 5_000 : 20_000))
const CLIENTS = 1_000
const PAGE = 100
const PAGES_PER_WRITE = 10
const DAYS = 30
const ACCOUNTS_PER_HOUSEHOLD = 4

const pad = (n: number) => String(n).padStart(8, "0")

/** Account `i` as the CRM lists it; `version` changes its balance and updated_at. */
const account = (i: number, version: number) => ({
  id: `fa_${pad(i)}`,
  name: `Account ${i}`,
  institution_name: "Pinecrest Custody",
  account_number: "****5521",
  notes: null,
  other_tax_advantaged_type_label: null,
  book_id: "book_1",
  household_id: `hh_${pad(Math.floor(i / ACCOUNTS_PER_HOUSEHOLD))}`,
  account_type: "brokerage",
  tax_advantaged_type: "taxable",
  balance_in_cents: 100_000 + i + version * 1000,
  balance_as_of: new Date(Date.UTC(2026, 0, 1 + version)).toISOString(),
  owner_ids: [`per_${i}`],
  custom_fields: { model_portfolio: "Growth 80/20" },
  created_at: "2022-08-30T12:00:00Z",
  updated_at: new Date(Date.UTC(2026, 0, 1 + version, 12)).toISOString()
})

const database = (adminUrl: string, name: string, history: boolean) =>
  Layer.unwrap(
    Effect.gen(function* () {
      const admin = yield* PgClient.make({ url: Redacted.make(adminUrl), maxConnections: 1 }).pipe(
        Effect.provide(Reactivity.layer)
      )
      yield* admin.unsafe(`CREATE DATABASE ${name}`)
      const url = new URL(adminUrl)
      url.pathname = `/${name}`
      return Warehouse.layer.pipe(
        Layer.provide(
          Layer.succeed(HistorySettings, {
            resources: new Set(history ? (["financial_accounts", "households", "clients"] as const) : [])
          })
        ),
        Layer.provideMerge(Layer.effectDiscard(Effect.asVoid(migrate))),
        Layer.provideMerge(PgClient.layer({ url: Redacted.make(url.toString()), maxConnections: 8 }))
      )
    })
  )

/** One crawl of every account at `version` (or, for the ids `changed` says, the next version). */
const crawl = (version: (i: number) => number) =>
  Effect.gen(function* () {
    const warehouse = yield* Warehouse
    const references = new KnownReferences()
    const started = performance.now()
    for (let first = 0; first < ACCOUNTS; first += PAGE * PAGES_PER_WRITE) {
      const pages = []
      for (let page = first; page < Math.min(ACCOUNTS, first + PAGE * PAGES_PER_WRITE); page += PAGE) {
        const records = []
        for (let i = page; i < Math.min(ACCOUNTS, page + PAGE); i++) records.push(account(i, version(i)))
        pages.push(prepare("financial_accounts", records))
      }
      const ledger = references.open()
      yield* warehouse.write(combine("financial_accounts", pages), { source: "crawl", known: ledger })
      ledger.settle()
    }
    return (performance.now() - started) / 1000
  })

/** EVENTS client.updated deliveries (a tier change each), in batches of 100. */
const clientEvents = Effect.gen(function* () {
  const warehouse = yield* Warehouse
  const started = performance.now()
  for (let first = 0; first < EVENTS; first += PAGE) {
    const deliveries = []
    for (let i = first; i < Math.min(EVENTS, first + PAGE); i++) {
      deliveries.push({
        record: { id: `cli_${pad(i % 1000)}`, name: `Client ${i % 1000}`, tier: `tier ${i}` },
        signedAt: new Date(Date.UTC(2026, 0, 1, 0, 0, 0, i)).toISOString(),
        changedFields: ["tier"]
      })
    }
    yield* warehouse.writeClients(deliveries, { source: "webhook" })
  }
  return (performance.now() - started) / 1000
})

const versions = Effect.gen(function* () {
  const sql = yield* SqlClient
  const [row] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM crm_history.financial_accounts`
  return row?.n ?? 0
})

// ---------------------------------------------------------------------------------------------
// Client events through the EventProcessor
// ---------------------------------------------------------------------------------------------

/** client.updated carries no event_type (spec §6.3): it arrives on an endpoint of that fixed type. */
const ENDPOINT = "client-updated"
const processorConfig = AppConfig.layerFrom({
  webhooks: {
    endpoints: [
      { name: ENDPOINT, secrets: [`whsec_${randomBytes(24).toString("base64")}`], event_type: "client.updated" }
    ]
  }
})

const NoTranscripts = Layer.succeed(
  TranscriptReader,
  TranscriptReader.of({ read: (_endpoint, meetingId) => Effect.succeed({ meeting_id: meetingId, transcript: null }) })
)

const clientUpdated = JSON.parse(
  readFileSync(new URL("../fixtures/events/client.updated.json", import.meta.url), "utf8")
) as { readonly client: Record<string, unknown> } & Record<string, unknown>

/** `set` tells the warm-up's deliveries (and clients) from the measured ones. */
const clientId = (set: string, i: number) => `cli_${set}${pad(i % CLIENTS)}`
const tierOf = (i: number) => `tier ${i}`

/** Delivery `i` as the intake stores it: client i % CLIENTS gets tier i, signed i seconds after the first. */
const inboxRow = (set: string, i: number): InboxRow => ({
  hookId: `msg_${set}${pad(i)}`,
  endpoint: ENDPOINT,
  eventType: "client.updated",
  body: new TextEncoder().encode(
    JSON.stringify({
      ...clientUpdated,
      client: { ...clientUpdated.client, id: clientId(set, i), tier: tierOf(i) },
      changed_fields: ["tier"]
    })
  ),
  // A hook-timestamp counts whole seconds.
  signedAt: Date.UTC(2026, 0, 1) + i * 1000,
  status: "pending",
  error: null
})

/** The intake's largest group-commit INSERT (InboxWriter's `maxBatch`). */
const INBOX_BATCH = 512

/** Deliveries drained before the measured ones, untimed, so that neither run pays for warming up. */
const WARM_UP = 1_000

/** `count` deliveries of `set` in the inbox, as the intake's group commits store them. */
const fillInbox = Effect.fnUntraced(function* (set: string, count: number) {
  const inbox = yield* WebhookInbox
  for (let first = 0; first < count; first += INBOX_BATCH) {
    const rows = []
    for (let i = first; i < Math.min(count, first + INBOX_BATCH); i++) rows.push(inboxRow(set, i))
    yield* inbox.insert(rows)
  }
})

const clientVersions = Effect.gen(function* () {
  const sql = yield* SqlClient
  const [row] = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM crm_history.clients_ended`
  return row?.n ?? 0
})

/** DELIVERIES rows in the inbox, then drained by the EventProcessor; only that drain is timed. */
const processedEvents = Effect.fnUntraced(function* (history: boolean) {
  const sql = yield* SqlClient
  const processor = yield* EventProcessor
  yield* fillInbox("warm_", WARM_UP)
  yield* processor.drain
  yield* fillInbox("", DELIVERIES)
  const before = yield* clientVersions
  const started = performance.now()
  const drained = yield* processor.drain
  const seconds = (performance.now() - started) / 1000
  // Every client must end at the tier of its last delivery, history or not.
  const clients = yield* sql<{ id: string; tier: string | null }>`SELECT id, tier FROM crm.clients`
  const tiers = new Map(clients.map((client) => [client.id, client.tier]))
  let wrong = 0
  for (let c = 0; c < Math.min(CLIENTS, DELIVERIES); c++) {
    const last = c + CLIENTS * Math.floor((DELIVERIES - 1 - c) / CLIENTS)
    if (tiers.get(clientId("", c)) !== tierOf(last)) wrong++
  }
  const versions = (yield* clientVersions) - before
  if (drained.processed !== DELIVERIES || wrong > 0 || (!history && versions > 0)) {
    return yield* Effect.die(
      new Error(
        `the processor processed ${drained.processed} of ${DELIVERIES} deliveries (${drained.unhandled} unhandled, ${drained.dead} dead, ${drained.failed} failed); ${wrong} clients not at their last tier; ${versions} versions kept`
      )
    )
  }
  return { seconds, versions }
})

/** Rounds of the processor's drain, off and on alternately, each in a fresh database; the best counts. */
const ROUNDS = Number(argument("--rounds") ?? 5)

type ProcessorFigures = Effect.Success<ReturnType<typeof processedEvents>>

const events = (adminUrl: string, history: boolean, round: number) =>
  Effect.scoped(
    Effect.gen(function* () {
      const figures = yield* processedEvents(history)
      console.error(
        `history ${history ? "on" : "off"}: the EventProcessor applied ${DELIVERIES.toLocaleString("en-US")} client.updated deliveries at ${number(DELIVERIES / figures.seconds)}/s (${figures.versions} versions)`
      )
      return figures
    }).pipe(
      Effect.provide(
        EventProcessor.layerWith({ workerId: "bench", batchSize: 500 }).pipe(
          Layer.provideMerge(Layer.mergeAll(WebhookInbox.layer, NoTranscripts, processorConfig)),
          Layer.provideMerge(database(adminUrl, `bench_history_events_${history ? "on" : "off"}_${round}`, history))
        )
      )
    )
  )

// ---------------------------------------------------------------------------------------------
// The warehouse's writes alone
// ---------------------------------------------------------------------------------------------

interface WriteFigures {
  readonly crawlSeconds: number
  readonly recrawlSeconds: number
  readonly added: number
  readonly eventsSeconds: number
}

const writes = (adminUrl: string, history: boolean) =>
  Effect.scoped(
    Effect.gen(function* () {
      console.error(`history ${history ? "on" : "off"}: crawling ${ACCOUNTS.toLocaleString("en-US")} accounts…`)
      const crawlSeconds = yield* crawl(() => 0)
      const before = yield* versions
      const recrawlSeconds = yield* crawl((i) => (i % 10 === 0 ? 1 : 0))
      const added = (yield* versions) - before
      const eventsSeconds = yield* clientEvents
      return { crawlSeconds, recrawlSeconds, added, eventsSeconds } satisfies WriteFigures
    }).pipe(Effect.provide(database(adminUrl, `bench_history_${history ? "on" : "off"}`, history)))
  )

/** Milliseconds of the best of three runs of a query. */
const timed = (query: Effect.Effect<unknown, unknown>) =>
  Effect.gen(function* () {
    let best = Infinity
    for (let round = 0; round < 3; round++) {
      const started = performance.now()
      yield* query
      best = Math.min(best, performance.now() - started)
    }
    return Math.round(best * 10) / 10
  })

/** What a plan (EXPLAIN's JSON) reads: the indexes of its scans, or whole tables. */
const scans = (plan: unknown): ReadonlyArray<string> => {
  if (typeof plan !== "object" || plan === null) return []
  if (Array.isArray(plan)) return plan.flatMap(scans)
  const node = plan as Record<string, unknown>
  const own =
    typeof node["Index Name"] === "string"
      ? [node["Index Name"]]
      : node["Node Type"] === "Seq Scan"
        ? [`all of ${String(node["Relation Name"])} (a sequential scan)`]
        : []
  return [...new Set([...own, ...Object.values(node).flatMap(scans)])]
}

/** A history of ACCOUNTS × DAYS daily versions, made with SQL, then the two as-of reads timed. */
const reads = (adminUrl: string) =>
  Effect.scoped(
    Effect.gen(function* () {
      const sql = yield* SqlClient
      console.error(`building ${ACCOUNTS.toLocaleString("en-US")} × ${DAYS} versions…`)
      // The ended versions loaded day after day (the order the rows' updates end them in) without
      // the secondary indexes, which are then built as the migrations define them; the last day's
      // versions are the rows themselves.
      const indexes = yield* sql<{ name: string; definition: string }>`
        SELECT indexname AS name, indexdef AS definition FROM pg_indexes
        WHERE schemaname = 'crm_history' AND tablename = 'financial_accounts_ended'
          AND indexname <> 'financial_accounts_pkey'`
      for (const index of indexes) yield* sql.unsafe(`DROP INDEX crm_history.${index.name}`)
      yield* sql.unsafe(`
        INSERT INTO crm.financial_accounts (id, household_id, balance_in_cents, updated_at, version_from, source, raw)
        SELECT 'fa_' || lpad(i::text, 8, '0'), 'hh_' || lpad((i / ${ACCOUNTS_PER_HOUSEHOLD})::text, 8, '0'),
               i * 100 + ${DAYS - 1}, timestamptz '2026-01-01' + ${DAYS - 1} * interval '1 day',
               timestamptz '2026-01-01' + ${DAYS - 1} * interval '1 day', 'crawl', '{}'
        FROM generate_series(0, ${ACCOUNTS - 1}) AS i`)
      yield* sql.unsafe(`
        INSERT INTO crm_history.financial_accounts_ended
          (id, valid_from, valid_to, deleted, household_id, balance_in_cents, updated_at, source, synced_at)
        SELECT 'fa_' || lpad(i::text, 8, '0'),
               timestamptz '2026-01-01' + d * interval '1 day', timestamptz '2026-01-01' + (d + 1) * interval '1 day',
               false, 'hh_' || lpad((i / ${ACCOUNTS_PER_HOUSEHOLD})::text, 8, '0'),
               i * 100 + d, timestamptz '2026-01-01' + d * interval '1 day', 'crawl', now()
        FROM generate_series(0, ${ACCOUNTS - 1}) AS i, generate_series(0, ${DAYS - 2}) AS d
        ORDER BY d, i`)
      yield* sql`SET maintenance_work_mem = '512MB'`
      for (const index of indexes) yield* sql.unsafe(index.definition)
      yield* sql`VACUUM ANALYZE crm_history.financial_accounts_ended`
      yield* sql`VACUUM ANALYZE crm.financial_accounts`
      const household = `hh_${pad(Math.floor(ACCOUNTS / 2 / ACCOUNTS_PER_HOUSEHOLD))}`
      const householdYear = yield* timed(
        sql`SELECT day, sum(balance_in_cents) AS balance
            FROM crm_history.financial_account_balances_daily
            WHERE financial_account_id IN (SELECT id FROM crm.financial_accounts WHERE household_id = ${household})
              AND day BETWEEN '2026-01-01' AND '2026-12-31'
            GROUP BY day ORDER BY day`
      )
      const allAtDate = yield* timed(
        sql`SELECT count(*), sum(balance_in_cents) FROM crm_history.financial_accounts_as_of('2026-01-15T00:00:00Z')`
      )
      const [explained] = yield* sql.unsafe<{ "QUERY PLAN": unknown }>(
        `EXPLAIN (FORMAT JSON) SELECT count(*), sum(balance_in_cents) FROM crm_history.financial_accounts_as_of('2026-01-15T00:00:00Z')`
      )
      return { householdYear, allAtDate, allAtDatePlan: scans(explained?.["QUERY PLAN"]) }
    }).pipe(Effect.provide(database(adminUrl, "bench_history_reads", true)))
  )

const main = Effect.gen(function* () {
  const folder = mkdtempSync(join(tmpdir(), "crm-sync-bench-history-"))
  yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(folder, { recursive: true, force: true })))
  const server = yield* acquireEmbeddedDatabase(folder)
  const adminUrl = Redacted.value(server.url)
  const processorOff: Array<ProcessorFigures> = []
  const processorOn: Array<ProcessorFigures> = []
  for (let round = 0; round < (READS_ONLY ? 0 : ROUNDS); round++) {
    processorOff.push(yield* events(adminUrl, false, round))
    processorOn.push(yield* events(adminUrl, true, round))
  }
  const off = READS_ONLY ? undefined : yield* writes(adminUrl, false)
  const on = READS_ONLY ? undefined : yield* writes(adminUrl, true)
  const timings = yield* reads(adminUrl)
  return { processor: { off: processorOff, on: processorOn }, off, on, timings }
})

const number = (n: number) => Math.round(n).toLocaleString("en-US")

const readsLine = (timings: {
  readonly householdYear: number
  readonly allAtDate: number
  readonly allAtDatePlan: ReadonlyArray<string>
}) =>
  `On a history of ${number(ACCOUNTS)} accounts × ${DAYS} daily versions (best of 3): one household's daily balances over a year ${timings.householdYear} ms (target ≤ 50 ms: ${timings.householdYear <= 50 ? "met" : "**not met**"}); every account at one date (\`financial_accounts_as_of\`) ${timings.allAtDate} ms (target ≤ 2 s: ${timings.allAtDate <= 2000 ? "met" : "**not met**"}). Indexes read: the series, crm.financial_accounts' household_id and the primary keys; as of a date, ${timings.allAtDatePlan.map((name) => (name.includes(" ") ? name : `\`${name}\``)).join(", ")}.`

const rate = (n: number, seconds: number) => n / seconds
const share = (a: number, b: number) => `${Math.round((a / b) * 100)}%`
const met = (ok: boolean) => (ok ? "met" : "**not met**")
const report = ({ processor, off, on, timings }: Effect.Success<typeof main>) => {
  if (off === undefined || on === undefined) {
    return [
      `Measured ${new Date().toISOString().slice(0, 10)} on this machine (${availableParallelism()} CPUs), embedded PostgreSQL, \`npm run bench -- history --reads-only\`:`,
      "",
      readsLine(timings)
    ].join("\n")
  }
  const crawlOff = rate(ACCOUNTS, off.crawlSeconds)
  const crawlOn = rate(ACCOUNTS, on.crawlSeconds)
  const recrawlOff = rate(ACCOUNTS, off.recrawlSeconds)
  const recrawlOn = rate(ACCOUNTS, on.recrawlSeconds)
  const eventsOff = rate(EVENTS, off.eventsSeconds)
  const eventsOn = rate(EVENTS, on.eventsSeconds)
  const appliedRates = (runs: ReadonlyArray<ProcessorFigures>) => runs.map((run) => rate(DELIVERIES, run.seconds))
  const appliedOff = Math.max(...appliedRates(processor.off))
  const appliedOn = Math.max(...appliedRates(processor.on))
  const versionsKept = (runs: ReadonlyArray<ProcessorFigures>) =>
    [...new Set(runs.map((run) => number(run.versions)))].join(" or ")
  return [
    `Measured ${new Date().toISOString().slice(0, 10)} on this machine (${availableParallelism()} CPUs), embedded PostgreSQL, \`npm run bench -- history${QUICK ? " --quick" : ""}\`, history off then on, each in a fresh database:`,
    "",
    "| | history off | history on | on ÷ off |",
    "|---|---|---|---|",
    `| events applied by the EventProcessor (/s) | ${number(appliedOff)} | ${number(appliedOn)} | ${share(appliedOn, appliedOff)} |`,
    `| writes alone: crawl of ${number(ACCOUNTS)} accounts (/s) | ${number(crawlOff)} | ${number(crawlOn)} | ${share(crawlOn, crawlOff)} |`,
    `| writes alone: second crawl, 10% changed (/s) | ${number(recrawlOff)} | ${number(recrawlOn)} | ${share(recrawlOn, recrawlOff)} |`,
    `| writes alone: \`writeClients\`, ${number(EVENTS)} events (/s) | ${number(eventsOff)} | ${number(eventsOn)} | ${share(eventsOn, eventsOff)} |`,
    "",
    `EventProcessor: ${number(DELIVERIES)} \`client.updated\` to ${number(CLIENTS)} clients from the inbox, after a warm-up, best of ${ROUNDS} rounds each; history on kept ${versionsKept(processor.on)} versions a round. Writes alone: the warehouse's batch writes (no HTTP, decoding or inbox; crawl.ts times the whole crawl). The second crawl added ${number(on.added)} versions (expected ${number(ACCOUNTS / 10)}: ${met(on.added === ACCOUNTS / 10)}).`,
    `History on ≥ 90% of off, events applied by the EventProcessor: ${met(appliedOn >= 0.9 * appliedOff)} (the crawl's target: crawl.ts, docs/performance.md).`,
    "",
    readsLine(timings)
  ].join("\n")
}

Effect.runPromise(Effect.scoped(main)).then(
  async (results) => {
    const text = report(results)
    console.log(`\n${text}\n`)
    await recordFigures("history", text, ["docs/history.md"])
    process.exit(0)
  },
  (error) => {
    console.error(error)
    process.exit(1)
  }
)
