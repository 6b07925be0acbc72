/**
 * Reading a 429's `Retry-After` (spec §7: "gives the seconds to wait") defensively. The header may
 * also arrive as an HTTP-date (RFC 9110 §10.2.3), negative, huge, fractional or missing; whatever
 * arrives, the wait that is acted on lies between one second and one hour, plus a little jitter
 * so that several processes blocked together do not all return at the same instant.
 */
import * as Duration from "effect/Duration"

export const minimumRetryAfter = Duration.seconds(1)
export const maximumRetryAfter = Duration.hours(1)

/** Jitter added on top of the clamped wait: up to 10% of it, never more than 5 seconds. */
const JITTER_SHARE = 0.1
const JITTER_CAP_MS = 5_000

const SECONDS = /^\s*[-+]?\d+(\.\d+)?\s*$/

/**
 * The wait the header asks for, in milliseconds (possibly negative or huge), or `undefined` when
 * the header is missing or unreadable. `now` is the receiver's epoch milliseconds, for HTTP-dates.
 */
export const parseRetryAfter = (header: string | undefined, now: number): number | undefined => {
  if (header === undefined || header.trim() === "") return undefined
  if (SECONDS.test(header)) return Number(header) * 1000
  const date = Date.parse(header)
  return Number.isNaN(date) ? undefined : date - now
}

/** Clamps a wait to 1 s..1 h; a missing one becomes `fallbackMs` (also clamped). */
export const clampRetryAfter = (ms: number | undefined, fallbackMs: number): number => {
  const wanted = ms === undefined || !Number.isFinite(ms) ? fallbackMs : ms
  return Math.min(Duration.toMillis(maximumRetryAfter), Math.max(Duration.toMillis(minimumRetryAfter), wanted))
}

/** Adds jitter to a clamped wait; `random` is a number in [0, 1). */
export const jitterRetryAfter = (ms: number, random: number): number =>
  Math.round(ms + Math.min(JITTER_CAP_MS, ms * JITTER_SHARE) * random)
