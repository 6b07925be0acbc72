/**
 * The scheduler of the daemon's sync jobs: one per process, it knows every (connection, job) and
 * when each is next due, and hands due jobs to a fixed pool of `sync.workers` workers — the most
 * overdue first, connections in turn when several are as overdue — so that the work in flight is
 * bounded by the pool, not by the number of connections. An idle connection costs its jobs'
 * entries here (a due time and a counter each), no fiber, buffer or database session.
 *
 * A job's due time starts from `crm_sync.job_runs` (its last success plus its interval, on the
 * database's clock; a job that never succeeded is due at once) and then moves with each turn. A
 * worker that takes a job asks the database once more whether it is due (a replica may have run
 * it), and if so runs it under its lease (JobLease); a job whose lease another process holds is
 * skipped and looked at again 15 s later (or after its interval, if shorter). Replicas share
 * the work through the leases alone.
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Schema from "effect/Schema"
import type { SqlError } from "effect/sql/SqlError"
import { BudgetHandoff } from "../budget/Handoff.ts"
import { AppConfig } from "../config/AppConfig.ts"
import { CrmPermitSpent } from "../crm/CrmTransport.ts"
import { isDatabaseDefect } from "../warehouse/DatabaseCause.ts"
import { JobLease, type LeaseError } from "./JobLease.ts"
import { describeFailure, type JobOutcome, JobRuns } from "./JobRuns.ts"
import type { SyncError } from "./SyncError.ts"

/** After a failed run, the job is tried again after its interval or this, whichever is shorter. */
const RETRY_AFTER_FAILURE = Duration.minutes(10)
/**
 * When the database failed (it restarted, or is unreachable), the job asks again sooner: after 5 s,
 * doubling per failure in a row up to this, so that it resumes within a minute of its return.
 */
const RETRY_DATABASE_MAX = Duration.seconds(30)
/**
 * When another process holds the job's lease, ask again after this (or the interval, if shorter):
 * if that process dies (SIGKILL), its lease goes with its session and the job resumes here within
 * this much. A look costs two short queries, a few per minute per job another replica is running.
 */
const RETRY_WHEN_BUSY = Duration.seconds(15)

/** One job of one connection, as the scheduler runs it. */
export interface ScheduledJob {
  readonly job: string
  readonly connection: string
  readonly interval: Duration.Duration
  readonly lease: string
  /** Other job names whose success also counts as a run of this one (a backfill's crawl). */
  readonly alsoCounts: ReadonlyArray<string>
  readonly run: Effect.Effect<JobOutcome, SyncError>
}

/** A job's place in the schedule: its due time (process clock, ms) and whether a worker has it. */
interface Entry {
  readonly job: ScheduledJob
  /** Its place in the configuration: the last tie-breaker. */
  readonly index: number
  dueAt: number
  taken: boolean
  /** Database failures in a row (the retry backs off on them). */
  databaseFailures: number
}

interface Schedule {
  readonly entries: ReadonlyArray<Entry>
  /** When each connection last had a job taken (a sequence number): the round-robin on ties. */
  readonly served: Map<string, number>
  sequence: number
  /** Completed, and replaced, whenever an entry comes back: waiting workers look again. */
  changed: Deferred.Deferred<void>
}

/** The entry to take now, if any, else when the earliest one is due (undefined: all taken). */
const pick = (schedule: Schedule, now: number): { readonly due?: Entry; readonly next?: number } => {
  let best: Entry | undefined
  let next: number | undefined
  const turnOf = (entry: Entry) => schedule.served.get(entry.job.connection) ?? 0
  for (const entry of schedule.entries) {
    if (entry.taken) continue
    if (entry.dueAt > now) {
      next = next === undefined ? entry.dueAt : Math.min(next, entry.dueAt)
      continue
    }
    if (
      best === undefined ||
      entry.dueAt < best.dueAt ||
      (entry.dueAt === best.dueAt &&
        (turnOf(entry) < turnOf(best) || (turnOf(entry) === turnOf(best) && entry.index < best.index)))
    )
      best = entry
  }
  return best === undefined ? (next === undefined ? {} : { next }) : { due: best }
}

/** Waits for a due entry and takes it. */
const take = (schedule: Schedule): Effect.Effect<Entry> =>
  Effect.gen(function* () {
    while (true) {
      const now = yield* Clock.currentTimeMillis
      const changed = schedule.changed
      const found = pick(schedule, now)
      if (found.due !== undefined) {
        found.due.taken = true
        schedule.sequence += 1
        schedule.served.set(found.due.job.connection, schedule.sequence)
        return found.due
      }
      const timer = found.next === undefined ? Effect.never : Effect.sleep(Duration.millis(found.next - now))
      yield* Effect.raceFirst(timer, Deferred.await(changed))
    }
  })

/** Gives an entry back, due `wait` from now, and wakes the waiting workers. */
const giveBack = (schedule: Schedule, entry: Entry, wait: Duration.Duration) =>
  Effect.flatMap(Clock.currentTimeMillis, (now) =>
    Effect.sync(() => {
      entry.dueAt = now + Duration.toMillis(wait)
      entry.taken = false
      const changed = schedule.changed
      schedule.changed = Deferred.makeUnsafe<void>()
      Deferred.doneUnsafe(changed, Effect.void)
    })
  )

/** Whether a job's failure was the database's (a restart, an outage), not the CRM's or a bug's. */
const isDatabaseFailure = (failure: SyncError | LeaseError | SqlError | Schema.SchemaError): boolean =>
  failure._tag === "SyncError" ? failure.reason._tag === "Database" : failure._tag !== "SchemaError"

/** The wait after a database failure: 5 s, 10 s, 20 s, then RETRY_DATABASE_MAX. */
const databaseWait = (entry: Entry) => {
  entry.databaseFailures += 1
  return Duration.min(Duration.seconds(5 * 2 ** Math.min(entry.databaseFailures - 1, 3)), RETRY_DATABASE_MAX)
}

/**
 * The job's run, ended early as `deferred` when the rate budget asks it to wait longer than
 * HANDOFF_AFTER_MS: the worker goes to a job that can run now (a crawl resumes from its last stored
 * page next time), and the job comes back when the permit is due.
 */
const yieldingRun = (job: ScheduledJob): Effect.Effect<JobOutcome, SyncError> =>
  Effect.gen(function* () {
    const handoff = yield* Deferred.make<number>()
    // A deferred run reports the requests it sent before the wait (the run's own count is lost
    // with it): every permit the transport takes for it.
    let sent = 0
    const outer = yield* CrmPermitSpent
    const counted = Effect.provideService(job.run, CrmPermitSpent, () => {
      sent += 1
      outer?.()
    })
    const deferred = Effect.map(Deferred.await(handoff), (waitMs): JobOutcome => ({
      requests: sent,
      detail: { deferred_seconds: Math.round(waitMs / 1_000) },
      deferredMs: waitMs
    }))
    const ran = yield* Effect.raceFirst(Effect.provideService(counted, BudgetHandoff, handoff), deferred)
    if (ran.deferredMs !== undefined) {
      yield* Effect.logDebug("sync job deferred: the rate budget asks for a long wait; the worker goes on").pipe(
        Effect.annotateLogs({ wait_seconds: Math.round(ran.deferredMs / 1_000) })
      )
    }
    return ran
  })

/**
 * One turn of a taken job; returns how long until it is next looked at. Due is asked first without
 * the lease (most turns of a job another replica ran end there), then again under it. A run's
 * failure is retried after at most 10 minutes, or within 30 s when it was the database's (a
 * failed crawl resumes where it stopped); a defect is logged and retried: one bad run must not stop
 * the job for the daemon's lifetime.
 */
const turn = (entry: Entry) =>
  Effect.gen(function* () {
    const job = entry.job
    const leases = yield* JobLease
    const jobRuns = yield* JobRuns
    const dueIn = jobRuns.dueIn([job.job, ...job.alsoCounts], job.connection, job.interval)
    const before = yield* dueIn
    if (before > 0) return Duration.millis(before)
    const outcome = yield* Effect.result(
      leases.tryRun(
        job.lease,
        Effect.flatMap(dueIn, (due) =>
          due > 0
            ? Effect.succeed(Duration.millis(due))
            : Effect.map(jobRuns.record(job.job, job.connection, yieldingRun(job)), (ran) =>
                ran.deferredMs === undefined ? job.interval : Duration.millis(ran.deferredMs)
              )
        )
      )
    )
    if (outcome._tag === "Failure") {
      const wait = isDatabaseFailure(outcome.failure)
        ? databaseWait(entry)
        : Duration.min(job.interval, RETRY_AFTER_FAILURE)
      yield* Effect.logWarning("sync job failed; it will be tried again").pipe(
        Effect.annotateLogs({ error: outcome.failure.message, retry_in_seconds: Duration.toSeconds(wait) })
      )
      return wait
    }
    entry.databaseFailures = 0
    if (outcome.success._tag === "Some") return outcome.success.value
    yield* Effect.logDebug("sync job: another process holds the lease; skipping this turn")
    return Duration.min(job.interval, RETRY_WHEN_BUSY)
  }).pipe(
    Effect.catch((failure) =>
      // The schedule lives in the database: while it cannot be read, ask again soon.
      Effect.succeed(isDatabaseFailure(failure) ? databaseWait(entry) : RETRY_WHEN_BUSY)
    ),
    Effect.catchCause((cause) =>
      Cause.hasInterruptsOnly(cause)
        ? Effect.failCause(cause)
        : isDatabaseDefect(cause)
          ? Effect.sync(() => databaseWait(entry)).pipe(
              Effect.tap((wait) =>
                Effect.logWarning("sync job lost its database; it will be tried again").pipe(
                  Effect.annotateLogs({ error: describeFailure(cause), retry_in_seconds: Duration.toSeconds(wait) })
                )
              )
            )
          : Effect.as(
              Effect.logError("sync job crashed; it will be tried again", cause),
              Duration.min(entry.job.interval, RETRY_AFTER_FAILURE)
            )
    ),
    Effect.annotateLogs({ job: entry.job.job, connection: entry.job.connection })
  )

/** A worker: takes the next due job, runs its turn, gives it back; until interrupted. */
const worker = (schedule: Schedule) =>
  Effect.forever(
    Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(restore(take(schedule)), (entry) =>
        restore(turn(entry)).pipe(
          Effect.onExit((exit) => giveBack(schedule, entry, exit._tag === "Success" ? exit.value : Duration.zero))
        )
      )
    )
  )

const key = (connection: string, job: string) => `${connection}\u0000${job}`

/**
 * The schedule at start: each job due its interval after its last success (or that of a job that
 * counts for it), on the database's clock; never run, or unreadable now, due at once.
 */
const initialSchedule = (jobs: ReadonlyArray<ScheduledJob>) =>
  Effect.gen(function* () {
    const jobRuns = yield* JobRuns
    const pairs = jobs.flatMap((job) =>
      [job.job, ...job.alsoCounts].map((name) => ({ job: name, connection: job.connection }))
    )
    const ago = yield* jobRuns
      .lastSuccesses(pairs)
      .pipe(
        Effect.catch((error) =>
          Effect.as(
            Effect.logWarning("sync scheduler: the job history cannot be read; every job is looked at now").pipe(
              Effect.annotateLogs({ error: error.message })
            ),
            new Map<string, number>()
          )
        )
      )
    const now = yield* Clock.currentTimeMillis
    const entries = jobs.map((job, index): Entry => {
      const since = [job.job, ...job.alsoCounts].flatMap((name) => {
        const value = ago.get(key(job.connection, name))
        return value === undefined ? [] : [value]
      })
      const dueAt = since.length === 0 ? now : now - Math.min(...since) + Duration.toMillis(job.interval)
      return {
        job,
        index,
        dueAt: Math.min(dueAt, now + Duration.toMillis(job.interval)),
        taken: false,
        databaseFailures: 0
      }
    })
    return { entries, served: new Map(), sequence: 0, changed: Deferred.makeUnsafe<void>() } satisfies Schedule
  })

/**
 * Schedules `jobs` on a pool of `sync.workers` workers, forked in the current scope: closing it
 * (SIGTERM) stops the pool taking jobs and interrupts the runs in hand (the page being written
 * commits, the lease is released, the run is recorded `interrupted`).
 */
export const runScheduler = (jobs: ReadonlyArray<ScheduledJob>) =>
  Effect.gen(function* () {
    const config = yield* AppConfig
    const schedule = yield* initialSchedule(jobs)
    const connections = new Set(jobs.map((job) => job.connection)).size
    yield* Effect.logInfo("sync scheduler started").pipe(
      Effect.annotateLogs({ jobs: jobs.length, connections, workers: config.sync.workers })
    )
    for (let i = 0; i < config.sync.workers; i++) {
      yield* Effect.forkScoped(worker(schedule).pipe(Effect.annotateLogs({ worker: i + 1 })))
    }
  })
