/**
 * Encryption of stored OAuth tokens (`crm_sync.credentials`): AES-256-GCM under the key of
 * `encryption_key` / `CRM_SYNC_ENCRYPTION_KEY`, with the connection's name as associated data, so a
 * token copied onto another connection's row fails to open instead of being sent for it.
 *
 * Sealed layout: version byte `0x01` | 12-byte random nonce | 16-byte tag | ciphertext. The key is
 * 32 bytes written as 64 hex digits or as base64 (`openssl rand -base64 32`); anything else is
 * refused with a message that says so, never with the value.
 */
import * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto"

const VERSION = 0x01
const NONCE_BYTES = 12
const TAG_BYTES = 16
const KEY_BYTES = 32

/** A decoded key; the bytes stay inside this module's functions. */
export interface TokenKey {
  readonly _tag: "TokenKey"
  readonly bytes: Redacted.Redacted<Uint8Array>
}

export const keyProblem =
  "the encryption key must be 32 bytes, written as 64 hex digits or as base64 (e.g. `openssl rand -base64 32`)"

/** Reads `CRM_SYNC_ENCRYPTION_KEY`'s value: 64 hex digits, or base64 / base64url of 32 bytes. */
export const parseKey = (value: Redacted.Redacted<string>): Result.Result<TokenKey, string> => {
  const text = Redacted.value(value).trim()
  const bytes = /^[0-9a-fA-F]{64}$/.test(text)
    ? Buffer.from(text, "hex")
    : /^[A-Za-z0-9+/_-]{42,44}={0,2}$/.test(text)
      ? Buffer.from(text, text.includes("-") || text.includes("_") ? "base64url" : "base64")
      : undefined
  return bytes !== undefined && bytes.length === KEY_BYTES
    ? Result.succeed({ _tag: "TokenKey", bytes: Redacted.make(new Uint8Array(bytes)) })
    : Result.fail(keyProblem)
}

const associatedData = (connection: string) => Buffer.from(`crm-sync/credentials/v1/${connection}`, "utf8")

/** Encrypts `plaintext` for `connection`. */
export const seal = (key: TokenKey, connection: string, plaintext: Redacted.Redacted<string>): Uint8Array => {
  const nonce = randomBytes(NONCE_BYTES)
  const cipher = createCipheriv("aes-256-gcm", Redacted.value(key.bytes), nonce, { authTagLength: TAG_BYTES })
  cipher.setAAD(associatedData(connection))
  const body = Buffer.concat([cipher.update(Redacted.value(plaintext), "utf8"), cipher.final()])
  return new Uint8Array(Buffer.concat([Buffer.of(VERSION), nonce, cipher.getAuthTag(), body]))
}

/**
 * Decrypts a sealed token stored for `connection`. Fails (with a reason, never key material) for
 * another key, another connection's row, or tampered bytes: GCM's tag covers all three.
 */
export const open = (
  key: TokenKey,
  connection: string,
  sealed: Uint8Array
): Result.Result<Redacted.Redacted<string>, string> => {
  if (sealed.length < 1 + NONCE_BYTES + TAG_BYTES || sealed[0] !== VERSION) {
    return Result.fail("the stored token is not in a known format")
  }
  const bytes = Buffer.from(sealed)
  const nonce = bytes.subarray(1, 1 + NONCE_BYTES)
  const tag = bytes.subarray(1 + NONCE_BYTES, 1 + NONCE_BYTES + TAG_BYTES)
  const body = bytes.subarray(1 + NONCE_BYTES + TAG_BYTES)
  return Result.try({
    try: () => {
      const decipher = createDecipheriv("aes-256-gcm", Redacted.value(key.bytes), nonce, { authTagLength: TAG_BYTES })
      decipher.setAAD(associatedData(connection))
      decipher.setAuthTag(tag)
      return Redacted.make(Buffer.concat([decipher.update(body), decipher.final()]).toString("utf8"))
    },
    catch: () =>
      "the stored token cannot be decrypted: a different encryption key, another connection's row, or damaged data"
  })
}
