/**
 * WebhookRefusals: the deliveries the intake refused before storing anything, per endpoint and
 * reason, in `crm_sync.webhook_refusals` (migrations/0022), so that `crm-sync status` (another
 * process), `/status` and the page show them, and a WARN line per endpoint says what to fix. A wrong
 * signing secret refuses every delivery with 401 and stores nothing; without this only a counter
 * and a debug line knew, and the sender gave up after its retry horizon.
 *
 * The 401 path must stay cheap whatever the flood: `record` only adds to an in-process count (its
 * keys are the configured endpoints, `unknown` and the seven reasons, so it is bounded), and a
 * background fiber adds the counts to the table every few seconds, and once more at shutdown.
 */
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import { SqlClient } from "effect/sql/SqlClient"
import type { RejectionReason } from "./WebhookSignature.ts"

/** How often the in-process counts are added to the table. */
const FLUSH_INTERVAL = Duration.seconds(5)

/** At most one WARN line per endpoint in this long (it carries the count since the previous one). */
export const WARN_INTERVAL = Duration.minutes(5)

/** What to do about each reason, for the WARN line. */
const remedies: Record<RejectionReason, (endpoint: string) => string> = {
  bad_signature: (endpoint) =>
    `check that webhooks.endpoints.${endpoint}'s signing secret matches the one the CRM shows for this endpoint`,
  stale_timestamp: () => "the signed time is outside webhooks.tolerance: check this host's clock",
  missing_header: () => "not a CRM delivery, or a proxy in front of crm-sync drops the hook-* headers",
  malformed_header: () => "not a CRM delivery, or a proxy in front of crm-sync rewrites the hook-* headers",
  body_too_large: () => "raise webhooks.max_body_bytes if the CRM sends bodies this large",
  unreadable_body: () => "the body could not be read (the sender or a proxy closed the connection)",
  unknown_endpoint: () => "the CRM posts to a /webhooks/<name> that is not configured: add the endpoint or fix its URL"
}

/** The reason as people say it (the status line): `bad_signature` → "bad signature". */
export const reasonText = (reason: string) => reason.replaceAll("_", " ")

interface Pending {
  count: number
}

interface Warned {
  atMillis: number
  /** Refusals since the last WARN line. */
  since: number
}

const key = (endpoint: string, reason: string) => `${endpoint}\u0000${reason}`

/** Adds the drained counts to the table; a day after the last refusal, a key's count starts again. */
const upsert = (sql: SqlClient, rows: ReadonlyArray<{ endpoint: string; reason: string; count: number }>) =>
  sql`
    INSERT INTO crm_sync.webhook_refusals AS r (endpoint, reason, count, first_at, last_at)
    SELECT e, re, c, now(), now()
    FROM unnest(${rows.map((row) => row.endpoint)}::text[], ${rows.map((row) => row.reason)}::text[],
                ${rows.map((row) => row.count)}::int8[]) AS t(e, re, c)
    ON CONFLICT (endpoint, reason) DO UPDATE SET
      count = CASE WHEN r.last_at < now() - interval '1 day' THEN excluded.count ELSE r.count + excluded.count END,
      first_at = CASE WHEN r.last_at < now() - interval '1 day' THEN now() ELSE r.first_at END,
      last_at = now()`

const make = Effect.gen(function* () {
  const sql = yield* SqlClient
  const pending = new Map<string, Pending & { endpoint: string; reason: string }>()
  const warned = new Map<string, Warned>()

  const warn = Effect.fnUntraced(function* (endpoint: string, reason: RejectionReason, detail: string) {
    const now = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
    const last = warned.get(endpoint)
    if (last !== undefined && now - last.atMillis < Duration.toMillis(WARN_INTERVAL)) {
      last.since += 1
      return
    }
    const count = (last?.since ?? 0) + 1
    warned.set(endpoint, { atMillis: now, since: 0 })
    yield* Effect.logWarning(
      `webhook endpoint ${endpoint}: ${count} ${count === 1 ? "delivery" : "deliveries"} refused ` +
        `(latest: ${reasonText(reason)}, ${detail}); nothing was stored and the CRM will give up retrying: ` +
        remedies[reason](endpoint)
    ).pipe(Effect.annotateLogs({ endpoint, reason, refused: count }))
  })

  const record = (endpoint: string, reason: RejectionReason, detail: string) =>
    Effect.suspend(() => {
      const k = key(endpoint, reason)
      const entry = pending.get(k)
      if (entry === undefined) pending.set(k, { endpoint, reason, count: 1 })
      else entry.count += 1
      return warn(endpoint, reason, detail)
    })

  const flush = Effect.suspend(() => {
    if (pending.size === 0) return Effect.void
    const rows = [...pending.values()].map(({ endpoint, reason, count }) => ({ endpoint, reason, count }))
    pending.clear()
    return upsert(sql, rows).pipe(
      Effect.asVoid,
      // Not lost: added back, for the next flush (the map stays bounded by its keys).
      Effect.catch((error) =>
        Effect.andThen(
          Effect.sync(() => {
            for (const row of rows) {
              const entry = pending.get(key(row.endpoint, row.reason))
              if (entry === undefined) pending.set(key(row.endpoint, row.reason), { ...row })
              else entry.count += row.count
            }
          }),
          Effect.logDebug("webhook refusals not recorded yet; retrying", error)
        )
      )
    )
  })

  yield* Effect.addFinalizer(() => flush)
  yield* flush.pipe(Effect.repeat(Schedule.spaced(FLUSH_INTERVAL)), Effect.forkScoped)
  return WebhookRefusals.of({ record, flush })
})

export class WebhookRefusals extends Context.Service<
  WebhookRefusals,
  {
    /** Counts one refusal (in memory; never waits on the database) and logs the endpoint's WARN when due. */
    readonly record: (endpoint: string, reason: RejectionReason, detail: string) => Effect.Effect<void>
    /** Adds the counts so far to `crm_sync.webhook_refusals` (done every few seconds and at shutdown). */
    readonly flush: Effect.Effect<void>
  }
>()("crm-sync/webhooks/WebhookRefusals") {
  static readonly layer = Layer.effect(WebhookRefusals, make)
}

export interface RefusalRow {
  readonly endpoint: string
  readonly reason: string
  readonly count: number
  readonly first_at: Date
  readonly last_at: Date
}

/** The refusals whose latest is within `within`, newest first, for `status`. */
export const recentRefusals = (within: Duration.Duration) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    return yield* sql<RefusalRow>`
      SELECT endpoint, reason, count::float8 AS count, first_at, last_at
      FROM crm_sync.webhook_refusals
      WHERE last_at > now() - ${Duration.toMillis(within)}::float8 * interval '1 millisecond'
      ORDER BY last_at DESC, endpoint, reason`
  })
