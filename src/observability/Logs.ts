/**
 * How crm-sync logs, on stderr: readable text (Effect's pretty logger) or one JSON object per
 * line that Loki, Elasticsearch, Datadog and `jq` read without a mapping. A JSON line has flat,
 * conventional keys: `time` (ISO), `level` (lowercase), `msg`, then the log's annotations as
 * top-level fields, `error` (the cause in one line) and `stack` for a defect, and
 * `trace_id`/`span_id` while a span is current. Effect's `Logger.formatJson` is not used: it
 * nests the annotations and adds `fiberId` and `spans` to every line.
 */
import * as Cause from "effect/Cause"
import * as Formatter from "effect/Formatter"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import type * as LogLevel from "effect/LogLevel"
import * as References from "effect/References"
import { oneLine } from "./Text.ts"

export type LogFormat = "json" | "text"

/** The keys a line always has; an annotation of the same name does not replace them. */
const FIRST = new Set(["time", "level", "msg"])

const messageText = (message: unknown): string =>
  (Array.isArray(message) ? message : [message])
    .map((part) => (typeof part === "string" ? part : Formatter.formatJson(part)))
    .join(" ")

/** One log event as a flat record, in the order a reader scans it. */
export const logRecord = (options: Logger.Options<unknown>): Record<string, unknown> => {
  const { cause, date, fiber, logLevel, message } = options
  const record: Record<string, unknown> = {
    time: date.toISOString(),
    level: logLevel.toLowerCase(),
    msg: messageText(message)
  }
  for (const [key, value] of Object.entries(fiber.getRef(References.CurrentLogAnnotations))) {
    if (!FIRST.has(key)) record[key] = value
  }
  if (cause.reasons.length > 0) {
    record.error = oneLine(cause, 2_000)
    // A defect is a bug: where it happened is what its reader needs.
    if (cause.reasons.some(Cause.isDieReason)) record.stack = Cause.pretty(cause)
  }
  const span = fiber.cache.span
  if (span !== undefined && span.sampled) {
    record.trace_id = span.traceId
    record.span_id = span.spanId
  }
  return record
}

/** A log event as one JSON line (secrets shown as `<redacted>`, as everywhere). */
export const jsonLine: Logger.Logger<unknown, string> = Logger.make((options) =>
  Formatter.formatJson(logRecord(options))
)

/** Logs on stderr in `format`, from `level` up; stdout stays for command output (`status --json`). */
export const LoggingLayer = (format: LogFormat, level: LogLevel.LogLevel) =>
  Layer.mergeAll(
    Logger.layer([format === "json" ? Logger.withConsoleError(jsonLine) : Logger.consolePretty()]),
    Layer.succeed(Logger.LogToStderr, true),
    Layer.succeed(References.MinimumLogLevel, level)
  )
