/**
 * WarehouseError: how a statement of the warehouse fails — named by operation and table, with the
 * SQLSTATE and whether trying again may succeed, never a value (PostgreSQL's own text can quote
 * the data; it stays in `cause`) — and which of PostgreSQL's errors are about one record's data
 * rather than the connection or the load.
 */
import * as Schema from "effect/Schema"
import { ConstraintError, type SqlError, UniqueViolation, UnknownError } from "effect/sql/SqlError"
import { isObject } from "./Rows.ts"

export class WarehouseError extends Schema.TaggedError<WarehouseError>()("WarehouseError", {
  operation: Schema.String,
  resource: Schema.String,
  message: Schema.String,
  /** Whether trying again may succeed (a lost connection, a deadlock), per the driver. */
  retryable: Schema.Boolean,
  cause: Schema.Defect()
}) {}

const sqlStateOf = (error: SqlError): string | undefined => {
  const cause = error.reason.cause
  return isObject(cause) && typeof cause.code === "string" ? cause.code : undefined
}

/**
 * Data exceptions (22), integrity violations (23), limits such as an oversized index entry (54)
 * and errors raised by triggers (P0): trying the same record again fails the same way, so the
 * batch is split to find it. Anything else (connection, deadlock, timeout) fails the call.
 */
export const isRecordLevel = (error: SqlError): boolean => {
  if (error.reason instanceof ConstraintError || error.reason instanceof UniqueViolation) return true
  if (!(error.reason instanceof UnknownError)) return false
  const code = sqlStateOf(error)
  return code !== undefined && /^(22|23|54|P0)/.test(code)
}

export const describeRefusal = (error: SqlError): string => {
  const cause = error.reason.cause
  const detail = isObject(cause) && typeof cause.message === "string" ? cause.message : error.message
  return `PostgreSQL refused the record (SQLSTATE ${sqlStateOf(error) ?? "unknown"}): ${detail}`
}

/** The error of a failed statement: the message names the operation, the table and the SQLSTATE. */
export const toWarehouseError = (operation: string, resource: string) => (error: SqlError) =>
  new WarehouseError({
    operation,
    resource,
    message: `${operation} ${resource} failed (SQLSTATE ${sqlStateOf(error) ?? "none"}${error.reason.isRetryable ? ", retryable" : ""})`,
    retryable: error.reason.isRetryable,
    cause: error
  })
