/**
 * BlockNotices: a 429's block, announced to every process at once. Bulk permits are taken a few
 * at a time and held in their process for up to a second (`LocalPermits`), spent without asking
 * the database again; a block another process recorded in `crm_sync.rate_blocks` meanwhile was
 * not seen by them, and requests went out up to a second into it (the chaos suite, 50
 * connections). The process that records a block also NOTIFYs it (RateBudget's `shareBlock`);
 * every process LISTENs and blocks the buckets locally, which drops the permits held for them.
 */
import type * as PgClient from "@effect/sql-pg/PgClient"
import type { Notification } from "@effect/sql-pg/PgConnection"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Schema from "effect/Schema"
import type { LocalPermits } from "./Permits.ts"

/** The channel blocks are announced on. */
export const BLOCKS_CHANNEL = "crm_sync_rate_blocks"

/** What a notice says: the buckets blocked, and for how long from when it was sent. */
const Notice = Schema.fromJsonString(Schema.Struct({ buckets: Schema.Array(Schema.String), wait_ms: Schema.Number }))
const decodeNotice = Schema.decodeUnknownOption(Notice)

/** The payload of a notice for `buckets`, blocked `waitMs` from now. */
export const noticeOf = (buckets: ReadonlyArray<string>, waitMs: number): string =>
  JSON.stringify({ buckets, wait_ms: waitMs })

/** Blocks a notice's buckets in this process (counted from its arrival: a little late, never early). */
const apply = (local: LocalPermits, notification: Notification) =>
  Effect.gen(function* () {
    const notice = decodeNotice(notification.payload)
    if (Option.isNone(notice)) return
    const now = yield* Clock.currentTimeMillis
    local.block(new Set(notice.value.buckets), now + notice.value.wait_ms)
  })

/**
 * Listens for blocks on a connection of its own, for the life of the scope; a lost connection
 * listens again after a pause (the database still stops permits meanwhile: only held ones slip).
 */
export const listenForBlocks = (pg: PgClient.PgClient, local: LocalPermits) =>
  Effect.scoped(
    Effect.gen(function* () {
      const notices = yield* pg.listen(BLOCKS_CHANNEL)
      while (true) yield* apply(local, yield* Queue.take(notices))
    })
  ).pipe(
    Effect.catchCause((cause) =>
      Cause.hasInterruptsOnly(cause)
        ? Effect.failCause(cause)
        : Effect.logDebug("rate budget: listening for blocks again shortly").pipe(
            Effect.andThen(Effect.sleep(Duration.seconds(2)))
          )
    ),
    Effect.forever
  )
