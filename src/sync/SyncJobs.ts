/**
 * The read-sync jobs of `crm-sync run`, for every configured connection: the business poll, the
 * crawls of annuity contracts and financial accounts, the business crawl (the only way business
 * deletions show) and the reference refresh. The daemon runs them, with the jobs it adds (the
 * webhooks' subscription check, composed in cli/DaemonJobs.ts so that sync never imports webhooks),
 * on one scheduler (`syncJobsWith`; Scheduler.ts: a fixed pool of `sync.workers` workers, most
 * overdue first) that never dies of a job's failure; every run is a row in `crm_sync.job_runs`,
 * taken under the resource's lease.
 */
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { SqlClient } from "effect/sql/SqlClient"
import { AppConfig } from "../config/AppConfig.ts"
import { CrmClient, type CrmClientShape } from "../crm/CrmClient.ts"
import { Warehouse } from "../warehouse/Warehouse.ts"
import { BusinessPoller } from "./BusinessPoller.ts"
import { CrawlRuns } from "./CrawlRuns.ts"
import { Cursors } from "./Cursors.ts"
import { businessCrawlLease, JobLease, resourceLease } from "./JobLease.ts"
import { type JobOutcome, JobRuns, ORPHANED } from "./JobRuns.ts"
import { type CrawlResource, PageCrawler } from "./PageCrawler.ts"
import { ReferenceSync } from "./ReferenceSync.ts"
import { runScheduler, type ScheduledJob } from "./Scheduler.ts"
import { toSyncError } from "./SyncError.ts"

/** How often the daemon looks for runs whose holder died (see `OrphanSweepLive`). */
const ORPHAN_SWEEP_EVERY = Duration.seconds(30)

/** The job names recorded in `crm_sync.job_runs`. */
export const JobNames = {
  poll: "poll:businesses",
  crawl: (resource: CrawlResource) => `crawl:${resource}`,
  reference: "reference",
  subscription: "subscription",
  backfill: (resource: string) => `backfill:${resource}`
} as const

/** Every service of src/sync, given what the rest of the program provides (database, warehouse, CRM client). */
export const SyncServicesLive = Layer.mergeAll(BusinessPoller.layer, ReferenceSync.layer).pipe(
  Layer.provideMerge(PageCrawler.layer),
  Layer.provideMerge(Layer.mergeAll(CrawlRuns.layer, Cursors.layer, JobRuns.layer, JobLease.layer))
)

/** One client per configured connection (the config was validated when it was loaded). */
export const clients = Effect.gen(function* () {
  const config = yield* AppConfig
  return yield* Effect.forEach(config.connections, (connection) => CrmClient.make(connection.name).pipe(Effect.orDie))
})

const pollJob = (client: CrmClientShape, interval: Duration.Duration) =>
  Effect.gen(function* () {
    const poller = yield* BusinessPoller
    const connection = client.connection.name
    return {
      job: JobNames.poll,
      connection,
      interval,
      lease: resourceLease(connection, "businesses"),
      alsoCounts: [],
      run: poller.poll(client).pipe(
        Effect.map((summary): JobOutcome => {
          const { crawl, ...rest } = summary
          return {
            requests: summary.requests,
            detail: crawl === undefined ? rest : { ...rest, crawl_run: crawl.runId }
          }
        })
      )
    } satisfies ScheduledJob
  })

const crawlJob = (client: CrmClientShape, resource: CrawlResource, interval: Duration.Duration) =>
  Effect.gen(function* () {
    const crawler = yield* PageCrawler
    const connection = client.connection.name
    return {
      job: JobNames.crawl(resource),
      connection,
      interval,
      lease: resourceLease(connection, resource),
      alsoCounts: [JobNames.backfill(resource)],
      run: crawler
        .crawl(client, resource, { source: "crawl" })
        .pipe(Effect.map((summary): JobOutcome => ({ requests: summary.requests, detail: { ...summary } })))
    } satisfies ScheduledJob
  })

/**
 * The business crawl: the crawl's resumable, multi-run deletion by absence (and its mass-deletion
 * guard) for businesses, under its own lease so that the poll goes on while it reads. Before the
 * poll's first run (no cursor) it skips its turn: that run is a full crawl itself.
 */
const businessCrawlJob = (client: CrmClientShape, interval: Duration.Duration) =>
  Effect.gen(function* () {
    const crawler = yield* PageCrawler
    const cursors = yield* Cursors
    const connection = client.connection.name
    const crawl = crawler
      .crawl(client, "businesses", { source: "crawl" })
      .pipe(Effect.map((summary): JobOutcome => ({ requests: summary.requests, detail: { ...summary } })))
    return {
      job: JobNames.crawl("businesses"),
      connection,
      interval,
      lease: businessCrawlLease(connection),
      alsoCounts: [JobNames.backfill("businesses")],
      run: Effect.flatMap(
        cursors
          .get(connection, "businesses")
          .pipe(Effect.mapError(toSyncError(JobNames.crawl("businesses"), { connection }))),
        (cursor) =>
          Option.isNone(cursor)
            ? Effect.succeed<JobOutcome>({
                requests: 0,
                detail: { skipped: "the poll's first run crawls every business" }
              })
            : crawl
      )
    } satisfies ScheduledJob
  })

const referenceJob = (client: CrmClientShape, interval: Duration.Duration) =>
  Effect.gen(function* () {
    const reference = yield* ReferenceSync
    const connection = client.connection.name
    return {
      job: JobNames.reference,
      connection,
      interval,
      lease: resourceLease(connection, "reference"),
      alsoCounts: [JobNames.backfill("reference")],
      run: reference
        .refresh(client, { source: "crawl" })
        .pipe(Effect.map((summary): JobOutcome => ({ requests: summary.requests, detail: { ...summary } })))
    } satisfies ScheduledJob
  })

/** The business poll of a connection, every `schedules.businesses`. */
const pollJobs = (client: CrmClientShape) =>
  Effect.flatMap(AppConfig, (config) => Effect.all([pollJob(client, config.schedules.businesses)]))

/**
 * The annuity-contract and financial-account crawls of a connection, every `schedules.crawl`, and
 * its business crawl, every `schedules.business_crawl`.
 */
const crawlJobs = (client: CrmClientShape) =>
  Effect.flatMap(AppConfig, (config) =>
    Effect.all([
      crawlJob(client, "annuity_contracts", config.schedules.crawl),
      crawlJob(client, "financial_accounts", config.schedules.crawl),
      businessCrawlJob(client, config.schedules.business_crawl)
    ])
  )

/** The reference refresh of a connection (me, books, users, teams, project templates), every `schedules.reference`. */
const referenceJobs = (client: CrmClientShape) =>
  Effect.flatMap(AppConfig, (config) => Effect.all([referenceJob(client, config.schedules.reference)]))

/** What making a connection's jobs needs. */
export type JobServices = AppConfig | BusinessPoller | PageCrawler | Cursors | ReferenceSync | SqlClient

export type JobsOf = (client: CrmClientShape) => Effect.Effect<ReadonlyArray<ScheduledJob>, never, JobServices>

/** A scheduler (Scheduler.ts: one pool of `sync.workers`) of the jobs `kinds` make for every connection. */
const scheduled = (...kinds: ReadonlyArray<JobsOf>) =>
  Layer.effectDiscard(
    Effect.gen(function* () {
      const jobs = yield* Effect.forEach(yield* clients, (client) =>
        Effect.map(
          Effect.forEach(kinds, (kind) => kind(client)),
          (lists) => lists.flat()
        )
      )
      yield* runScheduler(jobs.flat())
    })
  ).pipe(Layer.provide(SyncServicesLive))

/** The business poll of every connection alone, on a scheduler of its own (tests). */
export const BusinessPollerLive = scheduled(pollJobs)

/** The crawls of every connection alone, on a scheduler of its own (tests). */
export const CrawlSchedulerLive = scheduled(crawlJobs)

/** The reference refresh of every connection alone, on a scheduler of its own (tests). */
export const ReferenceSchedulerLive = scheduled(referenceJobs)

/**
 * The daemon's one scheduler: every connection's poll, crawls and reference refresh, and the jobs
 * `extra` makes (the daemon adds the OAuth subscription check), on one pool of `sync.workers` workers.
 */
export const schedulerWith = (extra: ReadonlyArray<JobsOf>) => scheduled(pollJobs, crawlJobs, referenceJobs, ...extra)

/**
 * One sweep for runs whose holder died: every lease that `running` runs were taken under is tried;
 * one nobody holds (the holder was killed, or its database session was lost) is taken for a moment
 * to mark its runs `interrupted`. Returns how many job runs it closed.
 */
export const sweepOrphans = Effect.gen(function* () {
  const leases = yield* JobLease
  const jobRuns = yield* JobRuns
  const crawlRuns = yield* CrawlRuns
  let closed = 0
  for (const lease of yield* jobRuns.runningLeases) {
    const swept = yield* leases.tryRun(
      lease,
      Effect.tap(jobRuns.closeOrphans(lease), () => crawlRuns.closeOrphans(lease, ORPHANED))
    )
    if (Option.isSome(swept) && swept.value > 0) {
      closed += swept.value
      yield* Effect.logWarning("sync: runs of a process that is gone marked interrupted; their jobs resume them").pipe(
        Effect.annotateLogs({ lease, runs: swept.value })
      )
    }
  }
  return closed
})

/**
 * The daemon's orphan sweep, every 30 s: a replica killed mid-crawl (or cut off from the database)
 * leaves its runs `running`; once its lease lapses they are marked `interrupted`, and the job's
 * next turn (on any replica) resumes the crawl where it stopped.
 */
export const OrphanSweepLive = Layer.effectDiscard(
  Effect.forkScoped(
    Effect.forever(
      Effect.andThen(
        Effect.sleep(ORPHAN_SWEEP_EVERY),
        sweepOrphans.pipe(
          Effect.catchCause((cause) =>
            Cause.hasInterruptsOnly(cause)
              ? Effect.failCause(cause)
              : Effect.logDebug("sync: orphan sweep failed; trying again shortly", cause)
          )
        )
      )
    )
  )
).pipe(Layer.provide(SyncServicesLive))

/**
 * One prune of the job history: the runs older than `sync.history_retention` (JobRuns.prune); and,
 * unless `history.retention` is `forever`, the record versions that ended before it (crm_history).
 */
export const pruneHistory = Effect.gen(function* () {
  const config = yield* AppConfig
  const jobRuns = yield* JobRuns
  const deleted = yield* jobRuns.prune(config.sync.history_retention)
  if (deleted > 0) yield* Effect.logInfo("sync: job history pruned").pipe(Effect.annotateLogs({ runs: deleted }))
  const retention = config.history.retention
  if (retention !== "forever") {
    const versions = yield* Warehouse.use((warehouse) => warehouse.pruneHistory(retention))
    if (versions > 0) yield* Effect.logInfo("sync: record history pruned").pipe(Effect.annotateLogs({ versions }))
  }
  return deleted
})

/** The daemon's prune of the job history, every `schedules.prune` (a failure is tried again then). */
export const HistoryPruneLive = Layer.effectDiscard(
  Effect.gen(function* () {
    const config = yield* AppConfig
    const once = pruneHistory.pipe(
      Effect.catchCause((cause) =>
        Cause.hasInterruptsOnly(cause)
          ? Effect.failCause(cause)
          : Effect.logWarning("sync: job history prune failed; trying again at the next", cause)
      )
    )
    yield* Effect.forkScoped(Effect.forever(Effect.andThen(once, Effect.sleep(config.schedules.prune))))
  })
).pipe(Layer.provide(SyncServicesLive))

/**
 * All read-sync jobs of the daemon with the jobs `extra` makes (one scheduler), the orphan sweep and
 * the history prune.
 */
export const syncJobsWith = (extra: ReadonlyArray<JobsOf>) =>
  Layer.mergeAll(schedulerWith(extra), OrphanSweepLive, HistoryPruneLive)
