/**
 * The verdict of a chaos run, once everything has settled: the warehouse against the sandbox's own
 * truth, field by field (`deleted_at` included); every delivery the sandbox saw answered 2xx in the
 * inbox once and applied; every outbox row settled, every valid one created exactly once; no
 * request over a bucket's limit (a 429 no fault caused); no secret in any log; every live meeting's
 * stored transcript the CRM's current one, and none of a deleted meeting or a hidden transcript
 * in `crm.current_meeting_transcripts`. With many connections (run.ts `--connections`), the listings
 * are every connection's (the warehouse holds their union) and every connection's first runs have
 * succeeded, none's last run failed. The history (crm_history) of every resource keeping one:
 * versions chained without gap or overlap, the current version the current row, no version
 * repeating the one before (test/support/HistoryChains.ts), and every content the daemon certainly
 * saw and kept a version (seen.ts says which those are). Returns the mismatches (empty: the run
 * passed), one line each with its reason, and the figures.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Redacted } from "effect"
import { Reactivity } from "effect/reactivity"
import type { RequestLogEntry, Sandbox } from "@crm-sync/sandbox"
import { HISTORY_TABLES, historyProblems } from "../support/HistoryChains.ts"
import { compareTable } from "../sync/compare.ts"
import type { Database } from "./cluster.ts"
import { judgeSeenVersions } from "./seen.ts"

type Json = Record<string, unknown>

export interface VerdictInput {
  readonly sandbox: Sandbox["Service"]
  /** When replicas were killed (epoch ms): a 429 its receiver died with can reach nobody. */
  readonly killedAt: ReadonlyArray<number>
  /** How far the sandbox's clock (its request log) runs ahead of this process's. */
  readonly clockSkewMs: number
  readonly database: Database
  /** Every connection's token: the warehouse's listings must equal the union of theirs. */
  readonly tokens: ReadonlyArray<string>
  /** Many-connections mode: the connections whose first runs must be done, none's last failed. */
  readonly connections?: ReadonlyArray<string>
  /** The connection (config name) a request-log credential is, for the history's seen contents. */
  readonly connectionOf: (credential: RequestLogEntry["credential"]) => string | undefined
  readonly books: ReadonlyArray<string>
  readonly outboxRows: ReadonlyArray<{ id: number; valid: boolean; marker: string; operation: string }>
  readonly logs: ReadonlyArray<string>
  readonly secrets: Readonly<Record<string, string>>
}

const listings = {
  businesses: "/v1/businesses",
  annuity_contracts: "/v1/annuity_contracts",
  financial_accounts: "/v1/financial_accounts"
} as const

const listAll = async (base: string, token: string, path: string) => {
  const records: Array<Json> = []
  for (let page = 1; ; page++) {
    const response = await fetch(`${base}${path}?page=${page}&per_page=100`, {
      headers: { authorization: `Bearer ${token}` }
    })
    if (!response.ok) throw new Error(`${path} page ${page}: ${response.status}`)
    const body = (await response.json()) as { data: Array<Json>; pagination: { total_pages: number } }
    records.push(...body.data)
    if (body.data.length === 0 || page >= body.pagination.total_pages) return records
  }
}

const sameTime = (a: unknown, b: unknown) =>
  (a === null || a === undefined) && (b === null || b === undefined)
    ? true
    : new Date(a as string).getTime() === new Date(b as string).getTime()

/** What the warehouse must say of each webhook resource, per record the sandbox sent an event about. */
const eventResources = {
  tasks: { prefix: "task.", fields: ["status", "title", "completed_at"] },
  meetings: { prefix: "meeting.", fields: ["title", "notepad"] },
  notes: { prefix: "note.", fields: ["content"] }
} as const

/** How long a 429 takes to reach the other replicas (through PostgreSQL); see the 429 check. */
const RACE_MS = 250

/**
 * How long after a 429 a kill may have taken the block with it: the replica that received it is
 * SIGKILLed before it writes the block, and no other process can learn of it but by a 429 of its
 * own (seed 20261125 in CI: requests 316 and 332 ms into a block whose receiver was killed).
 */
const KILLED_WITH_MS = 1_000

const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)

type Query = <A extends object = Json>(statement: string, params?: ReadonlyArray<unknown>) => Promise<ReadonlyArray<A>>

/** The jobs of a personal-token or OAuth connection whose first runs a many-connections run awaits. */
export const FIRST_RUNS = [
  "poll:businesses",
  "crawl:annuity_contracts",
  "crawl:financial_accounts",
  "crawl:businesses",
  "reference"
] as const

/**
 * The (connection, job) pairs of `FIRST_RUNS` without a succeeded run, or whose last finished run
 * failed: `"advisor-007 crawl:businesses: no run succeeded"`.
 */
export const firstRunsLeft = async (query: Query, connections: ReadonlyArray<string>) => {
  const rows = await query<{ connection: string; job: string; succeeded: boolean; last: string | null }>(
    `SELECT c.connection, j.job,
            EXISTS (SELECT 1 FROM crm_sync.job_runs r
                    WHERE r.connection = c.connection AND r.job = j.job AND r.status = 'succeeded') AS succeeded,
            (SELECT r.status FROM crm_sync.job_runs r
             WHERE r.connection = c.connection AND r.job = j.job AND r.status IN ('succeeded', 'failed')
             ORDER BY r.id DESC LIMIT 1) AS last
     FROM unnest($1::text[]) AS c(connection), unnest($2::text[]) AS j(job)`,
    [connections, FIRST_RUNS]
  )
  return rows.flatMap((row) =>
    !row.succeeded
      ? [`${row.connection} ${row.job}: no run succeeded`]
      : row.last === "failed"
        ? [`${row.connection} ${row.job}: its last run failed`]
        : []
  )
}

/** SQL against the warehouse, one short-lived pool per call (the verdict runs once). */
export const warehouseQuery =
  (database: Database): Query =>
  (statement, params = []) =>
    Effect.runPromise(
      Effect.flatMap(PgClient.PgClient, (sql) => sql.unsafe(statement, params as Array<unknown>)).pipe(
        Effect.provide(
          PgClient.layer({ url: Redacted.make(database.url), maxConnections: 2 }).pipe(Layer.provide(Reactivity.layer))
        )
      )
    ) as never

/**
 * The resources events bring (tasks, meetings, notes, clients, prospects): every record an event
 * was sent about, against the sandbox's own record now. Run before the reconciliation too, so that
 * what the events did on their own is judged, not only what the reconciliation repaired.
 */
export const judgeEvents = async (
  sandbox: Sandbox["Service"],
  query: Query,
  /** Meetings changed without an event (a hidden transcript): left to the reconciliation. */
  silent: ReadonlySet<string> = new Set()
) => {
  const admin = sandbox.admin
  const mismatches: Array<string> = []
  let compared = 0
  const messages = await run(admin.messages())
  const deliveries = await run(admin.deliveries())
  const retried = retriedDeliveries(messages, deliveries)
  const inverted = invertedClientChanges(deliveries)
  /** Client fields left at an older change that reached crm-sync after a newer one (see below). */
  const unrecoverable: Array<string> = []
  const hint = (id: string) => {
    const types = retried.get(id)
    return types === undefined ? "" : ` (retried deliveries: ${[...types].join(", ")})`
  }
  for (const [table, spec] of Object.entries(eventResources)) {
    const ids = new Set(messages.filter((m) => m.event_type.startsWith(spec.prefix)).map((m) => m.record_id))
    const truth = new Map(
      ((await run(admin.records(table as "tasks", { limit: 1_000_000 }))) as ReadonlyArray<Json>).map((row) => [
        String(row.id),
        row
      ])
    )
    const rows = await query<Json>(`SELECT id, updated_at, deleted_at, ${spec.fields.join(", ")} FROM crm."${table}"`)
    const stored = new Map(rows.map((row) => [String(row.id), row]))
    for (const id of ids) {
      compared++
      const expected = truth.get(id)
      const row = stored.get(id)
      if (expected === undefined) {
        if (row !== undefined && row.deleted_at === null)
          mismatches.push(`${table} ${id}: deleted in the CRM, live here${hint(id)}`)
        continue
      }
      if (row === undefined) {
        mismatches.push(`${table} ${id}: missing`)
        continue
      }
      if (row.deleted_at !== null) mismatches.push(`${table} ${id}: exists in the CRM, marked deleted here`)
      if (!sameTime(row.updated_at, expected.updated_at) && !silent.has(id)) {
        mismatches.push(
          `${table} ${id}.updated_at: stored ${String(row.updated_at)}, expected ${String(expected.updated_at)}${hint(id)}`
        )
      }
      for (const field of spec.fields) {
        const value = expected[field] ?? null
        const same = field.endsWith("_at") ? sameTime(row[field], value) : row[field] === value
        if (!same)
          mismatches.push(
            `${table} ${id}.${field}: stored ${JSON.stringify(row[field])}, expected ${JSON.stringify(value)}${hint(id)}`
          )
      }
    }
    for (const row of rows) {
      if (row.deleted_at === null && !truth.has(String(row.id)))
        mismatches.push(`${table} ${String(row.id)}: live here, gone from the CRM`)
    }
  }
  // Clients and prospects: no read endpoint; what their events said must be what the CRM holds.
  for (const [table, prefix, fields] of [
    ["clients", "client.", ["name", "tier"]],
    ["prospects", "prospect.", ["first_name", "last_name"]]
  ] as const) {
    const ids = new Set(messages.filter((m) => m.event_type.startsWith(prefix)).map((m) => m.record_id))
    const truth = new Map(
      ((await run(admin.records(table, { limit: 1_000_000 }))) as ReadonlyArray<Json>).map((row) => [
        String(row.id),
        row
      ])
    )
    const rows = new Map(
      (await query<Json>(`SELECT id, ${fields.join(", ")} FROM crm."${table}"`)).map((row) => [String(row.id), row])
    )
    for (const id of ids) {
      compared++
      const expected = truth.get(id)
      const row = rows.get(id)
      if (expected === undefined) continue
      if (row === undefined) {
        mismatches.push(`${table} ${id}: missing`)
        continue
      }
      for (const field of fields) {
        if ((row[field] ?? null) !== (expected[field] ?? null)) {
          const line = `${table} ${id}.${field}: stored ${JSON.stringify(row[field])}, expected ${JSON.stringify(expected[field])}`
          const inversion = table === "clients" ? inverted(id, field, row[field] ?? null) : undefined
          if (inversion !== undefined) unrecoverable.push(`${line} (${inversion})`)
          else mismatches.push(`${line}${hint(id)}`)
        }
      }
    }
  }
  const transcripts = await judgeTranscripts(sandbox, query, messages, silent)
  mismatches.push(...transcripts.mismatches)
  compared += transcripts.compared
  return { mismatches, compared, unrecoverable }
}

/**
 * The one order of client changes no receiver can put right (docs/reliability.md): two
 * `client.updated` naming one field, the older one's attempts all refused or lost until after the
 * newer one was stored. A client has no `updated_at` and a sender signs each attempt anew, so
 * crm-sync orders them by the first signed time it stored, and the older change's is the later.
 * The world does not make this on purpose (world.ts reserves the clients of its own failing
 * deliveries), but a database restart or a killed replica refuses every delivery of a few seconds.
 * Returns, for a field stored at `value`, the change that left it there when that is the case.
 */
export const invertedClientChanges = (
  deliveries: ReadonlyArray<{
    readonly message_id: string
    readonly event_type: string
    readonly duplicate: boolean
    readonly status: number | null
    readonly at: string
    readonly headers: Readonly<Record<string, string>>
    readonly payload: string
  }>
) => {
  interface Change {
    readonly message: string
    readonly client: string
    readonly fields: ReadonlyArray<string>
    readonly values: Json
    /** When it was first sent, and the earliest signed time of an attempt answered 2xx. */
    firstSent: number
    stored: number
  }
  const changes = new Map<string, Change>()
  for (const delivery of deliveries) {
    if (delivery.event_type !== "client.updated" || delivery.duplicate) continue
    let change = changes.get(delivery.message_id)
    if (change === undefined) {
      const payload = JSON.parse(delivery.payload) as { client?: Json; changed_fields?: ReadonlyArray<string> }
      if (payload.client === undefined) continue
      change = {
        message: delivery.message_id,
        client: String(payload.client.id),
        fields: payload.changed_fields ?? [],
        values: payload.client,
        firstSent: Infinity,
        stored: Infinity
      }
      changes.set(delivery.message_id, change)
    }
    change.firstSent = Math.min(change.firstSent, Date.parse(delivery.at))
    const signed = Object.entries(delivery.headers).find(([name]) => name.endsWith("-timestamp"))?.[1]
    if (delivery.status !== null && delivery.status >= 200 && delivery.status < 300 && signed !== undefined)
      change.stored = Math.min(change.stored, Number(signed) * 1000)
  }
  return (client: string, field: string, value: unknown): string | undefined => {
    const named = [...changes.values()].filter(
      (change) => change.client === client && change.fields.includes(field) && change.stored < Infinity
    )
    for (const older of named) {
      if ((older.values[field] ?? null) !== value) continue
      const newer = named.find((other) => other.firstSent > older.firstSent && other.stored <= older.stored)
      if (newer !== undefined)
        return `${older.message}, sent first, stored at ${new Date(older.stored).toISOString()}; ${newer.message}, sent later, stored at ${new Date(newer.stored).toISOString()}`
    }
    return undefined
  }
}

/**
 * How a failed first attempt ended: never sent, its answer lost (with what the receiver had
 * answered: a 2xx means it was stored), or the receiver's status.
 */
const firstAttempt = (delivery: { readonly status: number | null; readonly error: string | null }) => {
  const lost = /answered (\S+), lost/.exec(delivery.error ?? "")
  if (lost !== null) return `answer ${lost[1]} lost`
  return delivery.error?.includes("not sent") ? "not sent" : `answered ${String(delivery.status ?? delivery.error)}`
}

/**
 * Each record's deliveries that took more than one attempt: the event type and how the first
 * attempt ended (`client.updated: not sent`), so a mismatch line says which retry it may owe to.
 */
const retriedDeliveries = (
  messages: ReadonlyArray<{ readonly id: string; readonly record_id: string }>,
  deliveries: ReadonlyArray<{
    readonly message_id: string
    readonly endpoint_id: string
    readonly event_type: string
    readonly attempt: number
    readonly duplicate: boolean
    readonly status: number | null
    readonly error: string | null
  }>
) => {
  const recordOf = new Map(messages.map((message) => [message.id, message.record_id]))
  const firsts = new Map(
    deliveries.filter((d) => d.attempt === 1 && !d.duplicate).map((d) => [`${d.message_id}/${d.endpoint_id}`, d])
  )
  const retried = new Map<string, Set<string>>()
  for (const delivery of deliveries) {
    const record = recordOf.get(delivery.message_id)
    if (delivery.attempt !== 2 || record === undefined) continue
    const first = firsts.get(`${delivery.message_id}/${delivery.endpoint_id}`)
    const how = first === undefined ? "" : `: ${firstAttempt(first)}`
    retried.set(record, (retried.get(record) ?? new Set()).add(`${delivery.event_type}${how}`))
  }
  return retried
}

const visibleSegments = (meeting: Json): ReadonlyArray<Json> | undefined =>
  Array.isArray(meeting.transcript) && meeting.transcript.length > 0 && meeting.transcript_visible === true
    ? (meeting.transcript as ReadonlyArray<Json>)
    : undefined

/**
 * Transcripts, as an analyst reads them in `crm.current_meeting_transcripts`: a live meeting's is
 * the CRM's current one, segment by segment; a deleted meeting's or a hidden one is not there
 * (`silent`: hidden without an event, judged only after a reconciliation). Every meeting a
 * `meeting.transcript_ready` was sent about, and every stored transcript.
 */
const judgeTranscripts = async (
  sandbox: Sandbox["Service"],
  query: Query,
  messages: ReadonlyArray<{ readonly event_type: string; readonly record_id: string }>,
  silent: ReadonlySet<string>
) => {
  const mismatches: Array<string> = []
  const announced = new Set(messages.filter((m) => m.event_type === "meeting.transcript_ready").map((m) => m.record_id))
  const truth = new Map(
    ((await run(sandbox.admin.records("meetings", { limit: 1_000_000 }))) as ReadonlyArray<Json>).map((row) => [
      String(row.id),
      row
    ])
  )
  const stored = new Map(
    (
      await query<{ id: string; has_transcript: boolean; texts: ReadonlyArray<unknown> }>(`
        SELECT t.id, t.has_transcript,
               coalesce(json_agg(s.text ORDER BY s.ordinal) FILTER (WHERE s.meeting_id IS NOT NULL), '[]') AS texts
        FROM crm.current_meeting_transcripts t
        LEFT JOIN crm.meeting_transcript_segments s ON s.meeting_id = t.id
        GROUP BY t.id, t.has_transcript`)
    ).map((row) => [row.id, row])
  )
  const ids = new Set([...announced, ...stored.keys()])
  for (const id of ids) {
    const meeting = truth.get(id)
    const row = stored.get(id)
    const holds = row !== undefined && (row.has_transcript || row.texts.length > 0)
    if (meeting === undefined) {
      if (row !== undefined)
        mismatches.push(`meeting_transcripts ${id}: the meeting is deleted in the CRM, its transcript is live here`)
      continue
    }
    const segments = visibleSegments(meeting)
    if (segments === undefined) {
      if (holds && !silent.has(id))
        mismatches.push(`meeting_transcripts ${id}: hidden or removed in the CRM, live here`)
      continue
    }
    const expected = segments.map((segment) => segment.text ?? null)
    if (row === undefined) {
      if (announced.has(id))
        mismatches.push(`meeting_transcripts ${id}: missing (the CRM has ${expected.length} segment(s))`)
    } else if (JSON.stringify(row.texts) !== JSON.stringify(expected)) {
      mismatches.push(
        `meeting_transcripts ${id}: stored ${JSON.stringify(row.texts)}, the CRM's current one ${JSON.stringify(expected)}`
      )
    }
  }
  return { mismatches, compared: ids.size }
}

/**
 * The bucket of `bucket` ("token", "company" or "ip") a logged request draws on (spec §8): a
 * personal token's own, or an OAuth app's per user; a company's (per app for OAuth); the address.
 */
const bucketOf = (
  entry: {
    readonly ip: string
    readonly credential: {
      readonly kind: string
      readonly user_id: string
      readonly company_id: string
      readonly client_id: string | null
    } | null
  },
  bucket: string
) => {
  const c = entry.credential
  const id =
    bucket === "ip"
      ? entry.ip
      : c === null
        ? "none"
        : bucket === "company"
          ? `${c.kind}/${c.client_id ?? ""}/${c.company_id}`
          : `${c.kind}/${c.client_id ?? ""}/${c.user_id}/${c.company_id}`
  return { bucket, id }
}

export const judge = async (input: VerdictInput) => {
  const { sandbox, database } = input
  const admin = sandbox.admin
  const mismatches: Array<string> = []
  const figures: Record<string, number> = {}
  const Sql = PgClient.layer({ url: Redacted.make(database.url), maxConnections: 2 }).pipe(
    Layer.provide(Reactivity.layer)
  )
  const query = <A extends object = Json>(statement: string, params: ReadonlyArray<unknown> = []) =>
    Effect.runPromise(
      Effect.flatMap(PgClient.PgClient, (sql) => sql.unsafe<A>(statement, params as Array<unknown>)).pipe(
        Effect.provide(Sql)
      )
    )

  // 1. Listings: field by field, deletions included (compareTable counts live rows too); with many
  // connections, the union of every connection's listing (overlapping books list a record twice).
  let compared = 0
  for (const [table, path] of Object.entries(listings)) {
    const union = new Map<string, Json>()
    for (const token of input.tokens)
      for (const record of await listAll(sandbox.baseUrl, token, path)) union.set(String(record.id), record)
    const truth = [...union.values()]
    compared += truth.length
    const problems = await Effect.runPromise(compareTable(table, truth).pipe(Effect.provide(Sql)))
    mismatches.push(...problems)
  }

  // 2. What events bring, after the reconciliation (run.ts judges it before, too).
  const events = await judgeEvents(sandbox, query)
  mismatches.push(...events.mismatches)
  compared += events.compared
  figures.records_compared = compared
  figures.client_changes_inverted = events.unrecoverable.length

  // 3. Deliveries: each message answered 2xx is in the inbox once, and applied.
  const deliveries = await run(admin.deliveries())
  const acknowledged = new Set(
    deliveries.filter((d) => d.status !== null && d.status >= 200 && d.status < 300).map((d) => d.message_id)
  )
  const inbox = new Map(
    (
      await query<{ hook_id: string; status: string; last_error: string | null }>(
        "SELECT hook_id, status, last_error FROM crm_sync.webhook_inbox"
      )
    ).map((row) => [row.hook_id, row])
  )
  for (const id of acknowledged) {
    const row = inbox.get(id)
    if (row === undefined) mismatches.push(`delivery ${id}: answered 2xx, not in the inbox`)
    else if (row.status !== "processed") mismatches.push(`delivery ${id}: ${row.status} (${row.last_error ?? ""})`)
  }
  figures.delivery_attempts = deliveries.length
  figures.deliveries_acknowledged = acknowledged.size
  figures.deliveries_failed_attempts = deliveries.filter((d) => d.status === null || d.status >= 300).length
  figures.inbox_dead = [...inbox.values()].filter((row) => row.status === "dead").length

  // 4. The outbox: none lost, every valid row created exactly once, every refused row says why.
  const outbox = new Map(
    (
      await query<{ id: string; status: string; error: string | null }>("SELECT id, status, error FROM crm_sync.outbox")
    ).map((row) => [Number(row.id), row])
  )
  const created = new Map<string, number>()
  for (const kind of ["contacts", "prospects"] as const) {
    for (const row of (await run(admin.records(kind, { limit: 1_000_000 }))) as ReadonlyArray<Json>) {
      const name = String(row.last_name ?? "")
      if (name.startsWith("Chaos-")) created.set(`${kind}/${name}`, (created.get(`${kind}/${name}`) ?? 0) + 1)
    }
  }
  let succeeded = 0
  let refused = 0
  let heldAfter5xx = 0
  for (const row of input.outboxRows) {
    const stored = outbox.get(row.id)
    if (stored === undefined) {
      mismatches.push(`outbox ${row.id}: lost`)
      continue
    }
    const kind = row.operation === "contact.create" ? "contacts" : "prospects"
    const copies = created.get(`${kind}/${row.marker}`) ?? 0
    if (row.valid) {
      // A 5xx on a create leaves its outcome unknown (spec §4 rule 6): held for a person, never resent.
      const held = stored.status === "needs_review" && (stored.error ?? "").includes("a retry would run again")
      if (held) {
        heldAfter5xx++
        if (copies > 1) mismatches.push(`outbox ${row.id}: ${copies} ${kind} created in the CRM, expected at most 1`)
        continue
      }
      if (stored.status !== "succeeded") mismatches.push(`outbox ${row.id}: ${stored.status} (${stored.error ?? ""})`)
      else succeeded++
      if (copies !== 1) {
        mismatches.push(`outbox ${row.id}: ${copies} ${kind} created in the CRM, expected 1`)
        // What the CRM saw of it: every POST that carried its marker, with key, answer and faults.
        const posts = (await run(admin.requests({ method: "POST" }))).filter((entry) =>
          (entry.body ?? "").includes(row.marker)
        )
        for (const post of posts) {
          mismatches.push(
            `  outbox ${row.id} POST at ${post.at}: key ${post.idempotency_key}, status ${post.status}, faults [${post.faults.join(", ")}]`
          )
        }
      }
    } else {
      if (stored.status !== "needs_review" && stored.status !== "failed") {
        mismatches.push(`outbox ${row.id}: a payload the CRM refuses ended ${stored.status}`)
      } else if (stored.error === null) mismatches.push(`outbox ${row.id}: ${stored.status} without a reason`)
      else refused++
    }
  }
  figures.outbox_succeeded = succeeded
  figures.outbox_refused_with_reason = refused
  figures.outbox_held_after_5xx = heldAfter5xx

  // 5. The rate limits: a 429 no fault caused is a request over a bucket's limit.
  const requests = await run(admin.requests())
  const over = requests.filter((entry) => entry.status === 429 && entry.faults.length === 0)
  for (const entry of over.slice(0, 5))
    mismatches.push(`request over the limit: ${entry.method} ${entry.path} at ${entry.at}`)
  // No request while a 429 block is in force: a 429's Retry-After blocks its bucket for every
  // process (the blocks are shared through PostgreSQL). A request that left another replica within
  // RACE_MS of the 429 was on its way before that replica could know; it is counted, not failed.
  // A block starts when the 429 left the CRM, not when its request arrived: `at` is the arrival,
  // and a latency fault on the same request holds the answer back for up to a second and a half
  // (`duration_ms` covers it), during which no process can know of the block. A block holds only
  // the requests of the bucket its 429 names (`rate_limit:<bucket>:<seconds>`): with many
  // connections, another token's requests go on while one token is blocked.
  const blocks = requests.flatMap((entry) =>
    entry.faults
      .filter((fault) => fault.startsWith("rate_limit:"))
      .map((fault) => {
        const answered = Date.parse(entry.at) + entry.duration_ms
        const bucket = fault.split(":")[1]!
        return { from: answered, to: answered + Number(fault.split(":")[2]) * 1000, key: bucketOf(entry, bucket) }
      })
  )
  let racing = 0
  let blocked = 0
  let unrecorded = 0
  for (const entry of requests) {
    const at = Date.parse(entry.at)
    const block = blocks.find(
      (candidate) =>
        at > candidate.from && at < candidate.to && bucketOf(entry, candidate.key.bucket).id === candidate.key.id
    )
    if (block === undefined || !entry.path.startsWith("/v1/")) continue
    if (at - block.from <= RACE_MS) racing++
    else if (
      input.killedAt
        .map((kill) => kill + input.clockSkewMs)
        .some((kill) => kill >= block.from - RACE_MS && kill <= block.from + KILLED_WITH_MS)
    )
      unrecorded++
    else {
      blocked++
      if (blocked <= 5)
        mismatches.push(
          `request during a 429 block: ${entry.method} ${entry.path} at ${entry.at}, ${at - block.from} ms into it`
        )
    }
  }
  figures.requests_during_429_block = blocked
  figures.requests_racing_a_429 = racing
  figures.requests_in_a_block_a_kill_took = unrecorded
  figures.requests = requests.length
  figures.requests_over_limit = over.length
  figures.faults_fired = requests.filter((entry) => entry.faults.length > 0).length

  // 5b. Many connections: every first run done, no failed run left.
  if (input.connections !== undefined) {
    const left = await firstRunsLeft(query, input.connections)
    mismatches.push(...left.slice(0, 20))
    figures.connections = input.connections.length
    figures.first_runs_not_done_or_failed = left.length
    figures.job_runs_failed = Number(
      (await query<{ n: string }>("SELECT count(*) AS n FROM crm_sync.job_runs WHERE status = 'failed'"))[0]?.n ?? 0
    )
  }

  // 5c. The history: every chain whole, its current version the row, no version repeated, and
  // every content the daemon certainly saw and kept a version (seen.ts).
  let versions = 0
  for (const table of HISTORY_TABLES) {
    const problems = await query<{ id: string; problem: string }>(historyProblems(table))
    mismatches.push(...problems.slice(0, 10).map((row) => `crm_history.${table} ${row.id}: ${row.problem}`))
    const [count] = await query<{ n: string }>(`SELECT count(*) AS n FROM crm_history.${table}`)
    versions += Number(count?.n ?? 0)
  }
  figures.history_versions = versions
  const seen = await judgeSeenVersions({
    query,
    requests,
    contents: await run(admin.servedContents),
    clockSkewMs: input.clockSkewMs,
    connectionOf: input.connectionOf
  })
  mismatches.push(...seen.mismatches)
  Object.assign(figures, seen.figures)

  // 6. No secret in any log line.
  for (const [what, value] of Object.entries(input.secrets)) {
    if (value === "") continue
    const found = input.logs.filter((text) => text.includes(value)).length
    if (found > 0) mismatches.push(`${what} appears in ${found} log file(s)`)
  }
  figures.log_bytes_scanned = input.logs.reduce((sum, text) => sum + text.length, 0)
  figures.mismatches = mismatches.length
  return { mismatches, figures, inverted: events.unrecoverable }
}
