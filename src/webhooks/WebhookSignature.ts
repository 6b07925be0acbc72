/**
 * Webhook delivery authentication (spec §5 rule 7): the three delivery headers, and the signature
 * over the raw, unparsed body with the `standardwebhooks` library. Missing or malformed headers are
 * a 400, a bad signature or a timestamp outside the tolerance a 401. Several secrets may be live at
 * once during a rotation: a delivery signed by any of them is accepted.
 */
import * as Duration from "effect/Duration"
import * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import type { Headers } from "effect/http"
import { createHmac, timingSafeEqual } from "node:crypto"
import { Webhook } from "standardwebhooks"

/** Why a delivery was refused; the values are also the `result` label of the deliveries metric. */
export const RejectionReason = Schema.Literals([
  "unknown_endpoint",
  "body_too_large",
  "unreadable_body",
  "missing_header",
  "malformed_header",
  "bad_signature",
  "stale_timestamp"
])
export type RejectionReason = typeof RejectionReason.Type

const statusOf: Record<RejectionReason, number> = {
  unknown_endpoint: 404,
  body_too_large: 413,
  unreadable_body: 400,
  missing_header: 400,
  malformed_header: 400,
  bad_signature: 401,
  stale_timestamp: 401
}

/** A delivery refused before anything was stored. `detail` is safe to send back and to log. */
export class WebhookRejected extends Schema.TaggedError<WebhookRejected>()("WebhookRejected", {
  reason: RejectionReason,
  detail: Schema.String
}) {
  get status(): number {
    return statusOf[this.reason]
  }
}

/** Accepted prefixes, in order of preference: the spec's neutral word, Standard Webhooks, Svix. */
export const HEADER_PREFIXES = ["hook-", "webhook-", "svix-"] as const

export interface DeliveryHeaders {
  /** The delivery's id: the inbox key (spec §6.1: process idempotently using hook-id). */
  readonly id: string
  /** Seconds since the epoch, as signed. */
  readonly timestamp: number
  /** The base64 HMACs of the `v1` entries of the signature header (other versions are skipped). */
  readonly signatures: ReadonlyArray<string>
}

const ID_PATTERN = /^[\x21-\x7e]{1,255}$/
const TIMESTAMP_PATTERN = /^\d{1,12}$/
const SIGNATURE_ENTRY = /^(v\d+[a-z]*),([A-Za-z0-9+/=_-]+)$/

const accepted: Result.Result<void, WebhookRejected> = Result.succeed(undefined)

const reject = (reason: RejectionReason, detail: string) => Result.fail(new WebhookRejected({ reason, detail }))

/**
 * Reads id, timestamp and signatures from the first complete set of `hook-*`, `webhook-*` or
 * `svix-*` headers. Header names are already lower-case in `Headers`. The spec writes `hook-*` and
 * says the delivery platform's real names carry a vendor word, so `webhook-*` (Standard Webhooks)
 * and `svix-*` are accepted too; the first prefix that brings all three wins.
 */
export const readDeliveryHeaders = (headers: Headers.Headers): Result.Result<DeliveryHeaders, WebhookRejected> => {
  const prefix = HEADER_PREFIXES.find(
    (candidate) =>
      headers[`${candidate}id`] !== undefined &&
      headers[`${candidate}timestamp`] !== undefined &&
      headers[`${candidate}signature`] !== undefined
  )
  if (prefix === undefined) {
    return reject("missing_header", "expected hook-id, hook-timestamp and hook-signature (or webhook-*, svix-*)")
  }
  const id = headers[`${prefix}id`]!.trim()
  const timestamp = headers[`${prefix}timestamp`]!.trim()
  const signature = headers[`${prefix}signature`]!.trim()
  if (!ID_PATTERN.test(id)) return reject("malformed_header", `${prefix}id must be 1 to 255 visible ASCII characters`)
  if (!TIMESTAMP_PATTERN.test(timestamp)) return reject("malformed_header", `${prefix}timestamp must be Unix seconds`)
  if (signature === "") return reject("malformed_header", `${prefix}signature is empty`)
  const signatures: Array<string> = []
  for (const entry of signature.split(" ")) {
    if (entry === "") continue
    const match = SIGNATURE_ENTRY.exec(entry)
    if (match === null) return reject("malformed_header", `${prefix}signature must be "v1,<base64>" entries`)
    if (match[1] === "v1") signatures.push(match[2]!)
  }
  return Result.succeed({ id, timestamp: Number(timestamp), signatures })
}

export interface SignatureVerifier {
  /** Whether the signed timestamp is within the tolerance of `nowMillis` (either side). */
  readonly checkTimestamp: (headers: DeliveryHeaders, nowMillis: number) => Result.Result<void, WebhookRejected>
  /** Whether one of the `v1` signatures is the HMAC of `body` (the bytes exactly as received) by one of the secrets. */
  readonly checkSignature: (headers: DeliveryHeaders, body: Uint8Array) => Result.Result<void, WebhookRejected>
  /** Both checks, timestamp first. */
  readonly verify: (
    headers: DeliveryHeaders,
    body: Uint8Array,
    nowMillis: number
  ) => Result.Result<void, WebhookRejected>
}

const SECRET_PREFIX = "whsec_"

/**
 * Builds a verifier for one endpoint. Throws (as the library does) when a secret is not a valid
 * `whsec_<base64>` key; callers turn that into a configuration error at startup.
 *
 * The HMAC itself is the library's (`Webhook.sign`, the same code its `verify` runs); the
 * comparison and the timestamp window are done here, because `verify` reads `Date.now()` and
 * hard-codes five minutes, while crm-sync's tolerance is configurable (`webhooks.tolerance`) and
 * its clock is Effect's `Clock` (testable).
 */
export const makeSignatureVerifier = (
  secrets: ReadonlyArray<Redacted.Redacted<string>>,
  tolerance: Duration.Duration
): SignatureVerifier => {
  const keys = secrets.map((secret) => {
    // The library validates the secret's form (and throws as documented above) …
    void new Webhook(Redacted.value(secret))
    // … and the HMAC key is its base64 part (Standard Webhooks: `whsec_<base64>`).
    return Buffer.from(Redacted.value(secret).slice(SECRET_PREFIX.length), "base64")
  })
  const toleranceSeconds = Math.floor(Duration.toSeconds(tolerance))

  const checkTimestamp = (headers: DeliveryHeaders, nowMillis: number) => {
    const skew = Math.floor(nowMillis / 1000) - headers.timestamp
    if (skew > toleranceSeconds) return reject("stale_timestamp", "timestamp is too old")
    if (-skew > toleranceSeconds) return reject("stale_timestamp", "timestamp is in the future")
    return accepted
  }

  const checkSignature = (headers: DeliveryHeaders, body: Uint8Array) => {
    if (headers.signatures.length === 0) return reject("bad_signature", "no v1 signature")
    // The HMAC over the exact bytes received: the library decodes a Buffer as UTF-8 text first, so
    // two bodies that differ only in bytes that are not UTF-8 would share one signature.
    const prefix = Buffer.from(`${headers.id}.${headers.timestamp}.`)
    for (const key of keys) {
      const expected = Buffer.from(createHmac("sha256", key).update(prefix).update(body).digest("base64"))
      for (const candidate of headers.signatures) {
        const given = Buffer.from(candidate)
        if (given.length === expected.length && timingSafeEqual(given, expected)) return accepted
      }
    }
    return reject("bad_signature", "no signature matches")
  }

  return {
    checkTimestamp,
    checkSignature,
    verify: (headers, body, nowMillis) =>
      Result.flatMap(checkTimestamp(headers, nowMillis), () => checkSignature(headers, body))
  }
}
