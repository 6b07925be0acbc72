/**
 * The by-id part of a reconciliation. Tasks, meetings and notes have no listing (spec §4: only
 * `GET /v1/tasks/{id}`, `GET /v1/meetings/{id}` and the three note paths), so they arrive by
 * webhook alone, and a delivery the sender gave up on, or the events of a time without a
 * subscription (spec §3), would leave their rows stale for good. A run re-reads the ids the
 * warehouse knows in the connection's books, least recently checked first (`crm_sync.by_id_checks`),
 * within a cap: a newer version is written (`source = reconcile`, forward-only), a 404 marks the row
 * deleted, and the single-meeting read fills `event_participants`, which no event carries. A meeting
 * with a stored, live transcript has its transcript read again too (one more request).
 */
import * as DateTime from "effect/DateTime"
import * as Effect from "effect/Effect"
import { SqlClient } from "effect/sql/SqlClient"
import type { CrmClientShape, NoteParent, Received } from "../crm/CrmClient.ts"
import { CrmPermitSpent } from "../crm/CrmTransport.ts"
import type { CrmError } from "../crm/CrmError.ts"
import { type KnownRecord, Warehouse } from "../warehouse/Warehouse.ts"
import { idOf, PER_PAGE } from "./PageFetcher.ts"

/**
 * The resources read one id at a time. Clients, prospects and contacts have neither a listing nor
 * a single-record read: nothing can repair them but their next event (docs/reliability.md, "What
 * reconciliation can repair").
 */
export const ByIdResources = ["tasks", "meetings", "notes"] as const
export type ByIdResource = (typeof ByIdResources)[number]

/** What the by-id part of one run did (snake_case: it is stored as JSON in the run's report). */
/** How many repaired records the report names. */
const MAX_NAMED_REPAIRS = 100

export interface ByIdReport {
  /** Live rows of tasks, meetings and notes in the connection's books. */
  readonly known: number
  /** Read in this run. */
  readonly checked: number
  /** Written with the CRM's version (it differed from the stored row). */
  readonly repaired: number
  /** Which, as "tasks tk_1", the first `MAX_NAMED_REPAIRS` (the count has them all). */
  readonly repaired_ids?: ReadonlyArray<string>
  /** Answered 404: marked deleted. */
  readonly deleted: number
  /** Refused by the warehouse (kept in `crm_sync.undecodable_records`). */
  readonly rejected: number
  /** Could not be read: a note with no known parent, or a 403. */
  readonly unreadable: number
  /** Known rows left for a later run (the cap ran out first). */
  readonly not_reached: number
  /** Requests sent, retries included. */
  readonly requests: number
}

export const emptyByIdReport: ByIdReport = {
  known: 0,
  checked: 0,
  repaired: 0,
  deleted: 0,
  rejected: 0,
  unreadable: 0,
  not_reached: 0,
  requests: 0
}

type Outcome = "current" | "repaired" | "deleted" | "rejected" | "unreadable"

type Candidate = KnownRecord

/** When each record of `connection` was last checked by id, epoch milliseconds by `resource/id`. */
const lastChecks = (connection: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    const rows = yield* sql<{ key: string; checked_ms: number }>`
      SELECT resource || '/' || id AS key, (extract(epoch FROM checked_at) * 1000)::float8 AS checked_ms
      FROM crm_sync.by_id_checks WHERE connection = ${connection}`
    return new Map(rows.map((row) => [row.key, row.checked_ms]))
  })

/** The parent path a note is read under: its `notable_type` (any case), else its household. */
export const noteParentOf = (
  row: Pick<Candidate, "notable_type" | "notable_id" | "household_id">
): { readonly parent: NoteParent; readonly id: string } | undefined => {
  const kind = row.notable_type?.toLowerCase()
  if ((kind === "household" || kind === "contact" || kind === "business") && row.notable_id !== null) {
    return { parent: kind, id: row.notable_id }
  }
  return row.household_id === null ? undefined : { parent: "household", id: row.household_id }
}

/** A 403 says this token may not read the record, not that it is gone. */
const isForbidden = (error: CrmError) => error.reason._tag === "Forbidden"
const isNotFound = (error: CrmError) => error.reason._tag === "NotFound"

/**
 * Every book the connection's token sees (one request per 100 books). Only rows in the
 * connection's own books are read: with several connections on one warehouse, a record another
 * connection's user sees would answer 404 here without being gone.
 */
const booksOf = (client: CrmClientShape) =>
  Effect.gen(function* () {
    const ids: Array<string> = []
    for (let page = 1; ; page++) {
      const listed = yield* client.listBooks({ page, per_page: PER_PAGE }, { priority: "bulk" })
      for (const book of listed.data) {
        const id = idOf(book)
        if (id !== undefined) ids.push(id)
      }
      if (listed.data.length === 0 || page >= listed.pagination.total_pages) return ids
    }
  })

/** The single-record read of one candidate; undefined for a note whose parent is unknown. */
const readOne = (client: CrmClientShape, row: Candidate): Effect.Effect<Received<unknown>, CrmError> | undefined => {
  const options = { priority: "bulk" } as const
  switch (row.resource) {
    case "tasks":
      return client.getTask(row.id, options)
    case "meetings":
      return client.getMeeting(row.id, options)
    case "notes": {
      const parent = noteParentOf(row)
      return parent === undefined ? undefined : client.getNote(parent.parent, parent.id, row.id, options)
    }
  }
}

/** Who goes first: never checked before least recently checked, then least recently written. */
export const leastRecentlyChecked = (
  known: ReadonlyArray<KnownRecord>,
  checkedAt: ReadonlyMap<string, number>
): ReadonlyArray<KnownRecord> => {
  const order = (row: KnownRecord) => checkedAt.get(`${row.resource}/${row.id}`) ?? Number.NEGATIVE_INFINITY
  return known.toSorted(
    (a, b) =>
      order(a) - order(b) ||
      a.synced_ms - b.synced_ms ||
      a.resource.localeCompare(b.resource) ||
      (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)
  )
}

/** Notes when a record was checked by id, and what was found. */
const recordCheck = (connection: string, row: Candidate, outcome: Outcome) =>
  Effect.flatMap(
    SqlClient,
    (sql) => sql`
      INSERT INTO crm_sync.by_id_checks (connection, resource, id, checked_at, outcome)
      VALUES (${connection}, ${row.resource}, ${row.id}, now(), ${outcome})
      ON CONFLICT (connection, resource, id) DO UPDATE SET checked_at = excluded.checked_at, outcome = excluded.outcome`
  )

/**
 * Reads again the transcript of a meeting that has a stored, live one: a transcript that became
 * hidden sends no event (spec §6.4), and its read answers null, which retires the stored one (as
 * does a 404). The read is stamped before it starts (`Warehouse.readStarted`), so it is ordered
 * with the processor's reads of the same transcript. Returns the rows changed; a 403 changes nothing.
 */
const recheckTranscript = (
  client: CrmClientShape,
  meetingId: string,
  count: <A, E>(effect: Effect.Effect<A, E>) => Effect.Effect<A, E>
) =>
  Effect.gen(function* () {
    const warehouse = yield* Warehouse
    const readAt = yield* warehouse.readStarted
    const read = yield* count(client.getTranscript(meetingId, { priority: "bulk" })).pipe(
      Effect.map((received): { raw: unknown } | undefined => ({ raw: received.raw })),
      Effect.catchIf(
        (error) => isNotFound(error) || isForbidden(error),
        (error) => Effect.succeed(isNotFound(error) ? { raw: undefined } : undefined)
      )
    )
    if (read === undefined) return 0
    const { written, retired } = yield* warehouse.writeTranscripts([{ meetingId, raw: read.raw, readAt }], {
      source: "reconcile"
    })
    return written + retired
  })

/** Reads one candidate (its requests counted by `count`) and writes what differs. */
const checkOne = (
  client: CrmClientShape,
  row: Candidate,
  count: <A, E>(effect: Effect.Effect<A, E>) => Effect.Effect<A, E>
) =>
  Effect.gen(function* () {
    const warehouse = yield* Warehouse
    const read = readOne(client, row)
    if (read === undefined) return "unreadable" as const
    const received = yield* count(read).pipe(
      Effect.map((value) => ({ _tag: "Read" as const, value })),
      Effect.catchIf(
        (error) => isNotFound(error) || isForbidden(error),
        (error) => Effect.succeed({ _tag: isNotFound(error) ? ("Gone" as const) : ("Forbidden" as const) })
      )
    )
    if (received._tag === "Forbidden") return "unreadable" as const
    if (received._tag !== "Read") {
      const { deleted } = yield* warehouse.markDeleted(row.resource, [row.id], yield* DateTime.now, {
        source: "reconcile"
      })
      return deleted > 0 ? ("deleted" as const) : ("current" as const)
    }
    const counts = yield* warehouse.upsert(row.resource, [received.value.raw], { source: "reconcile" })
    if (counts.rejected > 0) return "rejected" as const
    const transcript = row.live_transcript ? yield* recheckTranscript(client, row.id, count) : 0
    return counts.inserted + counts.updated + transcript > 0 ? ("repaired" as const) : ("current" as const)
  })

/**
 * Re-reads known ids of the connection's tasks, meetings and notes, least recently checked first,
 * until `cap` requests have been sent (the last read's retries may overrun it by a few). A CRM
 * failure other than 404/403 ends the pass with that error (what was checked stays recorded).
 */
export const reconcileById = Effect.fnUntraced(function* (client: CrmClientShape, cap: number) {
  const warehouse = yield* Warehouse
  const connection = client.connection.name
  // Counted here for the cap, and passed on to the caller's counter (the run's total).
  const outer = yield* CrmPermitSpent
  let requests = 0
  const counted = Effect.provideService(CrmPermitSpent, () => {
    requests++
    outer?.()
  })

  let anyLive = 0
  for (const resource of ByIdResources) anyLive += yield* warehouse.count(resource)
  // Nothing known: not even the books are worth a request.
  if (anyLive === 0 || cap <= 0) return emptyByIdReport

  const known = yield* warehouse.knownInBooks(yield* counted(booksOf(client)))
  // At most one request per candidate: the cap bounds how many are worth taking.
  const candidates = leastRecentlyChecked(known, yield* lastChecks(connection)).slice(0, Math.max(0, cap - requests))
  const tally: Record<Outcome, number> = { current: 0, repaired: 0, deleted: 0, rejected: 0, unreadable: 0 }
  let checked = 0
  const repairedIds: Array<string> = []
  for (const row of candidates) {
    if (requests >= cap) break
    const outcome = yield* checkOne(client, row, counted)
    yield* recordCheck(connection, row, outcome)
    tally[outcome] += 1
    checked += 1
    if (outcome === "repaired" && repairedIds.length < MAX_NAMED_REPAIRS) repairedIds.push(`${row.resource} ${row.id}`)
  }
  return {
    known: known.length,
    checked,
    repaired: tally.repaired,
    repaired_ids: repairedIds,
    deleted: tally.deleted,
    rejected: tally.rejected,
    unreadable: tally.unreadable,
    not_reached: Math.max(0, known.length - checked),
    requests
  } satisfies ByIdReport
})
