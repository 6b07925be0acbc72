/**
 * How crm-sync tells things in one line — in logs, `job_runs.error`, the inbox's `last_error`, the
 * command line's last word: an error's own message (else its cause's, else its tag), whitespace
 * collapsed and cut short. Never a payload: the messages come from crm-sync's own errors, which
 * name fields and ids, not values. A share as a percentage, a duration in words, and the
 * column-aligned tables the commands print. A leaf: every layer may use it.
 */
// By path: the package index loads every date-fns function (3 s and 500 MB at startup, measured).
import { formatDuration as durationInWords } from "date-fns/formatDuration"
import * as Cause from "effect/Cause"
import * as Predicate from "effect/Predicate"

/**
 * What PostgreSQL or the socket said under a database error: effect/sql's SqlError keeps it as its
 * reason's cause (`password authentication failed for user "x"`, `connect ECONNREFUSED
 * 127.0.0.1:5433`), while its own message is only `PgConnection: Failed to connect`. A socket's
 * AggregateError (one attempt per address) has no message of its own: its attempts' are joined.
 */
export const databaseReason = (error: unknown): string | undefined => {
  const reason = Predicate.hasProperty(error, "reason") ? error.reason : undefined
  const cause = Predicate.hasProperty(reason, "cause") ? reason.cause : undefined
  if (!(cause instanceof Error)) return undefined
  if (cause.message.trim() !== "") return cause.message
  const attempts = cause instanceof AggregateError ? (cause.errors as ReadonlyArray<unknown>) : []
  const messages = attempts.flatMap((attempt) =>
    attempt instanceof Error && attempt.message !== "" ? [attempt.message] : []
  )
  return messages.length > 0
    ? messages.join(", ")
    : Predicate.hasProperty(cause, "code")
      ? String(cause.code)
      : undefined
}

/** The message of an error (a Cause is squashed first) with a database's reason, or its cause's, or its tag. */
export const messageOf = (error: unknown): string => {
  if (Cause.isCause(error)) return messageOf(Cause.squash(error))
  const own =
    typeof error === "string"
      ? error
      : Predicate.hasProperty(error, "message") && typeof error.message === "string"
        ? error.message
        : ""
  const reason = databaseReason(error)
  const message = reason === undefined || own.includes(reason) ? own : own.trim() === "" ? reason : `${own}: ${reason}`
  if (message.trim() !== "") return message
  const cause = Predicate.hasProperty(error, "cause") ? error.cause : undefined
  const tag = Predicate.hasProperty(error, "_tag") ? String(error._tag) : error instanceof Error ? error.name : "error"
  return cause === undefined || cause === error ? tag : `${tag}: ${messageOf(cause)}`
}

/** `messageOf(error)` on one line, at most `max` characters. */
export const oneLine = (error: unknown, max = 500): string => messageOf(error).replace(/\s+/g, " ").trim().slice(0, max)

/** A share (0..1) as a percentage with one decimal: `0.1234` is `12.3%`. */
export const percent = (share: number): string => `${Math.round(share * 1000) / 10}%`

const unitOf: Readonly<Record<string, string>> = { xDays: "d", xHours: "h", xMinutes: "min" }
/** date-fns' words, in the short units of a report: "2 h 14 min". */
const shortUnits = { formatDistance: (token: string, count: number) => `${count} ${unitOf[token] ?? token}` }

/**
 * A duration as people read it in a report, to two units at most: "< 1 s", "35 s", "14 min",
 * "2 h 14 min", "2 d 2 h", "40 d 3 h"; "never" when it is infinite.
 */
export const formatDuration = (ms: number): string => {
  if (!Number.isFinite(ms)) return "never"
  if (ms < 1_000) return "< 1 s"
  if (ms < 60_000) return `${Math.round(ms / 1_000)} s`
  // Whole minutes below two days, whole hours above: the smaller of the two units shown.
  const minutes = ms < 172_800_000 ? Math.round(ms / 60_000) : Math.round(ms / 3_600_000) * 60
  const parts = { days: Math.floor(minutes / 1_440), hours: Math.floor(minutes / 60) % 24, minutes: minutes % 60 }
  const units = (["days", "hours", "minutes"] as const).filter((unit) => parts[unit] > 0)
  return durationInWords(parts, { format: units.slice(0, 2), locale: shortUnits })
}

/**
 * A table as the commands print it: the header over the rows, columns two spaces apart, the first
 * `leftColumns` (names) padded on the right and the rest (figures) on the left, trailing spaces cut.
 */
export const textTable = (
  header: ReadonlyArray<string>,
  rows: ReadonlyArray<ReadonlyArray<string>>,
  leftColumns: number
): ReadonlyArray<string> => {
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((cells) => cells[column]!.length)))
  const line = (cells: ReadonlyArray<string>) =>
    cells
      .map((cell, column) => (column < leftColumns ? cell.padEnd(widths[column]!) : cell.padStart(widths[column]!)))
      .join("  ")
      .trimEnd()
  return [line(header), ...rows.map(line)]
}
