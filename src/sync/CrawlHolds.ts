/**
 * CrawlHolds: which other connections may hold a record back from deletion by absence, and the run
 * note that names them. Two connections to one company list the same records, so one connection's
 * absence proves nothing while another still lists the record; but only a connection that still
 * crawls counts: one this process's config names, whose grant is not waiting for re-authorization,
 * and that finished a clean crawl of the listing within `HOLD_INTERVALS` of its schedule. One that
 * was removed, lost its grant or stopped crawling would otherwise keep its last view of the records
 * forever. CrawlRuns applies the time rule in its own SQL (it owns the crawl tables).
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type { AppConfigShape } from "../config/AppConfig.ts"
import { needingReauthorization } from "../crm/Credentials.ts"
import type { Resource } from "../warehouse/Warehouse.ts"

/** A connection whose last clean crawl of a listing is older than this many intervals holds nothing. */
export const HOLD_INTERVALS = 3

/** What decides who may hold records back: the configured connections and the listings' schedules. */
export interface HoldPolicy {
  /** The configured connections, by name. */
  readonly connections: ReadonlyArray<string>
  /** How often a listing is crawled. */
  readonly interval: (resource: Resource) => Duration.Duration
}

/** The schedule each listing is crawled on: the crawls', the business crawl's, the reference refresh's. */
export const listingInterval =
  (schedules: AppConfigShape["schedules"]) =>
  (resource: Resource): Duration.Duration =>
    resource === "businesses"
      ? schedules.business_crawl
      : resource === "books" || resource === "project_templates"
        ? schedules.reference
        : schedules.crawl

export const holdPolicy = (config: AppConfigShape): HoldPolicy => ({
  connections: config.connections.map((connection) => connection.name),
  interval: listingInterval(config.schedules)
})

/** How long after its last clean crawl of `resource` a connection still holds records back. */
export const holdFor = (policy: HoldPolicy, resource: Resource): Duration.Duration =>
  Duration.times(policy.interval(resource), HOLD_INTERVALS)

/**
 * The connections other than `connection` that may hold records back, before the time rule:
 * configured, and not needing re-authorization (a refused grant crawls nothing).
 */
export const eligibleHolders = (policy: HoldPolicy, connection: string) =>
  Effect.gen(function* () {
    const others = policy.connections.filter((name) => name !== connection)
    if (others.length === 0) return others
    const reauthorizing = new Set(yield* needingReauthorization)
    return others.filter((name) => !reauthorizing.has(name))
  })

/** Which candidates other connections hold back, and who holds how many. */
export interface Held {
  readonly ids: ReadonlySet<string>
  readonly byConnection: ReadonlyArray<{ readonly connection: string; readonly records: number }>
}

export const nothingHeld: Held = { ids: new Set(), byConnection: [] }

/** `Held` from (holder, record) pairs, each pair once. */
export const heldBy = (rows: ReadonlyArray<{ readonly connection: string; readonly id: string }>): Held => {
  const counts = new Map<string, number>()
  for (const row of rows) counts.set(row.connection, (counts.get(row.connection) ?? 0) + 1)
  return {
    ids: new Set(rows.map((row) => row.id)),
    byConnection: [...counts]
      .toSorted(([a], [b]) => a.localeCompare(b))
      .map(([connection, records]) => ({ connection, records }))
  }
}

/** The run's note of records other connections held back: who, and how many each. */
export const heldNote = (held: Held): string | null =>
  held.ids.size === 0
    ? null
    : `${held.ids.size} record${held.ids.size === 1 ? "" : "s"} missing from two clean crawls kept: ` +
      `still tracked by ${held.byConnection
        .map(({ connection, records }) => `connection ${connection} (${records})`)
        .join(", ")}`
