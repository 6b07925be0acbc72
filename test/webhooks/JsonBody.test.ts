/**
 * A delivery body read as JSON, as the intake and the processor both read it: what it holds, or
 * why it cannot be read (not UTF-8, not JSON, nested too deep).
 */
import { assert, describe, it } from "@effect/vitest"
import { Result } from "effect"
import { parseJsonBody } from "../../src/webhooks/JsonBody.ts"
import { MAX_JSON_DEPTH } from "../../src/webhooks/JsonDepth.ts"

const bytes = (text: string) => new TextEncoder().encode(text)

const problem = (body: Uint8Array) => {
  const parsed = parseJsonBody(body)
  return Result.isFailure(parsed) ? parsed.failure._tag : assert.fail("expected the body to be refused")
}

describe("parseJsonBody", () => {
  it("reads UTF-8 JSON", () => {
    assert.deepStrictEqual(
      parseJsonBody(bytes('{"event_type":"task.updated","title":"Zoë"}')),
      Result.succeed({
        event_type: "task.updated",
        title: "Zoë"
      })
    )
  })

  it("says why a body cannot be read", () => {
    assert.strictEqual(problem(new Uint8Array([0x7b, 0xff, 0x7d])), "NotUtf8")
    assert.strictEqual(problem(bytes('{"event_type":')), "NotJson")
    assert.strictEqual(problem(bytes(`${"[".repeat(MAX_JSON_DEPTH + 1)}${"]".repeat(MAX_JSON_DEPTH + 1)}`)), "TooDeep")
  })
})
