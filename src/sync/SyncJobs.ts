/**
 * The read-sync jobs of `crm-sync run`, for every configured connection: the business poll, the
 * crawls of annuity contracts and financial accounts, the business crawl (the only way business
 * deletions show), the reference refresh and the subscription check. Each is a background loop
 * (`Layer.effectDiscard` with one `forkScoped` loop per job) that never dies of a job's failure;
 * every run is a row in `crm_sync.job_runs`, taken under the resource's lease.
 */
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as PubSub from "effect/PubSub"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql/SqlError"
import { AppConfig } from "../config/AppConfig.ts"
import { isDatabaseDefect } from "../warehouse/DatabaseCause.ts"
import { CrmClient, type CrmClientShape } from "../crm/CrmClient.ts"
import { Credentials } from "../crm/Credentials.ts"
import * as Metrics from "../observability/Metrics.ts"
import { BusinessPoller } from "./BusinessPoller.ts"
import { CrawlRuns } from "./CrawlRuns.ts"
import { Cursors } from "./Cursors.ts"
import { businessCrawlLease, JobLease, type LeaseError, resourceLease } from "./JobLease.ts"
import { describeFailure, type JobOutcome, JobRuns, ORPHANED } from "./JobRuns.ts"
import { type CrawlResource, PageCrawler } from "./PageCrawler.ts"
import * as Subscriptions from "../webhooks/Subscriptions.ts"
import { ReferenceSync } from "./ReferenceSync.ts"
import { type SyncError, toSyncError } from "./SyncError.ts"

/** After a failed run, the job is tried again after its interval or this, whichever is shorter. */
const RETRY_AFTER_FAILURE = Duration.minutes(10)
/**
 * When the database failed (it restarted, or is unreachable), the job asks again sooner: after 5 s,
 * doubling per failure in a row up to this, so that it resumes within a minute of its return.
 */
const RETRY_DATABASE_MAX = Duration.seconds(30)
/** When another process holds the job's lease, ask again after this (or the interval, if shorter). */
const RETRY_WHEN_BUSY = Duration.minutes(1)
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

interface ScheduledJob {
  readonly job: string
  readonly connection: string
  readonly interval: Duration.Duration
  readonly lease: string
  /** Other job names whose success also counts as a run of this one (a backfill's crawl). */
  readonly alsoCounts: ReadonlyArray<string>
  readonly run: Effect.Effect<JobOutcome, SyncError>
}

/** Milliseconds until the job is due (0 if it is, or never ran), on the database's clock. */
const dueIn = (job: ScheduledJob) =>
  Effect.flatMap(JobRuns, (jobRuns) => jobRuns.dueIn([job.job, ...job.alsoCounts], job.connection, job.interval))

/** Whether a job's failure was the database's (a restart, an outage), not the CRM's or a bug's. */
const isDatabaseFailure = (failure: SyncError | LeaseError | SqlError | Schema.SchemaError): boolean =>
  failure._tag === "SyncError" ? failure.reason._tag === "Database" : failure._tag !== "SchemaError"

/**
 * The loop of one job: wait until due, run under the lease, record, repeat; never fails.
 *
 * A job is due `interval` after its last successful run as `crm_sync.job_runs` records it (on the
 * database's clock), so a restarted daemon does not crawl again at once, and a run another replica
 * made counts. A due job runs under its resource's lease (JobLease), which is also where it is
 * asked once more whether it is still due (a replica may have just run it); when another process
 * holds the lease (another replica, a backfill) the turn is skipped and tried a minute later. A
 * failed run is retried after at most 10 minutes, or within 30 s when it was the database that
 * failed (a failed crawl resumes where it stopped).
 *
 * On SIGTERM the layer's scope closes and the loops are interrupted: a request in flight is
 * abandoned, the page being written commits (page writes are uninterruptible), the lease is
 * released, the job's row says `interrupted`, and an interrupted crawl resumes at the next start.
 */
const loop = (job: ScheduledJob) =>
  Effect.gen(function* () {
    const leases = yield* JobLease
    const jobRuns = yield* JobRuns
    const busyWait = Duration.min(job.interval, RETRY_WHEN_BUSY)
    const failureWait = Duration.min(job.interval, RETRY_AFTER_FAILURE)
    let databaseFailures = 0
    /** The wait after a database failure: 5 s, 10 s, 20 s, then RETRY_DATABASE_MAX. */
    const databaseWait = () => {
      databaseFailures += 1
      return Duration.min(Duration.seconds(5 * 2 ** Math.min(databaseFailures - 1, 3)), RETRY_DATABASE_MAX)
    }

    /** One turn; returns how long to wait before the next look at the schedule. */
    const turn = Effect.gen(function* () {
      // Due is asked again under the lease: another replica may have just run the job.
      const outcome = yield* Effect.result(
        leases.tryRun(
          job.lease,
          Effect.flatMap(dueIn(job), (due) =>
            due > 0
              ? Effect.succeed("not due" as const)
              : Effect.as(jobRuns.record(job.job, job.connection, job.run), "ran" as const)
          )
        )
      )
      if (outcome._tag === "Failure") {
        const wait = isDatabaseFailure(outcome.failure) ? databaseWait() : failureWait
        yield* Effect.logWarning("sync job failed; it will be tried again").pipe(
          Effect.annotateLogs({ error: outcome.failure.message, retry_in_seconds: Duration.toSeconds(wait) })
        )
        return wait
      }
      databaseFailures = 0
      if (outcome.success._tag === "None") {
        yield* Effect.logDebug("sync job: another process holds the lease; skipping this turn")
        return busyWait
      }
      return Duration.zero
    }).pipe(
      // A defect is a bug, but one bad run must not stop the job for the daemon's lifetime.
      Effect.catchCause((cause) =>
        Cause.hasInterruptsOnly(cause)
          ? Effect.failCause(cause)
          : isDatabaseDefect(cause)
            ? Effect.sync(databaseWait).pipe(
                Effect.tap((wait) =>
                  Effect.logWarning("sync job lost its database; it will be tried again").pipe(
                    Effect.annotateLogs({ error: describeFailure(cause), retry_in_seconds: Duration.toSeconds(wait) })
                  )
                )
              )
            : Effect.as(Effect.logError("sync job crashed; it will be tried again", cause), failureWait)
      )
    )

    while (true) {
      // The schedule lives in the database: while it cannot be read, ask again soon.
      const due = yield* dueIn(job).pipe(Effect.catch(() => Effect.sync(() => Duration.toMillis(databaseWait()))))
      if (due > 0) yield* Effect.sleep(Duration.millis(due))
      const wait = yield* turn
      if (Duration.isGreaterThan(wait, Duration.zero)) yield* Effect.sleep(wait)
    }
  }).pipe(Effect.annotateLogs({ job: job.job, connection: job.connection }))

/** One client per configured connection (the config was validated when it was loaded). */
const clients = Effect.gen(function* () {
  const config = yield* AppConfig
  return yield* Effect.forEach(config.connections, (connection) => CrmClient.make(connection.name).pipe(Effect.orDie))
})

const startAll = (jobs: ReadonlyArray<ScheduledJob>) =>
  Effect.gen(function* () {
    for (const job of jobs) {
      yield* Effect.logInfo("sync job scheduled").pipe(
        Effect.annotateLogs({ job: job.job, connection: job.connection, every: Duration.format(job.interval) })
      )
      yield* Effect.forkScoped(loop(job))
    }
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

/** The webhook subscription check (Subscriptions.check) of an OAuth connection. */
const subscriptionJob = (client: CrmClientShape, interval: Duration.Duration) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const connection = client.connection.name
    return {
      job: JobNames.subscription,
      connection,
      interval,
      lease: `subscription:${connection}`,
      alsoCounts: [],
      run: Subscriptions.check(client).pipe(
        Effect.provideService(SqlClient, sql),
        Effect.map((checked): JobOutcome => ({
          requests: checked.state === "skipped" ? 0 : 1,
          detail: { ...checked }
        })),
        Effect.mapError(toSyncError(JobNames.subscription, { connection }))
      )
    } satisfies ScheduledJob
  })

/** The business poll of every connection, every `schedules.businesses`. */
export const BusinessPollerLive = Layer.effectDiscard(
  Effect.gen(function* () {
    const config = yield* AppConfig
    const jobs = yield* Effect.forEach(yield* clients, (client) => pollJob(client, config.schedules.businesses))
    yield* startAll(jobs)
  })
).pipe(Layer.provide(SyncServicesLive))

/**
 * The annuity-contract and financial-account crawls of every connection, every `schedules.crawl`,
 * and the business crawl, every `schedules.business_crawl`.
 */
export const CrawlSchedulerLive = Layer.effectDiscard(
  Effect.gen(function* () {
    const config = yield* AppConfig
    const jobs = yield* Effect.forEach(yield* clients, (client) =>
      Effect.all([
        crawlJob(client, "annuity_contracts", config.schedules.crawl),
        crawlJob(client, "financial_accounts", config.schedules.crawl),
        businessCrawlJob(client, config.schedules.business_crawl)
      ])
    )
    yield* startAll(jobs.flat())
  })
).pipe(Layer.provide(SyncServicesLive))

/** The reference refresh (me, books, users, teams, project templates), every `schedules.reference`. */
export const ReferenceSchedulerLive = Layer.effectDiscard(
  Effect.gen(function* () {
    const config = yield* AppConfig
    const jobs = yield* Effect.forEach(yield* clients, (client) => referenceJob(client, config.schedules.reference))
    yield* startAll(jobs)
  })
).pipe(Layer.provide(SyncServicesLive))

/**
 * The subscription check of a connection whose grant this process just found refused, at once
 * rather than at the next daily check: the CRM removed the subscription with the grant, and the
 * check records it `unreachable`, so `crm_sync_webhook_subscription_ok` turns 0 now.
 */
export const recheckOnRefusal = (
  oauth: ReadonlyArray<CrmClientShape>,
  refusals: PubSub.Subscription<string>
): Effect.Effect<never, never, SqlClient> =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    while (true) {
      const name = yield* PubSub.take(refusals)
      const client = oauth.find((candidate) => candidate.connection.name === name)
      if (client === undefined) continue
      yield* Subscriptions.check(client).pipe(
        Effect.provideService(SqlClient, sql),
        Effect.tap((checked) =>
          checked.state === "skipped"
            ? Effect.void
            : Metrics.set(Metrics.webhookSubscriptionOk, checked.state === "present" ? 1 : 0, { connection: name })
        ),
        Effect.catch((error) =>
          Effect.logWarning("webhook subscription: the re-check after a refused grant failed").pipe(
            Effect.annotateLogs({ connection: name, error: error.message })
          )
        )
      )
    }
  })

/**
 * The webhook subscription check of every OAuth connection, every `schedules.subscription_check`,
 * and at once when this process finds a connection's grant refused.
 */
export const SubscriptionCheckLive = Layer.effectDiscard(
  Effect.gen(function* () {
    const config = yield* AppConfig
    const oauth = (yield* clients).filter((client) => client.connection.credential === "oauth")
    const jobs = yield* Effect.forEach(oauth, (client) => subscriptionJob(client, config.schedules.subscription_check))
    // Subscribed before any job runs, so no refusal found meanwhile is missed.
    const refusals = yield* (yield* Credentials).refusals
    yield* Effect.forkScoped(recheckOnRefusal(oauth, refusals))
    yield* startAll(jobs)
  })
).pipe(Layer.provide(SyncServicesLive))

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

/** One prune of the job history: the runs older than `sync.history_retention` (JobRuns.prune). */
export const pruneHistory = Effect.gen(function* () {
  const config = yield* AppConfig
  const jobRuns = yield* JobRuns
  const deleted = yield* jobRuns.prune(config.sync.history_retention)
  if (deleted > 0) yield* Effect.logInfo("sync: job history pruned").pipe(Effect.annotateLogs({ runs: deleted }))
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

/** All read-sync jobs of the daemon, the subscription check, the orphan sweep and the history prune. */
export const SyncJobsLive = Layer.mergeAll(
  BusinessPollerLive,
  CrawlSchedulerLive,
  ReferenceSchedulerLive,
  SubscriptionCheckLive,
  OrphanSweepLive,
  HistoryPruneLive
)
