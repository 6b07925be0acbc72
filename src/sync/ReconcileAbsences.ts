/**
 * What a reconciliation's whole, clean read of a listing no longer finds, and when it is deleted.
 * The rules are the crawler's (docs/sync.md): only rows written before the read began count, a
 * record is deleted only once a second look missed it too, nothing is deleted when more than
 * `sync.deletion_threshold` of the live rows would go at once, and a partial read, a resumed one or
 * one the listing moved under never deletes anything. A record another connection that still
 * crawls the listing tracks is not counted gone (CrawlHolds: overlapping books).
 */
import * as DateTime from "effect/DateTime"
import * as Effect from "effect/Effect"
import type { SqlClient } from "effect/sql/SqlClient"
import { percent } from "../observability/Text.ts"
import type { Warehouse } from "../warehouse/Warehouse.ts"
import { heldNote } from "./CrawlHolds.ts"
import { type CrawlRuns, shortReadSlack } from "./CrawlRuns.ts"
import type { ReconcileResource, ResourceReport } from "./ReconcileReport.ts"
import type { JobFailure } from "./SyncError.ts"

/** Gone ids kept in a report for the next pass to confirm; beyond this, nothing is deleted. */
const MAX_TRACKED_GONE = 10_000

/** What settling absences works with: the reconciler's services and `sync.deletion_threshold`. */
export interface AbsenceDeps {
  readonly sql: SqlClient
  readonly warehouse: Warehouse["Service"]
  readonly crawlRuns: CrawlRuns["Service"]
  readonly threshold: number
}

/** What the run offers after its read: the previous clean pass's gone ids, and a second read. */
export interface AfterRead {
  /** The ids the previous clean pass of the resource found gone. */
  readonly missedBefore: Effect.Effect<ReadonlySet<string>, JobFailure>
  /** Requests the run's allowance has left. */
  readonly requestsLeft: number
  /** The listing read again, ids only. */
  readonly readAgain: Effect.Effect<
    { readonly seen: ReadonlySet<string>; readonly clean: boolean; readonly pages: number },
    JobFailure
  >
}

/** What a whole read of a resource's listing left behind for the absence count. */
export interface WholeRead {
  readonly report: ResourceReport
  readonly seen: ReadonlySet<string>
  /** `total_count` differed between two pages. */
  readonly drifted: boolean
  readonly startedAt: Date
  readonly live: number
}

/** Live rows written before the read began that the read did not see. */
const absentIds = (deps: AbsenceDeps, resource: ReconcileResource, seen: ReadonlySet<string>, readStartedAt: Date) =>
  deps.warehouse.liveWrittenBefore(resource, readStartedAt).pipe(Effect.map((ids) => ids.filter((id) => !seen.has(id))))

/**
 * Absence after a clean pass: the gone rows that a second look also missed — the previous
 * clean pass, or this run's confirming read — are deleted, unless something wrote them since the
 * read began; nothing is deleted when more than `sync.deletion_threshold` of the live rows would
 * go at once.
 */
const settleAbsences = (
  deps: AbsenceDeps,
  connection: string,
  resource: ReconcileResource,
  read: WholeRead,
  absent: { readonly gone: ReadonlyArray<string>; readonly confirmed: ReadonlyArray<string> },
  notes: Array<string>
) =>
  deps.sql.withTransaction(
    Effect.gen(function* () {
      const { gone, confirmed } = absent
      let deleted = 0
      let refused = 0
      if (confirmed.length > 0 && read.live > 0 && confirmed.length / read.live > deps.threshold) {
        refused = confirmed.length
        notes.push(
          `deletion refused: ${confirmed.length} of ${read.live} live records (${percent(confirmed.length / read.live)}) ` +
            `missing from two clean reads, more than the threshold of ${percent(deps.threshold)}; nothing deleted`
        )
      } else if (confirmed.length > 0) {
        // A poll or a crawl that wrote one of them since the read began has seen it: it stays.
        const untouched = yield* deps.warehouse.liveWrittenBefore(resource, read.startedAt, {
          ids: confirmed,
          lock: true
        })
        const now = yield* DateTime.now
        deleted = (yield* deps.warehouse.markDeleted(resource, untouched, now, { source: "reconcile" })).deleted
        // Nor do the crawls count misses for them any more; a crawl that lists one again
        // undeletes it (CrawlRuns.recordBatch).
        yield* deps.crawlRuns.forgetMisses(connection, resource, untouched)
      }
      if (gone.length > MAX_TRACKED_GONE) {
        notes.push(`more than ${MAX_TRACKED_GONE} records gone: not tracked for deletion`)
      }
      return {
        gone: gone.length,
        gone_ids: gone.length > MAX_TRACKED_GONE ? null : gone,
        deleted,
        refused,
        note: notes.length === 0 ? null : notes.join("; ")
      }
    })
  )

/**
 * Absent once: read the listing again now (a record hidden by drift across a page boundary shows
 * up), if the allowance can pay for it; else the next run confirms. The ids a clean second read
 * listed, and its pages (none: not needed or not affordable).
 */
const secondLook = (read: WholeRead, unconfirmed: number, after: AfterRead, notes: Array<string>) =>
  Effect.gen(function* () {
    const pages = read.report.total_pages ?? read.report.pages_read
    const left = after.requestsLeft
    if (left < pages) {
      notes.push(
        `${unconfirmed} record(s) not listed; confirming in this run needs ${pages} requests and ` +
          `${left} are left: deleted only if the next clean pass misses them too`
      )
      return { seenAgain: undefined, pages: undefined }
    }
    const again = yield* after.readAgain
    if (!again.clean) notes.push("the listing changed during the confirming read: the next clean pass confirms")
    return { seenAgain: again.clean ? again.seen : undefined, pages: again.pages }
  })

/** Why absences cannot be counted after this whole read, if they cannot. */
export const uncountable = (read: WholeRead): string | undefined => {
  const { report } = read
  if (report.first_page > 1) return `read from page ${report.first_page} (resumed): absences not counted`
  if (read.drifted) return "the listing changed while it was read: absences not counted"
  if (report.api_total !== null && read.seen.size + shortReadSlack(report.api_total) < report.api_total) {
    return `the listing's total_count said ${report.api_total} records but its pages held ${read.seen.size}: absences not counted`
  }
  return undefined
}

/**
 * Deletion follows the crawler's rules (docs/sync.md): records the API no longer lists are counted
 * (`gone`) only after a resource was read whole in this run, from page 1, with `total_count` the
 * same on every page (a listing that moved under the read can hide records across page
 * boundaries), and only among rows written before the read began; they are marked deleted once a
 * second look missed them too: a second whole read in the same run when the allowance can pay for
 * it, else the next clean pass (each report keeps the ids it found gone). A partial read never
 * deletes anything.
 */
export const countAbsences = (
  deps: AbsenceDeps,
  connection: string,
  resource: ReconcileResource,
  read: WholeRead,
  after: AfterRead
) =>
  Effect.gen(function* () {
    const note = uncountable(read)
    if (note !== undefined) return { ...read.report, note }
    // A record another connection that still crawls the listing tracks is not gone: its token
    // sees it (another advisor's book), as the crawls' deletion by absence holds it (CrawlHolds).
    const absent = yield* absentIds(deps, resource, read.seen, read.startedAt)
    const held = yield* deps.crawlRuns.heldElsewhere(connection, resource, absent)
    const gone = held.ids.size === 0 ? absent : absent.filter((id) => !held.ids.has(id))
    const missedBefore = yield* after.missedBefore
    const unconfirmed = gone.filter((id) => !missedBefore.has(id))
    const notes: Array<string> = [heldNote(held)].filter((note) => note !== null)
    const again =
      unconfirmed.length > 0 && gone.length <= MAX_TRACKED_GONE
        ? yield* secondLook(read, unconfirmed.length, after, notes)
        : { seenAgain: undefined, pages: undefined }
    const { seenAgain } = again
    // Listed by the confirming read: the first read missed them (drift), they are not gone.
    const stillGone = seenAgain === undefined ? gone : gone.filter((id) => !seenAgain.has(id))
    const confirmed = stillGone.filter((id) => missedBefore.has(id) || seenAgain !== undefined)
    const settled = yield* settleAbsences(deps, connection, resource, read, { gone: stillGone, confirmed }, notes)
    return {
      ...read.report,
      ...(again.pages === undefined ? {} : { confirm_pages: again.pages }),
      clean: true,
      ...settled
    }
  })
