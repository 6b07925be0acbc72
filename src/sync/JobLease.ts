/**
 * JobLease: at most one process on the database runs a given sync job at a time. Two replicas of
 * the daemon, or a daemon and a `crm-sync backfill`, must not crawl the same resource of the same
 * connection together: they would spend the shared budget twice on the same pages
 * (docs/architecture.md: "Scale-out is PostgreSQL's"). A lease is a session-level PostgreSQL
 * advisory lock, so it never outlives its holder (see `LeaseSession`). The effect run under a lease
 * sees it as `CurrentLease`: JobRuns and CrawlRuns write it on the runs they open, which is how the
 * orphan sweep (SyncJobs) tells a dead holder's runs.
 */
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import * as Semaphore from "effect/Semaphore"
import { SqlClient } from "effect/sql/SqlClient"
import type { Connection } from "effect/sql/SqlConnection"
import type { SqlError } from "effect/sql/SqlError"

export class LeaseError extends Schema.TaggedError<LeaseError>()("LeaseError", {
  lease: Schema.String,
  message: Schema.String,
  cause: Schema.optional(Schema.Defect())
}) {}

const failed = (lease: string, message: string) => (cause: SqlError) =>
  new LeaseError({ lease, message: `${message}: ${cause.message}`, cause })

/** Namespaces the lock keys so that crm-sync's leases cannot collide with other advisory locks. */
const keyOf = (lease: string) => `crm-sync:lease:${lease}`

/** The lease every job touching one resource of one connection takes (poll, crawl, backfill). */
export const resourceLease = (connection: string, resource: string) => `sync:${connection}:${resource}`

/**
 * The lease every full listing of businesses takes (the scheduled business crawl, the poll's first
 * run, a backfill): one crawl run at a time, while the poll goes on under `resourceLease`. Whoever
 * needs both takes `resourceLease` first.
 */
export const businessCrawlLease = (connection: string) => `sync:${connection}:businesses:crawl`

/** The innermost lease the current fiber runs under, if any. */
export const CurrentLease = Context.Reference<string | null>("crm-sync/sync/CurrentLease", {
  defaultValue: () => null
})

/**
 * The process's lease session and the leases held on it. A lease is a session-level advisory lock
 * (`pg_try_advisory_lock`), which lives exactly as long as its session: it is released by the job's
 * finalizer, and by the server itself if the process dies (kill -9, a lost host), so a lease never
 * outlives its holder and needs no reaper or heartbeat. A transaction-scoped lock would not do: a
 * crawl commits once per page, over hours.
 *
 * All the leases of a process are held on one session — a connection reserved from the pool for
 * the layer's lifetime — rather than one connection per running job: a daemon with several CRM
 * connections runs a dozen long jobs, which must not pin a dozen pool connections for hours.
 * Advisory locks are re-entrant within a session, so the process keeps its own set of `held`
 * leases to refuse a second fiber the same lease. `permit` lets one statement at a time onto the
 * session; `current` is its connection, none until first needed or after it broke.
 */
interface LeaseSession {
  readonly sql: SqlClient
  /** The layer's scope: a session's connection lives in a child of it. */
  readonly layerScope: Scope.Scope
  readonly permit: Semaphore.Semaphore
  readonly held: Set<string>
  current: { readonly connection: Connection; readonly scope: Scope.Closeable } | undefined
}

/** Reserves a connection for the session; it unlocks everything when it goes back to the pool. */
const openSession = Effect.fnUntraced(function* (session: LeaseSession) {
  const scope = yield* Scope.fork(session.layerScope)
  const connection = yield* session.sql.reserve.pipe(
    Scope.provide(scope),
    Effect.onError(() => Scope.close(scope, Exit.void))
  )
  // The connection goes back to the pool afterwards: it must not take locks with it.
  yield* Scope.addFinalizer(scope, Effect.ignore(connection.execute("SELECT pg_advisory_unlock_all()", [], undefined)))
  return { connection, scope }
})

/** Runs `use` on the lease session, opening it first if there is none (or the last one broke). */
const onSession = <A>(session: LeaseSession, use: (connection: Connection) => Effect.Effect<A, SqlError>) =>
  session.permit.withPermit(
    Effect.gen(function* () {
      const current = session.current ?? (yield* openSession(session))
      session.current = current
      return yield* use(current.connection).pipe(
        Effect.onError(() =>
          Effect.suspend(() => {
            session.current = undefined
            return Scope.close(current.scope, Exit.void)
          })
        )
      )
    })
  )

/**
 * Takes the lease if no one holds it: true when taken. Should the session break (the database
 * restarted), its locks are gone with it: the attempt that finds it broken tries once more on a new
 * session (so a job need not wait a turn to find the database back), and until the running jobs
 * finish, another process may start the same job — wasteful, never harmful (every write is idempotent).
 */
const acquire = (session: LeaseSession, lease: string) =>
  Effect.gen(function* () {
    if (session.held.has(lease)) return false
    const attempt = onSession(session, (connection) =>
      connection.execute("SELECT pg_try_advisory_lock(hashtextextended($1, 0)) AS locked", [keyOf(lease)], undefined)
    )
    // A failed attempt dropped its session: the second opens a new one (the database restarted).
    const rows = yield* attempt.pipe(
      Effect.catch(() => attempt),
      Effect.mapError(failed(lease, "cannot take the lease"))
    )
    const locked = rows[0]?.locked === true
    if (locked) session.held.add(lease)
    return locked
  })

const release = (session: LeaseSession, lease: string) =>
  Effect.gen(function* () {
    session.held.delete(lease)
    yield* onSession(session, (connection) =>
      connection.execute("SELECT pg_advisory_unlock(hashtextextended($1, 0))", [keyOf(lease)], undefined)
    ).pipe(
      Effect.catch((error) =>
        Effect.logWarning("lease: cannot release; it ends with its session").pipe(
          Effect.annotateLogs({ lease, error: error.message })
        )
      )
    )
  })

const tryRun =
  (session: LeaseSession) =>
  <A, E, R>(lease: string, effect: Effect.Effect<A, E, R>) =>
    Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(acquire(session, lease), (locked) =>
        locked
          ? restore(Effect.map(effect, Option.some)).pipe(
              Effect.provideService(CurrentLease, lease),
              Effect.ensuring(release(session, lease))
            )
          : Effect.succeed(Option.none<A>())
      )
    ).pipe(Effect.withSpan("JobLease.tryRun", { attributes: { lease } }))

const run =
  (session: LeaseSession) =>
  <A, E, R>(
    lease: string,
    effect: Effect.Effect<A, E, R>,
    options?: { readonly poll?: Duration.Input; readonly onWait?: Effect.Effect<void> }
  ): Effect.Effect<A, E | LeaseError, R> =>
    Effect.gen(function* () {
      let waited = false
      while (true) {
        const result = yield* tryRun(session)(lease, effect)
        if (Option.isSome(result)) return result.value
        if (!waited) {
          waited = true
          if (options?.onWait !== undefined) yield* options.onWait
        }
        yield* Effect.sleep(options?.poll ?? Duration.seconds(5))
      }
    })

export class JobLease extends Context.Service<
  JobLease,
  {
    /**
     * Runs `effect` holding the lease, or returns `None` at once when another process (or another
     * fiber of this one) holds it: a scheduled job simply skips its turn.
     */
    readonly tryRun: <A, E, R>(
      lease: string,
      effect: Effect.Effect<A, E, R>
    ) => Effect.Effect<Option.Option<A>, E | LeaseError, R>
    /**
     * Waits for the lease, asking again every `poll` (default 5 seconds), then runs `effect`
     * holding it. `onWait` runs once, when the first attempt finds the lease taken.
     */
    readonly run: <A, E, R>(
      lease: string,
      effect: Effect.Effect<A, E, R>,
      options?: { readonly poll?: Duration.Input; readonly onWait?: Effect.Effect<void> }
    ) => Effect.Effect<A, E | LeaseError, R>
  }
>()("crm-sync/sync/JobLease") {
  static readonly layer = Layer.effect(
    JobLease,
    Effect.gen(function* () {
      const session: LeaseSession = {
        sql: yield* SqlClient,
        layerScope: yield* Effect.scope,
        permit: yield* Semaphore.make(1),
        held: new Set<string>(),
        current: undefined
      }
      return JobLease.of({ tryRun: tryRun(session), run: run(session) })
    })
  )
}
