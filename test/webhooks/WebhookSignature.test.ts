/**
 * Delivery headers and signatures, without HTTP: which header names are read, what is malformed,
 * where the timestamp window ends, and that what we accept is exactly what `standardwebhooks`'
 * own `verify` accepts.
 */
import { assert, describe, it } from "@effect/vitest"
import { Duration, Redacted, Result } from "effect"
import { Headers } from "effect/http"
import { createHmac } from "node:crypto"
import { Webhook } from "standardwebhooks"
import { makeSignatureVerifier, readDeliveryHeaders } from "../../src/webhooks/WebhookSignature.ts"
import { makeSecret } from "./harness.ts"

const secret = makeSecret()
const body = '{"event_type":"task.updated","id":"tsk_1"}'
const bytes = new TextEncoder().encode(body)
const now = 1_750_000_000
const sign = (key: string, id: string, timestamp: number, payload = body) =>
  new Webhook(key).sign(id, new Date(timestamp * 1000), payload)

const headers = (record: Record<string, string>) => Headers.fromInput(record)
const read = (record: Record<string, string>) => readDeliveryHeaders(headers(record))
const reason = (result: Result.Result<unknown, { readonly reason: string }>) =>
  Result.isFailure(result) ? result.failure.reason : "ok"

const verifier = makeSignatureVerifier([Redacted.make(secret)], Duration.minutes(5))

describe("readDeliveryHeaders", () => {
  it("reads hook-*, webhook-* and svix-* names, preferring the first complete set", () => {
    for (const prefix of ["hook-", "webhook-", "svix-"]) {
      const result = read({ [`${prefix}id`]: "msg_1", [`${prefix}timestamp`]: "1", [`${prefix}signature`]: "v1,abc=" })
      assert.isTrue(Result.isSuccess(result), prefix)
    }
    const mixed = read({
      "svix-id": "msg_svix",
      "svix-timestamp": "1",
      "svix-signature": "v1,abc=",
      "webhook-id": "msg_webhook"
    })
    assert.strictEqual(Result.getOrThrow(mixed).id, "msg_svix", "an incomplete webhook-* set does not win")
  })

  it("keeps the v1 signatures of a space-separated list and skips other versions", () => {
    const result = read({ "hook-id": "msg_1", "hook-timestamp": "1", "hook-signature": "v1a,xyz= v1,abc= v1,def=" })
    assert.deepStrictEqual(Result.getOrThrow(result).signatures, ["abc=", "def="])
  })

  it("refuses missing and malformed headers with the reason", () => {
    assert.strictEqual(reason(read({ "hook-id": "msg_1", "hook-timestamp": "1" })), "missing_header")
    assert.strictEqual(reason(read({})), "missing_header")
    const valid = { "hook-id": "msg_1", "hook-timestamp": "1", "hook-signature": "v1,abc=" }
    assert.strictEqual(reason(read({ ...valid, "hook-id": "" })), "malformed_header")
    assert.strictEqual(reason(read({ ...valid, "hook-id": "has space" })), "malformed_header")
    assert.strictEqual(reason(read({ ...valid, "hook-timestamp": "1.5" })), "malformed_header")
    assert.strictEqual(reason(read({ ...valid, "hook-timestamp": "2024-01-01T00:00:00Z" })), "malformed_header")
    assert.strictEqual(reason(read({ ...valid, "hook-signature": "" })), "malformed_header")
    assert.strictEqual(reason(read({ ...valid, "hook-signature": "abc" })), "malformed_header")
  })
})

const delivery = (timestamp: number, signature: string, id = "msg_1") =>
  Result.getOrThrow(read({ "hook-id": id, "hook-timestamp": String(timestamp), "hook-signature": signature }))

describe("SignatureVerifier", () => {
  it("accepts what standardwebhooks' own verify accepts", () => {
    const timestamp = Math.floor(Date.now() / 1000)
    const signature = sign(secret, "msg_1", timestamp)
    const wire = { "webhook-id": "msg_1", "webhook-timestamp": String(timestamp), "webhook-signature": signature }
    assert.doesNotThrow(() => new Webhook(secret).verify(body, wire))
    assert.strictEqual(reason(verifier.verify(delivery(timestamp, signature), bytes, Date.now())), "ok")
  })

  it("signs the exact bytes: bodies that differ only in bytes that are not UTF-8 do not share a signature", () => {
    const at = now * 1000
    // Both decode to the same text ("{\uFFFD}"); the library, given a Buffer, signs that text.
    const first = new Uint8Array([0x7b, 0xff, 0x7d])
    const second = new Uint8Array([0x7b, 0xfe, 0x7d])
    const exact = (payload: Uint8Array) =>
      `v1,${createHmac("sha256", Buffer.from(secret.slice("whsec_".length), "base64"))
        .update(Buffer.concat([Buffer.from(`msg_1.${now}.`), payload]))
        .digest("base64")}`
    assert.strictEqual(reason(verifier.verify(delivery(now, exact(first)), first, at)), "ok")
    assert.strictEqual(reason(verifier.verify(delivery(now, exact(first)), second, at)), "bad_signature")
    const lossy = new Webhook(secret).sign("msg_1", new Date(now * 1000), Buffer.from(first))
    assert.strictEqual(reason(verifier.verify(delivery(now, lossy), second, at)), "bad_signature")
  })

  it("refuses a changed body, another id, another secret, and accepts any one matching signature", () => {
    const signature = sign(secret, "msg_1", now)
    const at = now * 1000
    assert.strictEqual(
      reason(verifier.verify(delivery(now, signature), new TextEncoder().encode(`${body} `), at)),
      "bad_signature"
    )
    assert.strictEqual(reason(verifier.verify(delivery(now, signature, "msg_2"), bytes, at)), "bad_signature")
    assert.strictEqual(
      reason(verifier.verify(delivery(now, sign(makeSecret(), "msg_1", now)), bytes, at)),
      "bad_signature"
    )
    assert.strictEqual(reason(verifier.verify(delivery(now, `v1,AAAA ${signature}`), bytes, at)), "ok")
    assert.strictEqual(reason(verifier.verify(delivery(now, "v1a,AAAA"), bytes, at)), "bad_signature")
  })

  it("tries every secret of a rotation", () => {
    const next = makeSecret()
    const rotating = makeSignatureVerifier([Redacted.make(secret), Redacted.make(next)], Duration.minutes(5))
    assert.strictEqual(reason(rotating.verify(delivery(now, sign(next, "msg_1", now)), bytes, now * 1000)), "ok")
    assert.strictEqual(reason(rotating.verify(delivery(now, sign(secret, "msg_1", now)), bytes, now * 1000)), "ok")
  })

  it("allows the tolerance either way, and not a second more", () => {
    const signature = sign(secret, "msg_1", now)
    const at = (seconds: number) => (now + seconds) * 1000
    assert.strictEqual(reason(verifier.verify(delivery(now, signature), bytes, at(300))), "ok")
    assert.strictEqual(reason(verifier.verify(delivery(now, signature), bytes, at(-300))), "ok")
    assert.strictEqual(reason(verifier.verify(delivery(now, signature), bytes, at(301))), "stale_timestamp")
    assert.strictEqual(reason(verifier.verify(delivery(now, signature), bytes, at(-301))), "stale_timestamp")
    const strict = makeSignatureVerifier([Redacted.make(secret)], Duration.seconds(30))
    assert.strictEqual(reason(strict.verify(delivery(now, signature), bytes, at(31))), "stale_timestamp")
  })

  it("refuses a secret that is not whsec_<base64> when built", () => {
    assert.throws(() => makeSignatureVerifier([Redacted.make("whsec_")], Duration.minutes(5)))
  })
})
