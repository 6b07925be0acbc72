/**
 * ReferenceSync: the slow-changing reference data of a connection — the authenticated user
 * (`GET /v1/me`, spec §2.11), the books with their users and teams (`GET /v1/books`, spec §4) and
 * the project templates of every book (`GET /v1/project_templates?book_id=…`, spec §2.4), every
 * listing read at `per_page=100` at the `bulk` priority. The daemon refreshes this every
 * `schedules.reference` (default 24 hours); the backfill does it first. Deletions show only as
 * absence here too: a book or template missed by two complete refreshes in a row is marked
 * deleted, and one that comes back is undeleted.
 */
import * as Context from "effect/Context"
import * as DateTime from "effect/DateTime"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Stream from "effect/Stream"
import { SqlClient } from "effect/sql/SqlClient"
import { AppConfig } from "../config/AppConfig.ts"
import type { CrmClientShape } from "../crm/CrmClient.ts"
import type { Source, UpsertResult } from "../warehouse/Warehouse.ts"
import { addUpsertResults, noWrites, Warehouse } from "../warehouse/Warehouse.ts"
import { CrawlRuns } from "./CrawlRuns.ts"
import { idOf } from "./PageFetcher.ts"
import { type SyncError, toSyncError } from "./SyncError.ts"

export interface ReferenceProgress {
  readonly connection: string
  readonly step: "me" | "books" | "project_templates"
  readonly requests: number
  readonly records: number
  /** Books whose templates have been read, of how many. */
  readonly booksDone: number
  readonly books: number
}

export interface ReferenceSummary {
  readonly connection: string
  readonly requests: number
  readonly books: number
  readonly projectTemplates: number
  /** Template copies listed under more than one book (company-wide templates), written once. */
  readonly sharedTemplateCopies: number
  /** Books and templates marked deleted: missed by this complete refresh and the one before. */
  readonly deleted: number
  readonly inserted: number
  readonly updated: number
  readonly unchanged: number
  readonly rejected: number
}

export interface ReferenceOptions {
  readonly source: Extract<Source, "crawl" | "backfill">
  readonly onProgress?: (progress: ReferenceProgress) => Effect.Effect<void>
}

/** What a refresh needs: the warehouse, the crawl bookkeeping, and the mass-deletion threshold. */
interface ReferenceDeps {
  readonly warehouse: Warehouse["Service"]
  readonly runs: CrawlRuns["Service"]
  readonly sql: SqlClient
  readonly threshold: number
}

/** What one refresh has read and written so far. */
interface Refresh {
  readonly connection: string
  readonly options: ReferenceOptions
  readonly counts: { inserted: number; updated: number; unchanged: number; rejected: number }
  /** Per listing, for its crawl run. */
  readonly byResource: Record<"books" | "project_templates", { counts: UpsertResult; requests: number }>
  requests: number
  records: number
  readonly bookIds: Array<string>
  readonly templateIds: Set<string>
  sharedTemplateCopies: number
  booksDone: number
}

const startRefresh = (connection: string, options: ReferenceOptions): Refresh => ({
  connection,
  options,
  counts: { inserted: 0, updated: 0, unchanged: 0, rejected: 0 },
  byResource: {
    books: { counts: noWrites, requests: 0 },
    project_templates: { counts: noWrites, requests: 0 }
  },
  requests: 0,
  records: 0,
  bookIds: [],
  templateIds: new Set(),
  sharedTemplateCopies: 0,
  booksDone: 0
})

const tally = (refresh: Refresh, written: UpsertResult) => {
  refresh.counts.inserted += written.inserted
  refresh.counts.updated += written.updated
  refresh.counts.unchanged += written.unchanged + written.skipped
  refresh.counts.rejected += written.rejected
}

/** Counts one page of a listing's requests, for the refresh and for its resource. */
const countPage = (refresh: Refresh, resource: "books" | "project_templates") => {
  refresh.requests++
  refresh.byResource[resource].requests++
}

/** Tallies a listing's write, for the refresh and for its resource. */
const tallyListing = (refresh: Refresh, resource: "books" | "project_templates", written: UpsertResult) => {
  refresh.byResource[resource].counts = addUpsertResults(refresh.byResource[resource].counts, written)
  tally(refresh, written)
}

const progress = (refresh: Refresh, step: ReferenceProgress["step"]) => {
  const { connection, options, requests, records, booksDone, bookIds } = refresh
  return options.onProgress === undefined
    ? Effect.void
    : options.onProgress({ connection, step, requests, records, booksDone, books: bookIds.length })
}

/** The token's own user (and a check that the token works before the listings). */
const readMe = Effect.fnUntraced(function* (deps: ReferenceDeps, client: CrmClientShape, refresh: Refresh) {
  const me = yield* client.me({ priority: "bulk" })
  refresh.requests++
  tally(refresh, yield* deps.warehouse.upsert("users", [me], { source: refresh.options.source }))
  yield* progress(refresh, "me")
})

/**
 * The books. Each lists `users[].id` and `teams[].id` (spec §4), which the warehouse merges into
 * `crm.users` and `crm.teams`.
 */
const readBooks = (deps: ReferenceDeps, client: CrmClientShape, refresh: Refresh) =>
  client
    .paginate((page) => client.listBooks(page, { priority: "bulk" }))
    .pipe(
      Stream.runForEach((page) =>
        Effect.gen(function* () {
          countPage(refresh, "books")
          refresh.records += page.data.length
          for (const raw of page.data) {
            const id = idOf(raw)
            if (id !== undefined && !refresh.bookIds.includes(id)) refresh.bookIds.push(id)
          }
          tallyListing(
            refresh,
            "books",
            yield* deps.warehouse.upsert("books", page.data, { source: refresh.options.source })
          )
          yield* progress(refresh, "books")
        })
      )
    )

/**
 * The templates of a page not seen under an earlier book, counting the others as shared copies.
 * Spec §4 rule 2: filtered by book, the templates listing includes the company-wide templates
 * usable for it, so the same template comes back once per book; it is written once per refresh.
 */
const unseenTemplates = <A>(refresh: Refresh, data: ReadonlyArray<A>) =>
  data.filter((raw) => {
    const id = idOf(raw)
    if (id === undefined) return true
    if (refresh.templateIds.has(id)) {
      refresh.sharedTemplateCopies++
      return false
    }
    refresh.templateIds.add(id)
    return true
  })

/**
 * The project templates of every book, with their milestones, outcomes, form fields and
 * attachments (child tables, written by the warehouse).
 */
const readTemplates = Effect.fnUntraced(function* (deps: ReferenceDeps, client: CrmClientShape, refresh: Refresh) {
  for (const bookId of refresh.bookIds) {
    yield* client
      .paginate((page) => client.listProjectTemplates({ ...page, book_id: bookId }, { priority: "bulk" }))
      .pipe(
        Stream.runForEach((page) =>
          Effect.gen(function* () {
            countPage(refresh, "project_templates")
            const fresh = unseenTemplates(refresh, page.data)
            refresh.records += fresh.length
            if (fresh.length > 0) {
              const written = yield* deps.warehouse.upsert("project_templates", fresh, {
                source: refresh.options.source
              })
              tallyListing(refresh, "project_templates", written)
            }
            yield* progress(refresh, "project_templates")
          })
        )
      )
    refresh.booksDone++
  }
  yield* progress(refresh, "project_templates")
})

/**
 * Records a complete listing of one resource and settles its absences as a crawl does (CrawlRuns,
 * one run per resource). A firm has a handful of books, so the mass-deletion threshold alone would
 * refuse every deletion: one record at a time is always allowed, more only within it.
 */
const settleAbsences = (
  deps: ReferenceDeps,
  connection: string,
  resource: "books" | "project_templates",
  listing: { readonly ids: ReadonlyArray<string>; readonly counts: UpsertResult; readonly requests: number },
  source: Source
) =>
  deps.sql.withTransaction(
    Effect.gen(function* () {
      const run = yield* deps.runs.open(connection, resource, source)
      yield* deps.runs.recordBatch(run, {
        lastPage: 1,
        totalPages: 1,
        totalCount: listing.ids.length,
        ids: listing.ids,
        unique: new Set(listing.ids).size,
        counts: listing.counts,
        requests: listing.requests,
        rechecks: 0
      })
      const now = yield* DateTime.now
      return yield* deps.runs.finishClean(run, {
        threshold: deps.threshold,
        allowAtOnce: 1,
        deleteRecords: (ids) =>
          Effect.map(deps.warehouse.markDeleted(resource, ids, now, { source }), (deleted) => deleted.deleted)
      })
    })
  )

/** Every listing was read to its end: what was not in it is absent. Returns how many were deleted. */
const settleListings = Effect.fnUntraced(function* (deps: ReferenceDeps, refresh: Refresh) {
  const { connection, bookIds, templateIds, byResource } = refresh
  const source = refresh.options.source
  const books = yield* settleAbsences(deps, connection, "books", { ids: bookIds, ...byResource.books }, source)
  const templates = yield* settleAbsences(
    deps,
    connection,
    "project_templates",
    { ids: [...templateIds], ...byResource.project_templates },
    source
  )
  for (const note of [books.note, templates.note]) {
    if (note !== null) yield* Effect.logWarning(`reference: ${note}`)
  }
  return books.deleted + templates.deleted
})

const refresh = (deps: ReferenceDeps) =>
  Effect.fn("ReferenceSync.refresh")(
    function* (client: CrmClientShape, options: ReferenceOptions) {
      const state = startRefresh(client.connection.name, options)
      yield* readMe(deps, client, state)
      yield* readBooks(deps, client, state)
      yield* readTemplates(deps, client, state)
      const deleted = yield* settleListings(deps, state)

      const { connection, requests, counts } = state
      const summary: ReferenceSummary = {
        connection,
        requests,
        books: state.bookIds.length,
        projectTemplates: state.templateIds.size,
        sharedTemplateCopies: state.sharedTemplateCopies,
        deleted,
        ...counts
      }
      yield* Effect.logInfo("reference: refreshed").pipe(
        Effect.annotateLogs({
          connection,
          requests,
          books: summary.books,
          project_templates: summary.projectTemplates,
          inserted: counts.inserted,
          updated: counts.updated,
          deleted: summary.deleted
        })
      )
      return summary
    },
    (effect, client) =>
      Effect.mapError(effect, (error) => toSyncError("reference", { connection: client.connection.name })(error))
  )

export class ReferenceSync extends Context.Service<
  ReferenceSync,
  {
    readonly refresh: (client: CrmClientShape, options: ReferenceOptions) => Effect.Effect<ReferenceSummary, SyncError>
  }
>()("crm-sync/sync/ReferenceSync") {
  static readonly layer = Layer.effect(
    ReferenceSync,
    Effect.gen(function* () {
      const deps: ReferenceDeps = {
        warehouse: yield* Warehouse,
        runs: yield* CrawlRuns,
        sql: yield* SqlClient,
        threshold: (yield* AppConfig).sync.deletion_threshold
      }
      return ReferenceSync.of({ refresh: refresh(deps) })
    })
  )
}
