/**
 * The chaos suite: `npm run test:chaos -- [--seed S] [--minutes M] [--replicas R] [--no-docs]
 * [--connections N [--overlap X]]`.
 *
 * Proves the promise a firm buys: after any mix of failures, left alone for a while, the warehouse
 * equals the CRM and every write went out exactly once. For `M` minutes (default 2), `R` (default
 * 3) `crm-sync run` replicas share one PostgreSQL behind a load balancer while the bundled sandbox
 * (in this process) plays the CRM's users on every resource, switches its faults on at random and
 * delivers its webhooks; rows are queued in the outbox; every few seconds a replica is killed with
 * SIGKILL and restarted; once the PostgreSQL server itself is stopped and started; once a
 * `crm-sync backfill` is started beside the daemons and killed half-way. Then the faults and the
 * activity stop, the sender's retries drain, one `crm-sync reconcile` runs, and the verdict
 * (verdict.ts) compares everything. Every random choice comes from the seed, which is printed
 * first; a failing run prints the command that repeats it. (The interleaving of processes is the
 * operating system's: a seed repeats the same world and the same faults, not the same timing.)
 *
 * `--connections N` (many-connections mode): the sandbox is one firm of N advisors and four books,
 * each advisor seeing a share `X` of them (default 0.5, consecutive, so their books overlap), and
 * the config adds a personal-token connection per advisor beside the OAuth one (which alone gets
 * webhooks and writes). The same world, faults, kills and verdict, whose listings are then every
 * connection's; before the reconciliation it waits (bounded) for every connection's first runs.
 * Its figures are not written to the docs.
 */
import { Context, Effect, Exit, Layer, Scope } from "effect"
import { randomBytes } from "node:crypto"
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { loadavg, tmpdir } from "node:os"
import { join } from "node:path"
import { UntypedEventTypes } from "../../src/crm/Events.ts"
import { Sandbox } from "@crm-sync/sandbox"
import { userTokens } from "@crm-sync/sandbox/testing"
import { EVENT_TYPES } from "@crm-sync/sandbox"
import { recordFigures } from "../bench/figures.ts"
import { command, exited, sleep, startBalancer, startDatabase, startReplicas } from "./cluster.ts"
import { FIRST_RUNS, firstRunsLeft, judge, judgeEvents, warehouseQuery } from "./verdict.ts"
import { makeActivity, makeRng, outboxRow, randomFault } from "./world.ts"

const flag = (name: string, fallback: number) => {
  const index = process.argv.indexOf(`--${name}`)
  const value = index === -1 ? undefined : Number(process.argv[index + 1])
  return value === undefined || Number.isNaN(value) ? fallback : value
}
const seed = flag("seed", 20261125)
const minutes = flag("minutes", 2)
const replicaCount = flag("replicas", 3)
/** Many-connections mode: this many advisors of one firm, each a personal-token connection (0: off). */
const advisorCount = flag("connections", 0)
/** The share of the firm's books each advisor sees (sandbox option `overlap`). */
const overlap = flag("overlap", 0.5)
const many = advisorCount > 0
const writeDocs = !process.argv.includes("--no-docs") && !many
const reproduce =
  `npm run test:chaos -- --seed ${seed} --minutes ${minutes} --replicas ${replicaCount}` +
  (many ? ` --connections ${advisorCount} --overlap ${overlap}` : "")
console.log(
  `chaos: seed ${seed}, ${minutes} minute(s), ${replicaCount} replicas` +
    (many ? `, ${advisorCount} advisors' connections (overlap ${overlap})` : "")
)

const secret = () => `whsec_${randomBytes(24).toString("base64")}`
const endpoints = [
  { name: "default", secret: secret(), eventType: undefined },
  { name: "client-created", secret: secret(), eventType: "client.created" },
  { name: "client-updated", secret: secret(), eventType: "client.updated" },
  { name: "prospect-created", secret: secret(), eventType: "prospect.created" }
] as const

/** What the all-types endpoint receives: every event that names its own type. */
const typedEventTypes = EVENT_TYPES.filter((type) => !(UntypedEventTypes as ReadonlyArray<string>).includes(type))

const rng = makeRng(seed)
/**
 * One stream per loop, each from the seed, so that how the loops interleave (the operating
 * system's timing) does not change what any of them draws: the users' changes, the faults, the
 * firm's writes, the kills, the database's downtime, the backfill's life.
 */
const streams = {
  activity: makeRng(seed + 1),
  faults: makeRng(seed + 2),
  outbox: makeRng(seed + 3),
  kills: makeRng(seed + 4),
  database: makeRng(seed + 5),
  backfill: makeRng(seed + 6)
}
/** The CRM's clock against crm-sync's: up to 2 minutes either way (the intake accepts 5). */
const clockSkewMs = rng.int(240_001) - 120_000
console.log(`chaos: the CRM's clock runs ${(clockSkewMs / 1000).toFixed(3)} s ${clockSkewMs < 0 ? "behind" : "ahead"}`)
const dir = mkdtempSync(join(tmpdir(), "crm-sync-chaos-"))
const logDir = join(dir, "logs")
mkdirSync(logDir)
const durationMs = minutes * 60_000
/** When each replica was killed (this process's clock; the sandbox's request log is `clockSkewMs` off it). */
const killedAt: Array<number> = []
const figures: Record<string, number> = {
  clock_skew_ms: clockSkewMs,
  kills: 0,
  restarts: 0,
  database_restarts: 0,
  faults: 0,
  outbox_rows: 0
}
const log = (line: string) => console.log(`chaos ${((Date.now() - startedAt) / 1000).toFixed(1)}s: ${line}`)
let startedAt = Date.now()

// --- the CRM ---------------------------------------------------------------------------------
const scope = await Effect.runPromise(Scope.make())
const sandboxContext = await Effect.runPromise(
  Layer.buildWithScope(
    Sandbox.layer({
      seed,
      records: 800,
      window: "10 seconds",
      debounce: "2 seconds",
      logSize: 1_000_000,
      webhookRetrySchedule: [
        "1 second",
        "2 seconds",
        "3 seconds",
        "5 seconds",
        "5 seconds",
        "10 seconds",
        "10 seconds",
        "15 seconds",
        "20 seconds",
        "30 seconds"
      ],
      webhookReorderHold: "1 second",
      clockSkew: clockSkewMs,
      // which records each listing served, for the verdict's history check (seen.ts)
      recordServed: true,
      // many connections: one firm of advisors whose books overlap, each with a personal token
      ...(many ? { companies: 1, usersPerCompany: advisorCount, booksPerCompany: 4, overlap, userTokens: true } : {})
    }),
    scope
  )
)
const sandbox = Context.get(sandboxContext, Sandbox)
const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)
const { credentials, admin } = sandbox
const state = await run(admin.state)
// The books the connection's grant reaches: the user's, in the company it authorized.
const books = state.books
  .filter((book) => book.user_ids.includes(credentials.userId) && book.company_id === credentials.companyId)
  .map((book) => book.id)
const grant = await run(
  admin.connect({ clientId: credentials.oauthClientId, userId: credentials.userId, companyId: credentials.companyId })
)
/** The advisors' personal-token connections (many-connections mode), beside the OAuth one. */
const advisors = many
  ? (await run(userTokens(admin)))
      .filter((token) => token.company_id === credentials.companyId)
      .slice(0, advisorCount)
      .map((token, i) => ({
        name: `advisor-${String(i + 1).padStart(3, "0")}`,
        token: token.token,
        user: `${token.user_id}/${token.company_id}`
      }))
  : []
if (advisors.length < advisorCount) throw new Error(`only ${advisors.length} advisors' tokens`)

// --- crm-sync --------------------------------------------------------------------------------
const databasePassword = randomBytes(12).toString("hex")
const database = await startDatabase(dir, databasePassword)
const encryptionKey = randomBytes(32).toString("base64")
const adminToken = randomBytes(16).toString("hex")
const configFile = join(dir, "crm-sync.json")
writeFileSync(
  configFile,
  JSON.stringify({
    connections: [
      {
        name: "chaos",
        base_url: sandbox.baseUrl,
        credential: "oauth",
        token: grant.access_token,
        limits: { window: "10 seconds" }
      },
      ...advisors.map((advisor) => ({
        name: advisor.name,
        base_url: sandbox.baseUrl,
        credential: "personal",
        token: advisor.token,
        limits: { window: "10 seconds" }
      }))
    ],
    webhooks: {
      lease_timeout: "15 seconds",
      endpoints: endpoints.map((endpoint) => ({
        name: endpoint.name,
        secrets: [endpoint.secret],
        ...(endpoint.eventType === undefined ? {} : { event_type: endpoint.eventType })
      }))
    },
    schedules: { businesses: "5 seconds", crawl: "20 seconds", business_crawl: "20 seconds", reference: "60 seconds" },
    // Every run of the final reconciliation may spend the whole window: the verdict needs a whole pass.
    budget: { reconcile_share: 1 },
    // The world deletes far more than a firm does (a tenth of a small sandbox's businesses in a
    // minute); the mass-deletion guard has tests of its own.
    sync: { deletion_threshold: 0.5 },
    // A killed replica's claims are taken over after this (the default, 2 minutes, only slows the verdict).
    outbound: { max_attempts: 12, lease_timeout: "15 seconds" }
  })
)
const env = {
  CRM_SYNC_CONFIG: configFile,
  DATABASE_URL: database.url,
  CRM_SYNC_ENCRYPTION_KEY: encryptionKey,
  CRM_SYNC_ADMIN_TOKEN: adminToken,
  LOG_LEVEL: "info"
}
const migrate = command(["migrate"], env, join(logDir, "migrate.log"))
if ((await exited(migrate)) !== 0) throw new Error(`crm-sync migrate failed: see ${logDir}/migrate.log`)

const replicas = await startReplicas(replicaCount, env, logDir)
const balancer = await startBalancer(replicas, (n) => Math.floor(Math.random() * n))
if (!(await replicas.ready(60_000))) throw new Error("the replicas did not become ready")

// The CRM's side: four endpoints at the balancer, and the subscription.
for (const endpoint of endpoints) {
  await run(
    admin.registerEndpoint({
      clientId: credentials.oauthClientId,
      url: `${balancer.url}/webhooks/${endpoint.name}`,
      secret: endpoint.secret,
      eventTypes: endpoint.eventType === undefined ? typedEventTypes : [endpoint.eventType]
    })
  )
}
const subscribed = await fetch(`${sandbox.baseUrl}/v1/webhook_subscription`, {
  method: "POST",
  headers: { authorization: `Bearer ${grant.access_token}` }
})
if (!subscribed.ok) throw new Error(`subscribe: ${subscribed.status}`)

// --- the run ---------------------------------------------------------------------------------
startedAt = Date.now()
const until = startedAt + durationMs
const activity = makeActivity(sandbox, streams.activity, books)
const outboxRows: Array<{ id: number; valid: boolean; marker: string; operation: string }> = []

const insertOutbox = async (n: number) => {
  const row = outboxRow(streams.outbox, books, `Chaos-${seed}-${n}`)
  const client = database.client()
  try {
    await client.connect()
    const result = await client.query(
      "INSERT INTO crm_sync.outbox (connection, operation, payload) VALUES ('chaos', $1, $2) RETURNING id",
      [row.operation, JSON.stringify(row.payload)]
    )
    outboxRows.push({
      id: Number(result.rows[0].id),
      valid: row.valid,
      marker: `Chaos-${seed}-${n}`,
      operation: row.operation
    })
  } catch {
    // The database is being restarted: this write was never queued.
  } finally {
    await client.end().catch(() => {})
  }
}

const loops = [
  // The CRM's users.
  (async () => {
    while (Date.now() < until) {
      await activity.step()
      await sleep(100 + streams.activity.int(150))
    }
  })(),
  // Faults.
  (async () => {
    while (Date.now() < until) {
      await sleep(2_000 + streams.faults.int(3_000))
      const fault = randomFault(streams.faults)
      const added = await run(Effect.result(admin.addFault(fault as never)))
      if (added._tag === "Success") figures.faults! += 1
    }
  })(),
  // The firm's writes.
  (async () => {
    let n = 0
    while (Date.now() < until) {
      await sleep(500 + streams.outbox.int(1_000))
      await insertOutbox(n++)
    }
  })(),
  // Kills.
  (async () => {
    while (Date.now() < until) {
      await sleep(3_000 + streams.kills.int(4_000))
      if (Date.now() >= until) break
      const victim = replicas.replicas[streams.kills.int(replicas.replicas.length)]!
      if (victim.process === undefined) continue
      killedAt.push(Date.now())
      await replicas.kill(victim)
      log(`replica ${victim.index} killed`)
      figures.kills! += 1
      await sleep(300 + streams.kills.int(2_000))
      replicas.start(victim)
      figures.restarts! += 1
    }
  })(),
  // The database, once, while deliveries arrive.
  (async () => {
    await sleep(durationMs * 0.45)
    log("PostgreSQL: stop")
    await database.restart(2_000 + streams.database.int(3_000))
    figures.database_restarts! += 1
    log("PostgreSQL: started again")
  })(),
  // A backfill beside the daemons, killed half-way.
  (async () => {
    await sleep(durationMs * 0.2)
    const backfill = command(["backfill"], env, join(logDir, "backfill.log"))
    await sleep(3_000 + streams.backfill.int(3_000))
    backfill.kill("SIGKILL")
    await exited(backfill)
    figures.backfill_killed = 1
    log("backfill killed")
  })()
]
await Promise.all(loops)
const activityStoppedAt = new Date()
figures.outbox_rows = outboxRows.length
log(`faults and activity stop (${Object.values(activity.counts).reduce((a, b) => a + b, 0)} changes)`)

// --- settling --------------------------------------------------------------------------------
// How many first reads of a transcript changed twice were caught and answered late (world.ts).
figures.transcript_reads_answered_late = (await run(admin.faults)).filter(
  (fault) => fault.id.startsWith("late-transcript-") && fault.fired > 0
).length
await run(admin.clearFaults)
// A replica that exited on its own (started while PostgreSQL was down, it cannot connect and
// exits) is started again, as its supervisor would.
for (const replica of replicas.replicas)
  if (replica.process === undefined || replica.process.exitCode !== null) replicas.start(replica)
await replicas.ready(60_000)
await run(admin.flushDebounce)
const settled = await waitForQuiet()
log(settled ? "deliveries and outbox settled" : "deliveries or outbox did NOT settle within the bound")
if (many) log(`first runs and two crawls since: ${await waitForFirstRuns()} pair(s) not done`)
// What the events did on their own, before anything repairs it.
const beforeReconcile = await judgeEvents(sandbox, warehouseQuery(database), activity.silent())
log(`events judged before the reconciliation: ${beforeReconcile.mismatches.length} mismatch(es)`)
// One reconciliation, as a firm's nightly job would run it.
const reconcile = command(["reconcile"], env, join(logDir, "reconcile.log"))
const reconcileCode = await exited(reconcile)
log(`crm-sync reconcile exited ${reconcileCode}`)

const verdict = await judge({
  sandbox,
  killedAt,
  clockSkewMs,
  database,
  tokens: [grant.access_token, ...advisors.map((advisor) => advisor.token)],
  connectionOf: (credential) =>
    credential === null
      ? undefined
      : credential.kind === "oauth"
        ? "chaos"
        : advisors.find((advisor) => advisor.user === `${credential.user_id}/${credential.company_id}`)?.name,
  ...(many ? { connections: ["chaos", ...advisors.map((advisor) => advisor.name)] } : {}),
  outboxRows,
  books,
  logs: readdirSync(logDir).map((name) => readFileSync(join(logDir, name), "utf8")),
  secrets: {
    "the OAuth access token": grant.access_token,
    "the OAuth refresh token": grant.refresh_token ?? "",
    "the encryption key": encryptionKey,
    "the admin token": adminToken,
    "the database password": databasePassword,
    ...Object.fromEntries(advisors.map((advisor) => [`the personal token of ${advisor.name}`, advisor.token])),
    ...Object.fromEntries(endpoints.map((endpoint) => [`the signing secret of ${endpoint.name}`, endpoint.secret]))
  }
})

await replicas.stopAll()
await balancer.close()
await database.stop().catch(() => {})
await Effect.runPromise(Scope.close(scope, Exit.void))

verdict.mismatches.unshift(...beforeReconcile.mismatches.map((line) => `before the reconciliation: ${line}`))
const all = {
  ...figures,
  changes: Object.values(activity.counts).reduce((a, b) => a + b, 0),
  changes_refused: activity.refused(),
  // The scenes of world.ts, each a known hazard for one record.
  ...Object.fromEntries(
    Object.entries(activity.counts)
      .filter(([name]) => name.startsWith("scene."))
      .map(([name, count]) => [name.replace("scene.", "scene_"), count])
  ),
  webhook_proxy_502: balancer.figures().failed,
  reconcile_exit: reconcileCode ?? -1,
  ...verdict.figures,
  mismatches: verdict.mismatches.length
}
console.log("")
for (const [name, value] of Object.entries(all)) console.log(`  ${name.padEnd(32)} ${value}`)
// Counted, not failed: the order of client changes no receiver can recover (verdict.ts).
const inverted = [...new Set([...beforeReconcile.unrecoverable, ...verdict.inverted])]
if (inverted.length > 0) {
  console.log(
    "\nclient changes stored in the opposite order, their older one's attempts refused (docs/reliability.md):"
  )
  for (const line of inverted) console.log(`  - ${line}`)
}
if (verdict.mismatches.length > 0 || reconcileCode !== 0 || !settled) {
  console.log(`\nchaos: FAILED, ${verdict.mismatches.length} mismatch(es):`)
  for (const line of verdict.mismatches.slice(0, 50)) console.log(`  - ${line}`)
  console.log(`\nlogs kept in ${logDir}\nreproduce with: ${reproduce}`)
  process.exit(1)
}
console.log(`\nchaos: passed (seed ${seed})`)
if (writeDocs) {
  const load = loadavg()
    .map((value) => value.toFixed(1))
    .join(" / ")
  await recordFigures(
    "chaos",
    [
      `Seed ${seed}, ${minutes} minute(s), ${replicaCount} replicas; measured ${new Date().toISOString().slice(0, 10)} on this machine (2 CPUs, load average ${load}).`,
      "",
      "| figure | value |",
      "| --- | --- |",
      ...Object.entries(all).map(([name, value]) => `| ${name.replaceAll("_", " ")} | ${value} |`)
    ].join("\n")
  )
}
rmSync(dir, { recursive: true, force: true })
process.exit(0)

/**
 * Many-connections mode: waits (bounded) until every connection's first runs of every job have
 * succeeded and none's last finished run failed (a run failed by the faults is run again on its
 * schedule once they stop), and every connection's crawls have read each listing whole twice since
 * the activity stopped: a record deleted late is deleted only once no other connection still
 * tracks it (missed by two clean crawls of each), and the reconciliation keeps to that rule too.
 * Returns how many (connection, job) and (connection, listing) pairs are still not so.
 */
async function waitForFirstRuns(): Promise<number> {
  const names = ["chaos", ...advisors.map((advisor) => advisor.name)]
  const deadline = Date.now() + 180_000
  const query = warehouseQuery(database)
  let left = names.length * FIRST_RUNS.length
  while (Date.now() < deadline) {
    left = await Promise.all([
      firstRunsLeft(query, names),
      query<{ n: number }>(
        `SELECT count(*)::int AS n
         FROM unnest($1::text[]) AS c(connection),
              unnest(ARRAY['businesses', 'annuity_contracts', 'financial_accounts']) AS l(resource)
         WHERE (SELECT count(*) FROM crm_sync.crawl_runs r
                WHERE r.connection = c.connection AND r.resource = l.resource
                  AND r.status = 'complete' AND r.started_at > $2) < 2`,
        [names, activityStoppedAt]
      )
    ]).then(
      ([pairs, crawls]) => pairs.length + (crawls[0]?.n ?? 0),
      () => left
    )
    if (left === 0) return 0
    await sleep(2_000)
  }
  return left
}

/** Waits (bounded) until the sender has nothing left to retry, the inbox is applied and the outbox settled. */
async function waitForQuiet(): Promise<boolean> {
  const deadline = Date.now() + 240_000
  let quietSince = 0
  let lastReport = Date.now()
  while (Date.now() < deadline) {
    const deliveries = await run(admin.deliveries())
    const latest = new Map<string, string>()
    for (const delivery of deliveries) latest.set(`${delivery.message_id}/${delivery.endpoint_id}`, delivery.outcome)
    const retrying = [...latest.values()].filter((outcome) => outcome === "retrying").length
    const client = database.client()
    let open = 1
    try {
      await client.connect()
      const result = await client.query(`
        SELECT (SELECT count(*) FROM crm_sync.webhook_inbox WHERE status IN ('pending', 'failed'))
             + (SELECT count(*) FROM crm_sync.outbox WHERE status IN ('pending', 'in_flight')) AS n`)
      open = Number(result.rows[0].n)
    } catch {
      open = 1
    } finally {
      await client.end().catch(() => {})
    }
    if (Date.now() - lastReport > 10_000) {
      lastReport = Date.now()
      log(`settling: ${retrying} deliveries to retry, ${open} inbox/outbox rows open`)
    }
    if (retrying === 0 && open === 0) {
      if (quietSince === 0) quietSince = Date.now()
      // Quiet for a while: the debounce and the reorder hold have let everything go.
      if (Date.now() - quietSince > 5_000) return true
    } else {
      quietSince = 0
    }
    await sleep(1_000)
  }
  return false
}
