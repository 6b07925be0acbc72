/**
 * A scheduled job's way to give its worker back while the rate budget makes it wait. The sync
 * scheduler runs each job with a `BudgetHandoff` of its own; when `RateBudget.acquire` learns that
 * the permit is further off than `HANDOFF_AFTER`, it completes the handoff with the wait, and the
 * scheduler ends the run as `deferred` and puts the job back in the schedule due when the permit
 * is. Without a handoff (the outbound writer, the webhooks, a one-shot backfill) an acquirer simply
 * sleeps: it holds no worker that other connections are waiting for.
 */
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"

/**
 * A wait at least this long hands the worker back. Shorter waits (a bucket's pacing, a permit
 * refill a second away) cost less asleep than a run's end and restart (a lease, two job_runs
 * writes, the crawl's resume).
 */
export const HANDOFF_AFTER_MS = 5_000

/** The current run's handoff, completed with the wait (ms) when the budget asks for a long one. */
export const BudgetHandoff = Context.Reference<Deferred.Deferred<number> | undefined>("crm-sync/budget/BudgetHandoff", {
  defaultValue: () => undefined
})

/** Called by an acquirer about to sleep `waitMs`: hands the worker back when the wait is long. */
export const offerHandoff = (waitMs: number): Effect.Effect<void> =>
  waitMs < HANDOFF_AFTER_MS
    ? Effect.void
    : Effect.gen(function* () {
        const handoff = yield* BudgetHandoff
        if (handoff !== undefined) yield* Deferred.succeed(handoff, waitMs)
      })
