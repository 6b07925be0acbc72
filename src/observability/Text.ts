/**
 * How crm-sync tells things in one line — in logs, `job_runs.error`, the inbox's `last_error`, the
 * command line's last word: an error's own message (else its cause's, else its tag), whitespace
 * collapsed and cut short. Never a payload: the messages come from crm-sync's own errors, which
 * name fields and ids, not values. And a share as a percentage.
 */
import { Cause, Predicate } from "effect"

/** The message of an error (a Cause is squashed first), or its cause's, or its tag. */
export const messageOf = (error: unknown): string => {
  if (Cause.isCause(error)) return messageOf(Cause.squash(error))
  const message =
    typeof error === "string"
      ? error
      : Predicate.hasProperty(error, "message") && typeof error.message === "string"
        ? error.message
        : ""
  if (message.trim() !== "") return message
  const cause = Predicate.hasProperty(error, "cause") ? error.cause : undefined
  const tag = Predicate.hasProperty(error, "_tag") ? String(error._tag) : error instanceof Error ? error.name : "error"
  return cause === undefined || cause === error ? tag : `${tag}: ${messageOf(cause)}`
}

/** `messageOf(error)` on one line, at most `max` characters. */
export const oneLine = (error: unknown, max = 500): string => messageOf(error).replace(/\s+/g, " ").trim().slice(0, max)

/** A share (0..1) as a percentage with one decimal: `0.1234` is `12.3%`. */
export const percent = (share: number): string => `${Math.round(share * 1000) / 10}%`
