/**
 * The plain-data response every sandbox handler returns, and the request-side helpers of spec §4:
 * pagination parameters (rule 1), `updated_since` (rule 4), and the JSON body rule (a body is read
 * only under `Content-Type: application/json`; otherwise the fields arrive empty). Handlers return
 * data rather than `HttpServerResponse` so idempotency can cache it and faults can mangle it.
 */
import { Effect, Predicate, Schema } from "effect"
import { type ApiError, badRequest, invalidJson } from "./errors.ts"

export interface ApiResponse {
  readonly status: number
  /** A JSON value, or undefined for an empty body. */
  readonly body: unknown
  readonly headers?: Readonly<Record<string, string>>
}

export const ok = (body: unknown, status = 200): ApiResponse => ({ status, body })

export const noContent: ApiResponse = { status: 204, body: undefined }

export const fromError = (error: ApiError): ApiResponse => ({
  status: error.status,
  body: error.body,
  ...(error.headers === undefined ? {} : { headers: error.headers })
})

export interface Pagination {
  readonly page: number
  readonly perPage: number
}

export const MAX_PER_PAGE = 100
export const DEFAULT_PER_PAGE = 25

const integerParam = (query: URLSearchParams, name: string) => {
  const raw = query.get(name)
  if (raw === null || raw === "") return Effect.succeed(undefined)
  return /^-?\d+$/.test(raw.trim())
    ? Effect.succeed(Number(raw.trim()))
    : Effect.fail(badRequest(`${name} must be an integer, got "${raw}"`))
}

/** Spec §4 rule 1: page >= 1 (default 1); per_page 1..100 (default 25), larger values clamped. */
export const pagination = Effect.fnUntraced(function* (query: URLSearchParams) {
  const page = (yield* integerParam(query, "page")) ?? 1
  if (page < 1) return yield* badRequest(`page must be >= 1, got ${page}`)
  const perPage = (yield* integerParam(query, "per_page")) ?? DEFAULT_PER_PAGE
  if (perPage < 1) return yield* badRequest(`per_page must be between 1 and ${MAX_PER_PAGE}, got ${perPage}`)
  const result: Pagination = { page, perPage: Math.min(perPage, MAX_PER_PAGE) }
  return result
})

/** The list envelope of spec §2.1. */
export const listEnvelope = (data: ReadonlyArray<unknown>, total: number, paging: Pagination): ApiResponse =>
  ok({
    data,
    pagination: {
      current_page: paging.page,
      total_pages: Math.ceil(total / paging.perPage),
      total_count: total,
      per_page: paging.perPage
    }
  })

const ISO_DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|[+-]\d{2}:?\d{2})?$/i

/**
 * Spec §2.1/§4 rule 4: an ISO 8601 date-time (a missing offset means UTC). Unix timestamps and bare
 * dates are refused with 400.
 */
export const isoDateTimeParam = Effect.fnUntraced(function* (query: URLSearchParams, name: string) {
  const raw = query.get(name)
  if (raw === null || raw === "") return undefined
  const value = raw.trim()
  if (/^\d+(\.\d+)?$/.test(value)) {
    return yield* badRequest(
      `${name} must be an ISO 8601 date-time such as 2024-05-01T00:00:00Z; Unix timestamps are not accepted`
    )
  }
  const match = ISO_DATE_TIME.exec(value)
  const offset = match?.[8]
  const normalized =
    match === null
      ? undefined
      : `${match[1]}-${match[2]}-${match[3]}T${match[4]}:${match[5]}:${match[6] ?? "00"}.${(match[7] ?? "0").padEnd(3, "0").slice(0, 3)}${
          offset === undefined || offset.toUpperCase() === "Z"
            ? "Z"
            : offset.includes(":")
              ? offset
              : `${offset.slice(0, 3)}:${offset.slice(3)}`
        }`
  const millis = normalized === undefined ? Number.NaN : Date.parse(normalized)
  if (Number.isNaN(millis)) {
    return yield* badRequest(`${name} must be an ISO 8601 date-time such as 2024-05-01T00:00:00Z, got "${raw}"`)
  }
  return millis
})

export const isJsonContentType = (contentType: string | undefined): boolean =>
  contentType !== undefined && contentType.split(";")[0]!.trim().toLowerCase() === "application/json"

/**
 * Spec §4: a JSON body counts only under `Content-Type: application/json`; without it the fields
 * arrive empty. Malformed JSON is `400 invalid_json`; JSON that is not an object, too.
 */
export const jsonObjectBody = (
  contentType: string | undefined,
  text: string
): Effect.Effect<Readonly<Record<string, unknown>>, ApiError> => {
  if (!isJsonContentType(contentType)) return Effect.succeed({})
  return Effect.try({
    try: () => JSON.parse(text) as unknown,
    catch: (cause) =>
      invalidJson(`request body is not valid JSON: ${String(cause instanceof Error ? cause.message : cause)}`)
  }).pipe(
    Effect.flatMap((value) =>
      Predicate.isObject(value) ? Effect.succeed(value) : Effect.fail(invalidJson("request body must be a JSON object"))
    )
  )
}

/** JSON text to a value, or None when it is not JSON. */
export const parseJsonOption = Schema.decodeUnknownOption(Schema.fromJsonString(Schema.Unknown))

/** Key-sorted JSON, so two bodies that differ only in key order compare equal. */
export const canonicalJson = (value: unknown): string => {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`
  if (Predicate.isObject(value)) {
    const entries = Object.entries(value).toSorted(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    return `{${entries.map(([key, v]) => `${JSON.stringify(key)}:${canonicalJson(v)}`).join(",")}}`
  }
  return JSON.stringify(value) ?? "null"
}
