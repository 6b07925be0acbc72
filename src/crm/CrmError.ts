/**
 * CrmError: every way a call to the CRM can fail, as one tagged error with a tagged `reason`.
 *
 * The reason says what happened (spec §7 gives the body `{error, detail}` but leaves most status
 * and error codes "not shown", so the mapping below goes by HTTP status first and by `error` code
 * only where the spec names one), and whether trying again can help (`retryable`). The error
 * names the operation, the connection and the record id; it never carries a request payload, a
 * response body beyond the server's own short `detail`, or a token.
 */
import * as Duration from "effect/Duration"
import * as Predicate from "effect/Predicate"
import * as Schema from "effect/Schema"

/** Longest server `detail` kept: enough to read a validation message, too short to hold a record. */
const DETAIL_LIMIT = 200

const Detail = Schema.optionalKey(Schema.String)

/** 401: the token is missing, malformed, expired or revoked. */
export class Unauthorized extends Schema.TaggedError<Unauthorized>()("Unauthorized", {
  code: Detail,
  detail: Detail
}) {
  get retryable(): boolean {
    return false
  }
  get description(): string {
    return "the CRM rejected the token (401)"
  }
}

/** 403: the token may not do this; on a write, usually a read-only personal token (spec §5.2). */
export class Forbidden extends Schema.TaggedError<Forbidden>()("Forbidden", {
  write: Schema.Boolean,
  code: Detail,
  detail: Detail
}) {
  get retryable(): boolean {
    return false
  }
  get description(): string {
    return this.write
      ? "the token has no write access (403): enable write access for it in the CRM's API settings"
      : "the token may not read this (403)"
  }
}

/** 404: no such record (or no such path). */
export class NotFound extends Schema.TaggedError<NotFound>()("NotFound", {
  code: Detail,
  detail: Detail
}) {
  get retryable(): boolean {
    return false
  }
  get description(): string {
    return "not found (404)"
  }
}

/** Other 4xx: the request itself is wrong (validation, `invalid_json`, an idempotency-key clash). */
export class Invalid extends Schema.TaggedError<Invalid>()("Invalid", {
  status: Schema.Int,
  code: Detail,
  detail: Detail
}) {
  get retryable(): boolean {
    return false
  }
  get description(): string {
    return `the CRM refused the request (${this.status}${this.code === undefined ? "" : ` ${this.code}`})`
  }
}

/** The three buckets of spec §8, or `unknown` when a 429 body does not say which one ran out. */
export const LimitName = Schema.Literals(["token", "company", "ip", "unknown"])
export type LimitName = typeof LimitName.Type

/** 429 (spec §7): `limit` names the exhausted bucket, `retryAfter` is the clamped wait. */
export class RateLimited extends Schema.TaggedError<RateLimited>()("RateLimited", {
  limit: LimitName,
  retryAfter: Schema.Duration
}) {
  get retryable(): boolean {
    return true
  }
  get description(): string {
    return `rate limited on the ${this.limit} bucket (429), retry after ${Duration.format(this.retryAfter)}`
  }
}

/** 5xx: the CRM failed; spec §4 rule 6 says 5xx responses are never cached, so a retry runs again. */
export class Server extends Schema.TaggedError<Server>()("Server", {
  status: Schema.Int,
  code: Detail
}) {
  get retryable(): boolean {
    return true
  }
  get description(): string {
    return `the CRM failed (${this.status})`
  }
}

/** No usable response: connection refused or reset, timeout, a redirect we refuse to follow. */
export class Transport extends Schema.TaggedError<Transport>()("Transport", {
  kind: Schema.Literals(["network", "timeout", "redirect"]),
  detail: Detail,
  /**
   * Whether the request may have reached the CRM and run there: false only when no connection was
   * made (refused, unresolved, unreachable). A lost answer of a create that ran may have been a 5xx,
   * which the CRM does not cache (spec §4 rule 6): sending it again could create a second record.
   */
  mayHaveRun: Schema.optionalKey(Schema.Boolean)
}) {
  get retryable(): boolean {
    // A redirect is configuration, not weather: the same request would be redirected again.
    return this.kind !== "redirect"
  }
  get description(): string {
    return this.kind === "timeout"
      ? "the CRM did not answer in time"
      : this.kind === "redirect"
        ? `the CRM answered with a redirect, which crm-sync does not follow${this.detail === undefined ? "" : ` (${this.detail})`}`
        : `cannot reach the CRM${this.detail === undefined ? "" : ` (${this.detail})`}`
  }
}

/**
 * A 2xx whose body is not what the spec promises. `malformed` bodies (not JSON at all, e.g.
 * truncated in transit) are worth one more try; well-formed JSON of the wrong shape is not.
 */
export class Undecodable extends Schema.TaggedError<Undecodable>()("Undecodable", {
  status: Schema.Int,
  malformed: Schema.Boolean,
  detail: Detail
}) {
  get retryable(): boolean {
    return this.malformed
  }
  get description(): string {
    return this.malformed
      ? `the CRM's response (${this.status}) is not JSON`
      : `the CRM's response (${this.status}) does not have the documented shape${this.detail === undefined ? "" : `: ${this.detail}`}`
  }
}

/** The OAuth refresh token was refused (`invalid_grant`): only `crm-sync connect` can fix it. */
export class NeedsReauthorization extends Schema.TaggedError<NeedsReauthorization>()("NeedsReauthorization", {
  detail: Detail
}) {
  get retryable(): boolean {
    return false
  }
  get description(): string {
    return "the connection needs re-authorization: run `crm-sync connect`"
  }
}

/**
 * 409 on a write: a request with the same `Idempotency-Key` is still running at the CRM (the
 * sandbox's `idempotency_key_in_use`). Retryable, with the same key: the first request decides.
 */
export class KeyInUse extends Schema.TaggedError<KeyInUse>()("KeyInUse", {
  code: Detail,
  detail: Detail
}) {
  get retryable(): boolean {
    return true
  }
  get description(): string {
    return "an earlier request with this idempotency key is still running at the CRM (409)"
  }
}

/**
 * Not sent: the call's idempotency key had outlived the CRM's memory of it (spec §8: 1 hour) by the
 * time a permit came, and an earlier attempt may have created the record, so sending again could
 * create it twice.
 */
export class KeyExpired extends Schema.TaggedError<KeyExpired>()("KeyExpired", {}) {
  get retryable(): boolean {
    return false
  }
  get description(): string {
    return "not sent: the idempotency key is past the CRM's 1-hour lifetime and an earlier attempt may have created the record"
  }
}

/** No token to send: an OAuth connection never connected, or the encryption key is missing. */
export class MissingCredentials extends Schema.TaggedError<MissingCredentials>()("MissingCredentials", {
  detail: Schema.String
}) {
  get retryable(): boolean {
    return false
  }
  get description(): string {
    return this.detail
  }
}

/**
 * crm-sync's own database could not be consulted — the rate budget or the stored credentials —
 * so nothing was sent (no request leaves without a permit).
 */
export class DatabaseUnavailable extends Schema.TaggedError<DatabaseUnavailable>()("DatabaseUnavailable", {
  detail: Detail
}) {
  get retryable(): boolean {
    return true
  }
  get description(): string {
    return `crm-sync's database is unavailable${this.detail === undefined ? "" : ` (${this.detail})`}`
  }
}

export const CrmErrorReason = Schema.Union([
  Unauthorized,
  Forbidden,
  NotFound,
  Invalid,
  RateLimited,
  Server,
  Transport,
  Undecodable,
  NeedsReauthorization,
  MissingCredentials,
  DatabaseUnavailable,
  KeyInUse,
  KeyExpired
])
export type CrmErrorReason = typeof CrmErrorReason.Type

export class CrmError extends Schema.TaggedError<CrmError>()("CrmError", {
  /** The client method, e.g. `CrmClient.getMeeting`. */
  operation: Schema.String,
  connection: Schema.String,
  /** The record the call was about, when there is one (path ids only, never body fields). */
  recordId: Schema.optionalKey(Schema.String),
  /** How many attempts were made before giving up (1 = no retry). */
  attempts: Schema.Int,
  reason: CrmErrorReason
}) {
  get retryable(): boolean {
    return this.reason.retryable
  }
  override get message(): string {
    const subject = this.recordId === undefined ? this.operation : `${this.operation} ${this.recordId}`
    const tries = this.attempts > 1 ? ` after ${this.attempts} attempts` : ""
    return `${this.connection}: ${subject}: ${this.reason.description}${tries}`
  }
}

/** Trims a server `detail` to something safe to log: one line, bounded length. */
export const trimDetail = (detail: unknown): string | undefined =>
  Predicate.isString(detail) && detail !== "" ? detail.replace(/\s+/g, " ").slice(0, DETAIL_LIMIT) : undefined
