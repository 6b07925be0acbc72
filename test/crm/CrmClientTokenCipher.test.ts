/**
 * Tokens at rest (TokenCipher): AES-256-GCM round trip, the connection name bound as associated
 * data, tampering and wrong keys detected, and the key formats `CRM_SYNC_ENCRYPTION_KEY` accepts.
 */
import { assert, describe, it } from "@effect/vitest"
import { Redacted, Result } from "effect"
import { randomBytes } from "node:crypto"
import { keyProblem, open, parseKey, seal, type TokenKey } from "../../src/crm/TokenCipher.ts"

const keyOf = (text: string): TokenKey => {
  const parsed = parseKey(Redacted.make(text))
  assert.isTrue(Result.isSuccess(parsed), text)
  return Result.getOrThrow(parsed)
}

const secret = Redacted.make("crm_oat_the-access-token")

describe("TokenCipher", () => {
  it("round-trips a token for its connection, as ciphertext", () => {
    const key = keyOf(randomBytes(32).toString("base64"))
    const sealed = seal(key, "acme", secret)
    assert.notInclude(Buffer.from(sealed).toString("latin1"), "crm_oat_")
    const opened = open(key, "acme", sealed)
    assert.isTrue(Result.isSuccess(opened))
    assert.strictEqual(Redacted.value(Result.getOrThrow(opened)), "crm_oat_the-access-token")
  })

  it("uses a fresh nonce each time", () => {
    const key = keyOf(randomBytes(32).toString("hex"))
    assert.notDeepEqual(seal(key, "acme", secret), seal(key, "acme", secret))
  })

  it("binds the connection name: another connection's row does not open", () => {
    const key = keyOf(randomBytes(32).toString("base64"))
    const sealed = seal(key, "acme", secret)
    assert.isTrue(Result.isFailure(open(key, "globex", sealed)))
  })

  it("detects a wrong key and tampered bytes", () => {
    const key = keyOf(randomBytes(32).toString("base64"))
    const sealed = seal(key, "acme", secret)
    assert.isTrue(Result.isFailure(open(keyOf(randomBytes(32).toString("base64")), "acme", sealed)))
    const tampered = new Uint8Array(sealed)
    tampered[tampered.length - 1] = tampered[tampered.length - 1]! ^ 0x01
    assert.isTrue(Result.isFailure(open(key, "acme", tampered)))
    assert.isTrue(Result.isFailure(open(key, "acme", sealed.subarray(0, 10))))
  })

  it("accepts 32-byte keys as hex, base64 or base64url, and nothing else", () => {
    const bytes = randomBytes(32)
    const fromHex = keyOf(bytes.toString("hex"))
    const fromBase64 = keyOf(bytes.toString("base64"))
    const fromBase64url = keyOf(bytes.toString("base64url"))
    const sealed = seal(fromHex, "acme", secret)
    assert.isTrue(Result.isSuccess(open(fromBase64, "acme", sealed)))
    assert.isTrue(Result.isSuccess(open(fromBase64url, "acme", sealed)))
    for (const bad of [
      "",
      "short",
      randomBytes(16).toString("base64"),
      randomBytes(31).toString("hex"),
      "z".repeat(64)
    ]) {
      const parsed = parseKey(Redacted.make(bad))
      assert.isTrue(Result.isFailure(parsed), bad)
      if (Result.isFailure(parsed)) {
        assert.strictEqual(parsed.failure, keyProblem)
        if (bad !== "") assert.notInclude(parsed.failure, bad)
      }
    }
  })
})
