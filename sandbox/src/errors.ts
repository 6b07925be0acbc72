/**
 * The sandbox's one error type. Every failure the sandbox reports is an HTTP answer in the body
 * format of spec §7 (`{error, detail}` with the matching status), so the error carries exactly
 * that, plus optional headers (`Retry-After`) and extra body members (the 429's `limit`).
 * The typed admin handle fails with the same error, so an in-process caller and an HTTP caller
 * see the same codes.
 */
import { Schema } from "effect"

export class ApiError extends Schema.TaggedError<ApiError>()("ApiError", {
  status: Schema.Int,
  error: Schema.String,
  detail: Schema.String,
  headers: Schema.optionalKey(Schema.Record(Schema.String, Schema.String)),
  extra: Schema.optionalKey(Schema.Record(Schema.String, Schema.Unknown))
}) {
  override get message(): string {
    return `${this.status} ${this.error}: ${this.detail}`
  }

  /** The response body of spec §7. */
  get body(): Record<string, unknown> {
    return { error: this.error, detail: this.detail, ...this.extra }
  }
}

export const badRequest = (detail: string, error = "invalid_parameter") => new ApiError({ status: 400, error, detail })

export const invalidJson = (detail: string) => new ApiError({ status: 400, error: "invalid_json", detail })

export const unauthorized = (detail: string) => new ApiError({ status: 401, error: "unauthorized", detail })

export const forbidden = (error: string, detail: string) => new ApiError({ status: 403, error, detail })

export const notFound = (detail: string) => new ApiError({ status: 404, error: "not_found", detail })

export const methodNotAllowed = (detail: string) => new ApiError({ status: 405, error: "method_not_allowed", detail })

export const conflict = (error: string, detail: string) => new ApiError({ status: 409, error, detail })

export const validationFailed = (detail: string) => new ApiError({ status: 422, error: "validation_failed", detail })

export const rateLimited = (limit: "token" | "company" | "ip", retryAfterSeconds: number, detail: string) =>
  new ApiError({
    status: 429,
    error: "rate_limited",
    detail,
    headers: { "retry-after": String(retryAfterSeconds) },
    extra: { limit }
  })
