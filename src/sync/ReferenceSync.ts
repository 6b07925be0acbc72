/**
 * ReferenceSync: the slow-changing reference data — the authenticated user (`GET /v1/me`, spec
 * §2.11), the books with their users and teams (`GET /v1/books`, spec §4: each book lists
 * `users[].id` and `teams[].id`, which the warehouse merges into `crm.users` and `crm.teams`), and
 * the project templates of every book (`GET /v1/project_templates?book_id=…`, spec §2.4) with their
 * milestones, outcomes, form fields and attachments (child tables, written by the warehouse).
 *
 * Spec §4 rule 2: filtered by book, the templates listing includes the company-wide templates
 * usable for it, so the same template comes back once per book; it is written once per refresh.
 * Every listing is read at `per_page=100` at the `bulk` priority. The daemon refreshes this every
 * `schedules.reference` (default 24 hours); the backfill does it first.
 *
 * Deletions show only as absence here too. A refresh that read everything has the whole listing of
 * books and of templates, so it settles absences as a crawl does (CrawlRuns, one run per resource):
 * a book or template missed by two complete refreshes in a row is marked deleted, and one that
 * comes back is undeleted. A firm has a handful of books, so the mass-deletion threshold alone
 * would refuse every deletion: one record at a time is always allowed, more only within it.
 */
import { Context, DateTime, Effect, Layer, Stream } from "effect"
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

export class ReferenceSync extends Context.Service<
  ReferenceSync,
  {
    readonly refresh: (client: CrmClientShape, options: ReferenceOptions) => Effect.Effect<ReferenceSummary, SyncError>
  }
>()("crm-sync/sync/ReferenceSync") {
  static readonly layer = Layer.effect(
    ReferenceSync,
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      const runs = yield* CrawlRuns
      const sql = yield* SqlClient
      const threshold = (yield* AppConfig).sync.deletion_threshold

      /** Records a complete listing of one resource and settles its absences (see the module comment). */
      const settleAbsences = (
        connection: string,
        resource: "books" | "project_templates",
        listing: { readonly ids: ReadonlyArray<string>; readonly counts: UpsertResult; readonly requests: number },
        source: Source
      ) =>
        sql.withTransaction(
          Effect.gen(function* () {
            const run = yield* runs.open(connection, resource, source)
            yield* runs.recordBatch(run, {
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
            return yield* runs.finishClean(run, {
              threshold,
              allowAtOnce: 1,
              deleteRecords: (ids) =>
                Effect.map(warehouse.markDeleted(resource, ids, now, { source }), (deleted) => deleted.deleted)
            })
          })
        )

      const refresh = Effect.fn("ReferenceSync.refresh")(
        function* (client: CrmClientShape, options: ReferenceOptions) {
          const connection = client.connection.name
          const source = options.source
          const counts = { inserted: 0, updated: 0, unchanged: 0, rejected: 0 }
          const byResource = {
            books: { counts: noWrites, requests: 0 },
            project_templates: { counts: noWrites, requests: 0 }
          }
          let requests = 0
          let records = 0
          const bookIds: Array<string> = []
          const templateIds = new Set<string>()
          let sharedTemplateCopies = 0
          let booksDone = 0

          const tally = (written: {
            readonly inserted: number
            readonly updated: number
            readonly unchanged: number
            readonly skipped: number
            readonly rejected: number
          }) => {
            counts.inserted += written.inserted
            counts.updated += written.updated
            counts.unchanged += written.unchanged + written.skipped
            counts.rejected += written.rejected
          }
          const progress = (step: ReferenceProgress["step"]) =>
            options.onProgress === undefined
              ? Effect.void
              : options.onProgress({ connection, step, requests, records, booksDone, books: bookIds.length })

          // The token's own user (and a check that the token works before the listings).
          const me = yield* client.me({ priority: "bulk" })
          requests++
          tally(yield* warehouse.upsert("users", [me], { source }))
          yield* progress("me")

          yield* client
            .paginate((page) => client.listBooks(page, { priority: "bulk" }))
            .pipe(
              Stream.runForEach((page) =>
                Effect.gen(function* () {
                  requests++
                  byResource.books.requests++
                  records += page.data.length
                  for (const raw of page.data) {
                    const id = idOf(raw)
                    if (id !== undefined && !bookIds.includes(id)) bookIds.push(id)
                  }
                  const written = yield* warehouse.upsert("books", page.data, { source })
                  byResource.books.counts = addUpsertResults(byResource.books.counts, written)
                  tally(written)
                  yield* progress("books")
                })
              )
            )

          for (const bookId of bookIds) {
            yield* client
              .paginate((page) => client.listProjectTemplates({ ...page, book_id: bookId }, { priority: "bulk" }))
              .pipe(
                Stream.runForEach((page) =>
                  Effect.gen(function* () {
                    requests++
                    byResource.project_templates.requests++
                    // Company-wide templates come back under every book (spec §4 rule 2).
                    const fresh = page.data.filter((raw) => {
                      const id = idOf(raw)
                      if (id === undefined) return true
                      if (templateIds.has(id)) {
                        sharedTemplateCopies++
                        return false
                      }
                      templateIds.add(id)
                      return true
                    })
                    records += fresh.length
                    if (fresh.length > 0) {
                      const written = yield* warehouse.upsert("project_templates", fresh, { source })
                      byResource.project_templates.counts = addUpsertResults(
                        byResource.project_templates.counts,
                        written
                      )
                      tally(written)
                    }
                    yield* progress("project_templates")
                  })
                )
              )
            booksDone++
          }
          yield* progress("project_templates")

          // Every listing was read to its end: what was not in it is absent.
          const books = yield* settleAbsences(connection, "books", { ids: bookIds, ...byResource.books }, source)
          const templates = yield* settleAbsences(
            connection,
            "project_templates",
            { ids: [...templateIds], ...byResource.project_templates },
            source
          )
          for (const note of [books.note, templates.note]) {
            if (note !== null) yield* Effect.logWarning(`reference: ${note}`)
          }

          const summary: ReferenceSummary = {
            connection,
            requests,
            books: bookIds.length,
            projectTemplates: templateIds.size,
            sharedTemplateCopies,
            deleted: books.deleted + templates.deleted,
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

      return ReferenceSync.of({ refresh })
    })
  )
}
