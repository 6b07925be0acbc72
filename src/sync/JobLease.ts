/**
 * JobLease: at most one process on the database runs a given sync job at a time. Two replicas of
 * the daemon, or a daemon and a `crm-sync backfill`, must not crawl the same resource of the same
 * connection together: they would spend the shared budget twice on the same pages
 * (docs/architecture.md: "Scale-out is PostgreSQL's").
 *
 * A lease is a session-level PostgreSQL advisory lock (`pg_try_advisory_lock`). A session lock
 * lives exactly as long as its session: it is released by the job's finalizer, and by the server
 * itself if the process dies (kill -9, a lost host), so a lease never outlives its holder and needs
 * no reaper or heartbeat. A transaction-scoped lock would not do: a crawl commits once per page,
 * over hours.
 *
 * All the leases of a process are held on one session — a connection reserved from the pool for
 * the layer's lifetime — rather than one connection per running job: a daemon with several CRM
 * connections runs a dozen long jobs, which must not pin a dozen pool connections for hours.
 * Advisory locks are re-entrant within a session, so the process keeps its own set of held leases
 * to refuse a second fiber the same lease. Should the session break (the database restarted), its
 * locks are gone with it: the attempt that finds it broken tries once more on a new session (so a
 * job need not wait a turn to find the database back), and until the running jobs finish, another
 * process may start the same job — wasteful, never harmful (every write is idempotent).
 *
 * The effect run under a lease sees it as `CurrentLease`: JobRuns and CrawlRuns write it on the
 * runs they open, which is how the orphan sweep (SyncJobs) tells a dead holder's runs.
 */
import { Context, Duration, Effect, Exit, Layer, Option, Schema, Scope, Semaphore } from "effect"
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
      const sql = yield* SqlClient
      const layerScope = yield* Effect.scope
      // One statement at a time on the shared session.
      const permit = yield* Semaphore.make(1)
      const held = new Set<string>()
      let session: { readonly connection: Connection; readonly scope: Scope.Closeable } | undefined

      /** Runs `use` on the lease session, opening it first if there is none (or the last one broke). */
      const onSession = <A>(use: (connection: Connection) => Effect.Effect<A, SqlError>) =>
        permit.withPermit(
          Effect.gen(function* () {
            if (session === undefined) {
              const scope = yield* Scope.fork(layerScope)
              const connection = yield* sql.reserve.pipe(
                Scope.provide(scope),
                Effect.onError(() => Scope.close(scope, Exit.void))
              )
              // The connection goes back to the pool afterwards: it must not take locks with it.
              yield* Scope.addFinalizer(
                scope,
                Effect.ignore(connection.execute("SELECT pg_advisory_unlock_all()", [], undefined))
              )
              session = { connection, scope }
            }
            const current = session
            return yield* use(current.connection).pipe(
              Effect.onError(() =>
                Effect.suspend(() => {
                  session = undefined
                  return Scope.close(current.scope, Exit.void)
                })
              )
            )
          })
        )

      const acquire = (lease: string) =>
        Effect.gen(function* () {
          if (held.has(lease)) return false
          const attempt = onSession((connection) =>
            connection.execute(
              "SELECT pg_try_advisory_lock(hashtextextended($1, 0)) AS locked",
              [keyOf(lease)],
              undefined
            )
          )
          // A failed attempt dropped its session: the second opens a new one (the database restarted).
          const rows = yield* attempt.pipe(
            Effect.catch(() => attempt),
            Effect.mapError(failed(lease, "cannot take the lease"))
          )
          const locked = rows[0]?.locked === true
          if (locked) held.add(lease)
          return locked
        })

      const release = (lease: string) =>
        Effect.gen(function* () {
          held.delete(lease)
          yield* onSession((connection) =>
            connection.execute("SELECT pg_advisory_unlock(hashtextextended($1, 0))", [keyOf(lease)], undefined)
          ).pipe(
            Effect.catch((error) =>
              Effect.logWarning("lease: cannot release; it ends with its session").pipe(
                Effect.annotateLogs({ lease, error: error.message })
              )
            )
          )
        })

      const tryRun = <A, E, R>(lease: string, effect: Effect.Effect<A, E, R>) =>
        Effect.uninterruptibleMask((restore) =>
          Effect.flatMap(acquire(lease), (locked) =>
            locked
              ? restore(Effect.map(effect, Option.some)).pipe(
                  Effect.provideService(CurrentLease, lease),
                  Effect.ensuring(release(lease))
                )
              : Effect.succeed(Option.none<A>())
          )
        ).pipe(Effect.withSpan("JobLease.tryRun", { attributes: { lease } }))

      const run = <A, E, R>(
        lease: string,
        effect: Effect.Effect<A, E, R>,
        options?: { readonly poll?: Duration.Input; readonly onWait?: Effect.Effect<void> }
      ): Effect.Effect<A, E | LeaseError, R> =>
        Effect.gen(function* () {
          let waited = false
          while (true) {
            const result = yield* tryRun(lease, effect)
            if (Option.isSome(result)) return result.value
            if (!waited) {
              waited = true
              if (options?.onWait !== undefined) yield* options.onWait
            }
            yield* Effect.sleep(options?.poll ?? Duration.seconds(5))
          }
        })

      return JobLease.of({ tryRun, run })
    })
  )
}
