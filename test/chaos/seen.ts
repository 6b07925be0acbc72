/**
 * The chaos verdict's check that every content the daemon saw and kept is a version of the history
 * (issue 29), beside the chain checks of test/support/HistoryChains.ts.
 *
 * What the daemon certainly saw and kept:
 * - A listing page (businesses, annuity contracts, financial accounts) the sandbox answered 2xx
 *   with its body whole (its request log's `served`, option `recordServed`), whose request arrived
 *   while a run that reads that listing for the request's connection was running and that run
 *   succeeded: `poll:businesses` for an `updated_since` page; `crawl:<resource>`,
 *   `backfill:<resource>`, `reconcile` (and, for businesses, `poll:businesses`, which crawls while
 *   it has no cursor) for a page without. A succeeded run has committed every page it read (each
 *   page in a transaction with its bookkeeping; a retried transaction writes the same page again),
 *   and the leases keep a run that fails from reading beside a run that succeeds: one per listing
 *   and connection for the crawls, backfills and the poll, except the first poll (no cursor yet)
 *   beside a business crawl, and the reconciliation, which runs once the kills and faults stop.
 *   Left out, and only these: pages read by a run that failed or never finished (its replica or
 *   backfill was killed, PostgreSQL went away, a later page failed), for the daemon may not have
 *   committed them and reads them again later, perhaps newer; such a page is still judged when a
 *   succeeded run serves the same content again. (A failed run's pages committed before its
 *   failure are left out too: nothing records which ones they were. Not left out, though a
 *   succeeded crawl may drop it: a page read ahead past the end of a listing that shrank under the
 *   crawl, which PageFetcher interrupts; a report of one names its request.)
 *   Each such record's content must be a version: a row of `crm_history.<table>` with its id and
 *   `content_hash` = md5 of the record as received (`raw` is the received object, as jsonb).
 * - A `client.updated` delivery the inbox holds as processed: for each field its `changed_fields`
 *   names, some version of the client valid at or after the delivery's signed time (the inbox's
 *   `signed_at`, what the daemon orders client fields by) holds the delivered value. Clients are
 *   merged field by field (src/warehouse/ClientWrites.ts), so a delivery is no whole version; a
 *   late one belongs in the middle of the chain, from its signed time. A `client.created` stands
 *   for no time (it may be older than every update applied) and is judged by the chain checks.
 * Households have no snapshot of their own (they are merged from the sightings in other records)
 * and are judged by the chain checks alone.
 */
import type { RequestLogEntry } from "@crm-sync/sandbox"

export type Query = <A extends object = Record<string, unknown>>(
  statement: string,
  params?: ReadonlyArray<unknown>
) => Promise<ReadonlyArray<A>>

export interface SeenInput {
  readonly query: Query
  /** The sandbox's request log, recorded with option `recordServed`. */
  readonly requests: ReadonlyArray<RequestLogEntry>
  /** `servedContents` of the sandbox: the JSON of each content a `served` entry numbers. */
  readonly contents: ReadonlyArray<string>
  /** How far the sandbox's clock (its request log) runs ahead of the database's. */
  readonly clockSkewMs: number
  /** The connection a logged credential is (its name in the config), or undefined. */
  readonly connectionOf: (credential: RequestLogEntry["credential"]) => string | undefined
}

/** The jobs that read a served listing page: their succeeded runs commit what they read. */
const readersOf = (entry: RequestLogEntry, resource: string): ReadonlyArray<string> =>
  resource === "businesses" && entry.query.updated_since !== undefined
    ? ["poll:businesses"]
    : [
        `crawl:${resource}`,
        `backfill:${resource}`,
        "reconcile",
        ...(resource === "businesses" ? ["poll:businesses"] : [])
      ]

interface Run {
  readonly job: string
  readonly connection: string | null
  readonly started: number
  readonly finished: number
}

/** A content the daemon kept: where it was first served. */
interface Kept {
  readonly resource: string
  readonly id: string
  readonly content: number
  readonly at: string
  readonly requestId: string | null
}

const CHUNK = 2_000

/** Of the snapshots given, those of `table` whose content no version of its id holds. */
const missingVersions = async (
  query: Query,
  table: string,
  kept: ReadonlyArray<Kept>,
  contents: SeenInput["contents"]
) => {
  const missing: Array<Kept> = []
  for (let from = 0; from < kept.length; from += CHUNK) {
    const chunk = kept.slice(from, from + CHUNK)
    const rows = await query<{ n: number }>(
      `SELECT s.n FROM jsonb_to_recordset($1::jsonb) AS s(n int, id text, raw jsonb)
       WHERE NOT EXISTS (SELECT 1 FROM crm_history."${table}" AS h
                         WHERE h.id = s.id AND h.content_hash = md5(s.raw::text))`,
      [`[${chunk.map((k, n) => `{"n":${n},"id":${JSON.stringify(k.id)},"raw":${contents[k.content]}}`).join(",")}]`]
    )
    missing.push(...rows.map((row) => chunk[row.n]!))
  }
  return missing
}

/** Each field a processed `client.updated` named (`f`: its delivery, client, value and signed time). */
const clientFields = `
  WITH d AS (
    SELECT i.hook_id, COALESCE(i.signed_at, i.received_at) AS signed_at, convert_from(i.body, 'UTF8')::jsonb AS body
    FROM crm_sync.webhook_inbox AS i
    WHERE i.status = 'processed' AND i.event_type = 'client.updated'
  ),
  f AS (
    SELECT d.hook_id, d.signed_at, d.body -> 'client' ->> 'id' AS id, field, d.body -> 'client' -> field AS value
    FROM d, jsonb_array_elements_text(d.body -> 'changed_fields') AS field
    WHERE field <> 'id' AND d.body -> 'client' ? field
  )`

/** The fields no version of the client valid at or after their signed time holds. */
const missingClientFields = `${clientFields}
  SELECT f.hook_id, f.id, f.field, f.signed_at::text AS signed_at
  FROM f
  WHERE NOT EXISTS (
    SELECT 1 FROM crm_history.clients AS h
    WHERE h.id = f.id AND (h.valid_to IS NULL OR h.valid_to > f.signed_at) AND h.raw -> f.field = f.value)
  ORDER BY f.signed_at`

/**
 * The mismatches (`crm_history.<table> <id>: a content the daemon saw at <t> is no version`, at
 * most 10 per table) and the figures of this check.
 */
export const judgeSeenVersions = async (input: SeenInput) => {
  const runs = await input.query<{ job: string; connection: string | null; started: number; finished: number }>(
    `SELECT job, connection, (extract(epoch FROM started_at) * 1000)::float8 AS started,
            (extract(epoch FROM finished_at) * 1000)::float8 AS finished
     FROM crm_sync.job_runs WHERE status = 'succeeded' AND finished_at IS NOT NULL`
  )
  const byJob = new Map<string, Array<Run>>()
  for (const run of runs) {
    const key = `${run.connection ?? ""}/${run.job}`
    const held = byJob.get(key)
    if (held === undefined) byJob.set(key, [run])
    else held.push(run)
  }
  const committed = (entry: RequestLogEntry, resource: string) => {
    const connection = input.connectionOf(entry.credential)
    if (connection === undefined) return false
    // The request log's time is the sandbox's clock; the runs' the database's.
    const at = Date.parse(entry.at) - input.clockSkewMs
    return readersOf(entry, resource).some((job) =>
      (byJob.get(`${connection}/${job}`) ?? []).some((run) => run.started <= at && at <= run.finished)
    )
  }
  const served = new Set<string>()
  const kept = new Map<string, Kept>()
  let pagesLeftOut = 0
  for (const entry of input.requests) {
    if (entry.served === null) continue
    const { resource, records } = entry.served
    const certain = committed(entry, resource)
    if (!certain) pagesLeftOut++
    for (const [id, content] of records) {
      const key = `${resource}/${id}/${content}`
      served.add(key)
      if (certain && !kept.has(key)) kept.set(key, { resource, id, content, at: entry.at, requestId: entry.request_id })
    }
  }
  const mismatches: Array<string> = []
  const byTable = new Map<string, Array<Kept>>()
  for (const snapshot of kept.values()) {
    const held = byTable.get(snapshot.resource)
    if (held === undefined) byTable.set(snapshot.resource, [snapshot])
    else held.push(snapshot)
  }
  for (const [table, snapshots] of byTable) {
    const lost = await missingVersions(input.query, table, snapshots, input.contents)
    mismatches.push(
      ...lost
        .slice(0, 10)
        .map(
          (k) =>
            `crm_history.${table} ${k.id}: a content the daemon saw at ${k.at} (${k.requestId ?? "request"}) is no version`
        )
    )
  }
  const fields = await input.query<{ hook_id: string; id: string; field: string; signed_at: string }>(
    missingClientFields
  )
  mismatches.push(
    ...fields
      .slice(0, 10)
      .map(
        (f) =>
          `crm_history.clients ${f.id}: a content the daemon saw at ${f.signed_at} (delivery ${f.hook_id}, ${f.field}) is no version`
      )
  )
  const [checked] = await input.query<{ n: number }>(`${clientFields} SELECT count(*)::int AS n FROM f`)
  return {
    mismatches,
    figures: {
      history_contents_served: served.size,
      history_contents_judged: kept.size,
      history_pages_not_judged: pagesLeftOut,
      history_client_fields_judged: checked?.n ?? 0
    }
  }
}
