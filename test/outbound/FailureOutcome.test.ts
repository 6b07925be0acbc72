/**
 * What the outbound writer makes of a call the CRM failed, without a CRM or a database: which
 * answers are tried again, which wait for a person, and which prove that no record was created.
 */
import { assert, describe, it } from "@effect/vitest"
import { Duration } from "effect"
import {
  CrmError,
  type CrmErrorReason,
  Forbidden,
  Invalid,
  KeyExpired,
  KeyInUse,
  NotFound,
  RateLimited,
  Server,
  Transport
} from "../../src/crm/CrmError.ts"
import { failureOutcome, type FailureOutcome } from "../../src/outbound/OutboundWriter.ts"

const error = (reason: CrmErrorReason, attempts = 1) =>
  new CrmError({ operation: "CrmClient.createProspect", connection: "main", attempts, reason })

const policy = { retryServerErrors: false, maxAttempts: 5 }

const outcome = (
  reason: CrmErrorReason,
  options: { readonly rowAttempts?: number; readonly callAttempts?: number } = {}
) => failureOutcome({ attempts: options.rowAttempts ?? 1 }, error(reason, options.callAttempts), policy)

/** The status and settle options, or "reschedule". */
const summary = (result: FailureOutcome) =>
  result._tag === "Reschedule" ? "reschedule" : { status: result.status, options: result.options }

describe("failureOutcome", () => {
  it("tries transient answers again, with the same key, until the last attempt", () => {
    const limited = new RateLimited({ limit: "token", retryAfter: Duration.seconds(1) })
    assert.strictEqual(summary(outcome(limited)), "reschedule")
    assert.strictEqual(summary(outcome(new KeyInUse({}))), "reschedule")
    const last = outcome(limited, { rowAttempts: 5 })
    assert.deepStrictEqual(summary(last), { status: "failed", options: undefined })
    assert.include(last.error, "gave up after 5 attempts")
  })

  it("sends a 5xx to a person, unless outbound.retry_server_errors says to retry it", () => {
    const server = new Server({ status: 503 })
    assert.deepStrictEqual(summary(outcome(server)), {
      status: "needs_review",
      options: { response: { status: 503, error: undefined } }
    })
    const retried = failureOutcome({ attempts: 1 }, error(server), { ...policy, retryServerErrors: true })
    assert.strictEqual(retried._tag, "Reschedule")
  })

  it("a lost answer of a request that went out waits for a person; one that never left is tried again", () => {
    // A reset after the request went out: the CRM may have created the record and answered 503,
    // which it does not cache, so the same key would create it again.
    const lost = outcome(new Transport({ kind: "network", detail: "connection failed", mayHaveRun: true }))
    assert.deepStrictEqual(summary(lost), { status: "needs_review", options: undefined })
    assert.include(lost._tag === "Settle" ? lost.error : "", "a retry would run again")
    assert.deepStrictEqual(summary(outcome(new Transport({ kind: "timeout", mayHaveRun: true }))), {
      status: "needs_review",
      options: undefined
    })
    // Refused before any connection: nothing ran.
    const refused = new Transport({ kind: "network", detail: "connection failed", mayHaveRun: false })
    assert.strictEqual(summary(outcome(refused)), "reschedule")
    const retried = failureOutcome({ attempts: 1 }, error(new Transport({ kind: "timeout", mayHaveRun: true })), {
      ...policy,
      retryServerErrors: true
    })
    assert.strictEqual(retried._tag, "Reschedule")
  })

  it("a refused request created nothing; a token that cannot write fails, having created nothing only on first contact", () => {
    const invalid = new Invalid({ status: 422, code: "validation_failed", detail: "name is required" })
    assert.deepStrictEqual(summary(outcome(invalid)), {
      status: "needs_review",
      options: {
        response: { status: 422, error: "validation_failed", detail: "name is required" },
        createdNothing: true
      }
    })
    assert.deepStrictEqual(summary(outcome(new NotFound({}))), {
      status: "needs_review",
      options: { response: { status: undefined, error: undefined, detail: undefined }, createdNothing: true }
    })
    const forbidden = new Forbidden({ write: true })
    assert.deepStrictEqual(summary(outcome(forbidden)), { status: "failed", options: { createdNothing: true } })
    assert.deepStrictEqual(summary(outcome(forbidden, { rowAttempts: 2 })), {
      status: "failed",
      options: { createdNothing: false }
    })
  })

  it("a reused or expired key may hide a record: a person checks, and nothing is claimed about it", () => {
    const reused = outcome(new Invalid({ status: 422, code: "idempotency_key_reused" }))
    assert.deepStrictEqual(summary(reused), {
      status: "needs_review",
      options: { response: { status: 422, error: "idempotency_key_reused", detail: undefined } }
    })
    const expired = outcome(new KeyExpired({}))
    assert.deepStrictEqual(summary(expired), { status: "needs_review", options: undefined })
    assert.include(expired.error, "--new-key")
  })

  it("says in `error` what the CRM said was wrong (its detail), not only its code", () => {
    const invalid = new Invalid({ status: 422, code: "validation_failed", detail: "book_id is unknown" })
    const refused = outcome(invalid)
    assert.strictEqual(
      refused.error,
      "main: CrmClient.createProspect: the CRM refused the request (422 validation_failed): book_id is unknown"
    )
    // Without a detail, the code is all there is.
    assert.strictEqual(
      outcome(new Invalid({ status: 422, code: "validation_failed" })).error,
      "main: CrmClient.createProspect: the CRM refused the request (422 validation_failed)"
    )
  })
})
