/**
 * Whether a failure was the database's (a restart, an outage) rather than the CRM's or a bug's,
 * for the loops that then try again instead of recording a final outcome.
 */
import * as Cause from "effect/Cause"
import { isSqlError } from "effect/sql/SqlError"

/**
 * Whether a defect is the database going away mid-transaction: effect/sql makes a rollback that
 * fails (its connection is gone) a defect carrying the SqlError.
 */
export const isDatabaseDefect = (cause: Cause.Cause<unknown>): boolean =>
  cause.reasons.some((reason) => Cause.isDieReason(reason) && isSqlError(reason.defect))

/** Whether a cause is the database's: a SqlError failure, or the defect above. */
export const isDatabaseCause = (cause: Cause.Cause<unknown>): boolean =>
  isDatabaseDefect(cause) || cause.reasons.some((reason) => Cause.isFailReason(reason) && isSqlError(reason.error))
