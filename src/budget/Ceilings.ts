/**
 * Learned ceilings: what RateBudget budgets a bucket to when something else draws on it too. The
 * token, app and address are shared with whatever else talks to the CRM, and no header says how
 * much of a bucket is left (spec §8): a 429 below the configured limit teaches a lower ceiling,
 * clean windows raise it again step by step, and it is forgotten after `learned_ceiling_ttl`. It
 * never drops below a tenth of the limit, so a 429 no bucket caused (a storm, a CRM fault) cannot
 * starve the connection for long. Here are the SQL expressions of a window row's learning columns;
 * RateBudget's statements embed them.
 */
import type { SqlClient } from "effect/sql/SqlClient"

/** How ceilings are learned. */
export interface Learning {
  /** How long a learned ceiling holds. */
  readonly ttlMs: number
  /** The rise after each clean window, as a share of the configured limit. */
  readonly stepShare: number
}

export const defaultLearning: Learning = { ttlMs: 6 * 3_600_000, stepShare: 0.2 }

/** A learned ceiling never goes below this share of the configured limit. */
const FLOOR_SHARE = 0.1
const floorSql = `GREATEST(1, floor(request_limit * ${FLOOR_SHARE})::int)`

/** In a 429's UPDATE: the window is live and crm-sync's own count was below the configured limit. */
const BELOW_LIMIT = `window_start IS NOT NULL
  AND window_start + make_interval(secs => window_ms::float8 / 1000) > clock_timestamp()
  AND used < request_limit`

/** The SQL of a learned ceiling that still holds (NULL once it expired). */
export const validLearned = (learning: Learning, table = "") =>
  `CASE WHEN ${table}learned_limit IS NOT NULL
     AND ${table}learned_at > clock_timestamp() - make_interval(secs => ${learning.ttlMs / 1000})
     THEN ${table}learned_limit END`

/**
 * The ceiling a 429 teaches, else `otherwise`. A 429 that comes while crm-sync's own count in the
 * window is below the configured limit means the others spent the difference: the ceiling becomes
 * what crm-sync had sent (its count less the refused request); every further 429 of the block in
 * force (requests that were already in flight) lowers it by one more, so it ends at what the CRM
 * actually accepted.
 */
const learnedOn429 = (learning: Learning, otherwise: string) => `CASE
  WHEN blocked_until > clock_timestamp() AND (${validLearned(learning)}) IS NOT NULL
    AND learned_at > clock_timestamp() - make_interval(secs => window_ms::float8 / 1000)
    THEN GREATEST(${floorSql}, learned_limit - 1)
  WHEN ${BELOW_LIMIT}
    THEN LEAST(COALESCE(${validLearned(learning)}, request_limit), GREATEST(${floorSql}, used - 1))
  ELSE ${otherwise} END`

/**
 * The most clean windows a probe waits after probes that met a 429. The wait starts at 1 (a probe
 * after every clean window) and doubles after each refused probe, so a co-tenant that stays costs
 * a refused request after 1, 2, 4, ... windows instead of every other window; it grows until the
 * next probe would come `learned_ceiling_ttl` after the refused one: the ttl in windows, less the
 * window after the 429's block (never counted clean) and the probe's own window (its 429 comes as
 * late in it as the last one did in its). Waiting longer, the ceiling expired first: the whole
 * limit at once, unpaced (a burst instead of one refused request), and the waits started over.
 * Defaults (hourly windows, 6 hours): 1, 2, 4, 4, ...
 */
const maxProbeWait = (learning: Learning) => `GREATEST(1, floor(${learning.ttlMs}::float8 / window_ms)::int - 2)`

/** The learning columns of a 429's UPDATE; each CASE reads the row as it was before the 429. */
export const ceilingOn429 = (sql: SqlClient, learning: Learning) =>
  sql`learned_limit = ${sql.literal(learnedOn429(learning, validLearned(learning)))},
      -- A 429 while a ceiling was already known: the last probe went too far; wait twice as long.
      probe_wait = CASE
        WHEN blocked_until > clock_timestamp() THEN probe_wait
        WHEN (${sql.literal(validLearned(learning))}) IS NOT NULL THEN LEAST(${sql.literal(maxProbeWait(learning))}, probe_wait * 2)
        ELSE 1 END,
      clean_windows = 0,
      learned_base = ${sql.literal(learnedOn429(learning, "learned_base"))},
      learned_at = CASE
        WHEN blocked_until > clock_timestamp() AND learned_limit IS NOT NULL THEN learned_at
        WHEN ${sql.literal(BELOW_LIMIT)} THEN clock_timestamp()
        ELSE learned_at END`

/**
 * In the grant's UPDATE (`w` the row before it, `v` the new window): a window ends, and a new one
 * begins, without a 429 since the ceiling was learned — a clean window.
 */
const rollsClean = `(w.window_start IS NOT NULL AND w.learned_at IS NOT NULL AND w.window_start >= w.learned_at
  AND to_timestamp(v.start_ms::float8 / 1000) > w.window_start)`

/**
 * In the grant's UPDATE: a clean window run above the last 429's level — the probe held. That
 * level is the known-good one now, and the waits start over.
 */
const probeHeld = `(${rollsClean} AND w.learned_limit > COALESCE(w.learned_base, w.learned_limit))`

/** In the grant's UPDATE: the wait is over, and the ceiling rises a step (probes) as this window opens. */
const probes = `(${rollsClean} AND (w.clean_windows + 1 >= w.probe_wait OR ${probeHeld}))`

/**
 * The learning columns of the grant's UPDATE (`w` the row before it, `v` the new window): each
 * window that passes without a 429 raises the ceiling a step (`probe_step` of the limit), after
 * `probe_wait` clean windows, until the configured limit is back. After a probe that held, the
 * next comes after one clean window again (the held window itself). A probe to the whole limit is
 * a probe like the others (paced, its 429 doubles the wait): the ceiling is dropped only once the
 * whole limit has held for a window. (Dropped as soon as it was reached, a co-tenant spending less
 * than a step met a "first" 429 at every probe, and the wait never grew.)
 */
export const ceilingOnGrant = (sql: SqlClient, learning: Learning) =>
  sql`probe_wait = CASE WHEN ${sql.literal(probeHeld)} THEN 1 ELSE w.probe_wait END,
      learned_base = CASE WHEN ${sql.literal(probeHeld)} THEN w.learned_limit ELSE w.learned_base END,
      clean_windows = CASE
        WHEN ${sql.literal(probes)} THEN 0
        WHEN ${sql.literal(rollsClean)} THEN w.clean_windows + 1
        ELSE w.clean_windows END,
      learned_limit = CASE
        WHEN (${sql.literal(validLearned(learning, "w."))}) IS NULL THEN NULL
        WHEN ${sql.literal(probeHeld)} AND w.learned_limit >= w.request_limit THEN NULL
        WHEN ${sql.literal(probes)} AND ${learning.stepShare} > 0
          THEN LEAST(w.request_limit, w.learned_limit + GREATEST(1, ceil(w.request_limit * ${learning.stepShare})::int))
        ELSE w.learned_limit END`
