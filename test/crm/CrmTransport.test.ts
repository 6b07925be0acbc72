/**
 * The transport's pure readings on their own: which bucket a 429 body names, how a non-2xx status
 * becomes a reason (spec §7), which ids may stand as a path segment, and the page a query asks for.
 */
import { assert, describe, it } from "@effect/vitest"
import { Option } from "effect"
import { pageParams } from "../../src/crm/CrmClient.ts"
import { classify, limitFromBody, segment } from "../../src/crm/CrmTransport.ts"

describe("limitFromBody", () => {
  it("reads the bucket from the words the spec uses for it", () => {
    assert.strictEqual(limitFromBody({ error: "rate_limited", limit: "per_token" }), "token")
    assert.strictEqual(limitFromBody({ detail: "Company limit exceeded" }), "company")
    assert.strictEqual(limitFromBody({ message: "too many requests from this IP" }), "ip")
  })

  it("prefers the limit member over others, and reads unknown members last", () => {
    assert.strictEqual(limitFromBody({ note: "per ip", limit: "user_limit" }), "token")
    assert.strictEqual(limitFromBody({ hint: "app limit" }), "company")
  })

  it("says unknown for a body that names no bucket, or is not an object", () => {
    assert.strictEqual(limitFromBody({ error: "slow down" }), "unknown")
    assert.strictEqual(limitFromBody("token"), "unknown")
    assert.strictEqual(limitFromBody(undefined), "unknown")
  })
})

describe("classify", () => {
  const get = { method: "GET" as const }
  it("maps the statuses of spec §7 to their reasons", () => {
    assert.strictEqual(classify(get, 401, {})._tag, "Unauthorized")
    assert.strictEqual(classify(get, 404, { error: "not_found" })._tag, "NotFound")
    assert.strictEqual(classify(get, 422, {})._tag, "Invalid")
    assert.strictEqual(classify(get, 503, {})._tag, "Server")
    assert.strictEqual(classify(get, 302, {})._tag, "Transport")
  })

  it("tells a refused write from a refused read", () => {
    const read = classify(get, 403, {})
    const write = classify({ method: "POST" }, 403, {})
    assert.isTrue(read._tag === "Forbidden" && !read.write)
    assert.isTrue(write._tag === "Forbidden" && write.write)
  })

  it("reads a 409 as the key still in use only for a call that carries one", () => {
    assert.strictEqual(classify({ method: "POST", idempotencyKey: "k" }, 409, {})._tag, "KeyInUse")
    assert.strictEqual(classify({ method: "POST" }, 409, {})._tag, "Invalid")
  })

  it("keeps the body's error code and detail", () => {
    const reason = classify(get, 422, { error: "invalid_phone", detail: "not E.164" })
    assert.deepInclude(reason, { code: "invalid_phone", detail: "not E.164" })
  })
})

describe("segment", () => {
  it("encodes an id, and refuses one URL parsing would resolve away", () => {
    assert.deepStrictEqual(segment("m 1/2"), Option.some("m%201%2F2"))
    assert.isTrue(Option.isNone(segment("")))
    assert.isTrue(Option.isNone(segment(".")))
    assert.isTrue(Option.isNone(segment("..")))
  })
})

describe("pageParams", () => {
  it("asks for page 1 at the maximum per_page by default, and keeps a query within 1..100", () => {
    assert.deepStrictEqual(pageParams(undefined), { page: 1, per_page: 100 })
    assert.deepStrictEqual(pageParams({ page: 0, per_page: 500 }), { page: 1, per_page: 100 })
    assert.deepStrictEqual(pageParams({ page: 3.7, per_page: 0 }), { page: 3, per_page: 1 })
  })
})
