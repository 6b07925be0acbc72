/**
 * InboxWriter: group commit for the webhook intake. A delivery is answered 2xx only after its inbox
 * row is committed; concurrent deliveries share one INSERT and one commit instead of paying a round
 * trip and a WAL flush each. A failed statement fails every waiter of its batch (they answer 503;
 * the sender retries).
 */
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Queue from "effect/Queue"
import * as Schema from "effect/Schema"
import { oneLine } from "../observability/Text.ts"
import * as Metrics from "../observability/Metrics.ts"
import { type InboxRow, WebhookInbox } from "./WebhookInbox.ts"

/** The inbox could not store the delivery (the database is down or refused the write). */
export class InboxUnavailable extends Schema.TaggedError<InboxUnavailable>()("InboxUnavailable", {
  message: Schema.String
}) {}

export type AcceptResult = "inserted" | "duplicate"

export interface InboxWriterOptions {
  /** Rows per INSERT at most. */
  readonly maxBatch?: number
  /** Statements in flight at once (each on its own pooled connection). */
  readonly writers?: number
  /** Deliveries waiting for a writer before new ones wait for room (backpressure). */
  readonly capacity?: number
}

interface Waiting {
  readonly row: InboxRow
  readonly done: Deferred.Deferred<AcceptResult, InboxUnavailable>
}

const describe = (cause: unknown) => oneLine(cause, 200)

export class InboxWriter extends Context.Service<
  InboxWriter,
  {
    /** Stores a verified delivery; succeeds only once its row (or an earlier copy) is committed. */
    readonly accept: (row: InboxRow) => Effect.Effect<AcceptResult, InboxUnavailable>
  }
>()("crm-sync/webhooks/InboxWriter") {
  /**
   * Each request puts its row on a bounded queue with a `Deferred` and waits on it. `writers`
   * fibers each take whatever is queued (up to `maxBatch` rows), INSERT them in one statement (its
   * own transaction), and complete every waiter with `inserted`, `duplicate` or the failure. No
   * timer is involved: under light load a batch is one row and is written at once; under heavy
   * load rows pile up while a statement is in flight and the next statement carries them all.
   */
  static readonly layerWith = (options: InboxWriterOptions = {}) =>
    Layer.effect(
      InboxWriter,
      Effect.gen(function* () {
        const inbox = yield* WebhookInbox
        const maxBatch = options.maxBatch ?? 512
        const queue = yield* Queue.bounded<Waiting>(options.capacity ?? 8192)

        const write = Effect.fnUntraced(function* (batch: ReadonlyArray<Waiting>) {
          // Repeats of one hook-id in a batch (a sender's parallel retries, or its copies to two
          // endpoints) become one row in `insert`, which keeps the copy that knows its event type.
          const rows = batch.map((waiting) => waiting.row)
          const exit = yield* Effect.exit(inbox.insert(rows))
          yield* Metrics.observe(Metrics.webhookInboxBatchRows, new Set(rows.map((row) => row.hookId)).size)
          if (exit._tag === "Failure") {
            // Defects too: the writer must outlive any one batch, or every later request would hang.
            const error = new InboxUnavailable({
              message: `cannot store the delivery: ${describe(Cause.squash(exit.cause))}`
            })
            for (const waiting of batch) Deferred.doneUnsafe(waiting.done, Effect.fail(error))
            return
          }
          const fresh = new Set(exit.value)
          for (const waiting of batch) {
            // The first waiter of a newly inserted id gets `inserted`, every other copy `duplicate`.
            const inserted = fresh.delete(waiting.row.hookId)
            Deferred.doneUnsafe(waiting.done, Effect.succeed(inserted ? "inserted" : "duplicate"))
          }
        })

        const writer = Queue.takeBetween(queue, 1, maxBatch).pipe(Effect.flatMap(write), Effect.forever)
        for (let i = 0; i < (options.writers ?? 2); i++) yield* Effect.forkScoped(writer)

        const accept = (row: InboxRow) =>
          Effect.flatMap(Deferred.make<AcceptResult, InboxUnavailable>(), (done) =>
            Effect.andThen(Queue.offer(queue, { row, done }), Deferred.await(done))
          )

        return InboxWriter.of({ accept })
      })
    )

  static readonly layer = InboxWriter.layerWith()
}
