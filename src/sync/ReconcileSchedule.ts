/**
 * The daemon's reconciliation: every connection on `schedules.reconcile` (a cron expression read in
 * UTC, default `0 3 * * *`), each run under the connection's lease and recorded in job_runs like a
 * `crm-sync reconcile` run. Replicas wake at the same occurrence: one runs it, the others find its
 * run and skip it. An occurrence missed while no daemon ran runs at the next start, once.
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Cron from "effect/Cron"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Result from "effect/Result"
import * as Semaphore from "effect/Semaphore"
import { AppConfig, ConfigInvalid } from "../config/AppConfig.ts"
import { CrmClient, type CrmClientShape } from "../crm/CrmClient.ts"
import { JobLease } from "./JobLease.ts"
import { JobRuns } from "./JobRuns.ts"
import { RECONCILE_JOB, reconcileLease, Reconciler, runJob } from "./Reconciler.ts"
import { SyncServicesLive } from "./SyncJobs.ts"

/**
 * `schedules.reconcile: "off"`: the daemon never reconciles; a scheduler outside it runs
 * `crm-sync reconcile` (ops/kubernetes: the CronJob). Never both: they would share the window's
 * reconcile allowance, and the lease makes the second wait for the first.
 */
export const RECONCILE_OFF = "off"

/** `schedules.reconcile`, a cron expression read in UTC (5 fields, or 6 with seconds). */
export const parseSchedule = (expression: string) =>
  Result.match(Cron.parse(expression, "UTC"), {
    onSuccess: Effect.succeed,
    onFailure: (error) =>
      Effect.fail(new ConfigInvalid({ key: "schedules.reconcile", message: `not a cron expression: ${error.message}` }))
  })

/** When this connection's reconciliation last started, if it ever ran (on any replica). */
const lastStarted = (connection: string) =>
  Effect.flatMap(JobRuns, (jobRuns) => jobRuns.lastStarted(RECONCILE_JOB, connection))

/** Runs of the job that count as this occurrence's: another replica may have run it already. */
const ranSince = (connection: string, since: Date) =>
  Effect.map(lastStarted(connection), (at) => at !== null && at >= since.getTime())

/**
 * Replicas wake at the same occurrence: the first takes the lease, the others find its run. Half a
 * period of slack (at most 5 minutes) covers clocks a little apart without swallowing the next
 * occurrence.
 */
const slackBefore = (cron: Cron.Cron, at: Date) =>
  new Date(
    at.getTime() - Math.min(Duration.toMillis(Duration.minutes(5)), (Cron.next(cron, at).getTime() - at.getTime()) / 2)
  )

/**
 * The run of the occurrence at `at`, unless a replica ran it already; never fails. It waits for one
 * of the process's `slots` first (and only then takes the lease, so a replica with a free slot
 * can take it meanwhile): every connection's occurrence falls due at the same 03:00, and a
 * partner's 500 must not all start at once.
 */
const occurrence = (client: CrmClientShape, cron: Cron.Cron, at: Date, slots: Semaphore.Semaphore) =>
  Effect.flatMap(JobLease, (leases) =>
    leases
      .tryRun(
        reconcileLease(client.connection.name),
        Effect.flatMap(ranSince(client.connection.name, slackBefore(cron, at)), (ran) =>
          ran ? Effect.void : Effect.asVoid(runJob(client, () => Effect.void))
        )
      )
      .pipe(
        Effect.catchCause((cause) =>
          Cause.hasInterruptsOnly(cause)
            ? Effect.failCause(cause)
            : Effect.logWarning("reconcile failed; it runs again at the next occurrence", cause)
        )
      )
  ).pipe(slots.withPermits(1))

/**
 * An occurrence missed while no daemon ran (a restart across 03:00) runs now, once. Only when the
 * reconciliation has run before: a first start waits for the schedule, the backfill and the crawls
 * having the first day's budget.
 */
const catchUp = (client: CrmClientShape, cron: Cron.Cron, slots: Semaphore.Semaphore) =>
  Effect.gen(function* () {
    const started = yield* Clock.currentTimeMillis
    const missed = Cron.prev(cron, started)
    const last = yield* lastStarted(client.connection.name).pipe(Effect.orElseSucceed(() => null))
    if (last !== null && last < slackBefore(cron, missed).getTime()) {
      yield* Effect.logInfo("reconcile: running the occurrence missed while stopped").pipe(
        Effect.annotateLogs({ missed: missed.toISOString() })
      )
      yield* occurrence(client, cron, missed, slots)
    }
  })

/** The loop of one connection: sleep until the next occurrence, run under the lease; never fails. */
const scheduleLoop = (client: CrmClientShape, cron: Cron.Cron, slots: Semaphore.Semaphore) =>
  Effect.gen(function* () {
    yield* catchUp(client, cron, slots)
    while (true) {
      const now = yield* Clock.currentTimeMillis
      const at = Cron.next(cron, now)
      yield* Effect.sleep(Duration.millis(Math.max(0, at.getTime() - now)))
      yield* occurrence(client, cron, at, slots)
    }
  }).pipe(Effect.annotateLogs({ job: RECONCILE_JOB, connection: client.connection.name }))

/**
 * The reconciliation of every connection on `schedules.reconcile` (default `0 3 * * *`, 03:00 UTC),
 * `sync.workers` connections at a time.
 */
export const ReconcileSchedulerLive = Layer.effectDiscard(
  Effect.gen(function* () {
    const config = yield* AppConfig
    if (config.schedules.reconcile === RECONCILE_OFF) {
      yield* Effect.logInfo(
        "reconcile: the daemon's schedule is off (schedules.reconcile = off); run `crm-sync reconcile` from a scheduler"
      )
      return
    }
    const cron = yield* parseSchedule(config.schedules.reconcile)
    const slots = yield* Semaphore.make(config.sync.workers)
    for (const connection of config.connections) {
      const client = yield* CrmClient.make(connection.name).pipe(Effect.orDie)
      yield* Effect.logInfo("reconcile scheduled").pipe(
        Effect.annotateLogs({ connection: connection.name, cron: config.schedules.reconcile })
      )
      yield* Effect.forkScoped(scheduleLoop(client, cron, slots))
    }
  })
).pipe(Layer.provide(Reconciler.layer), Layer.provide(SyncServicesLive))
