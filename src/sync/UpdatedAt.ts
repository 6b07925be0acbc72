/**
 * A listed record's `updated_at`, read from the record as received (before it is decoded), by one
 * rule for every caller — the poll's cursor and the reconciliation's comparison must never
 * disagree about the same record. Spec §2.1: timestamps are ISO 8601 in UTC. Read leniently as
 * PostgreSQL reads them: a space for the `T` and a missing zone (UTC) are accepted, so
 * `2026-01-01 10:00:00Z`, `2026-01-01T10:00:00Z` and `2026-01-01T10:00:00` are the same instant.
 */

export interface UpdatedAt {
  /** The instant in canonical ISO 8601 (UTC, milliseconds). */
  readonly iso: string
  readonly ms: number
}

const HAS_ZONE = /(Z|[+-]\d{2}(:?\d{2})?)$/i

/** The record's `updated_at`, when it is a usable timestamp. */
export const updatedAtOf = (raw: unknown): UpdatedAt | undefined => {
  if (typeof raw !== "object" || raw === null) return undefined
  const value = (raw as { readonly updated_at?: unknown }).updated_at
  if (typeof value !== "string") return undefined
  const text = value.trim().replace(" ", "T")
  // A date-time without a zone is UTC (spec §2.1), not the host's local time as Date.parse reads it.
  const ms = Date.parse(text.includes("T") && !HAS_ZONE.test(text) ? `${text}Z` : text)
  return Number.isNaN(ms) ? undefined : { iso: new Date(ms).toISOString(), ms }
}
