/**
 * The chaos verdict's one exception for client fields: two `client.updated` naming one field,
 * stored by crm-sync in the opposite order because every attempt of the older one was refused
 * until after the newer one was stored (verdict.ts, docs/reliability.md). Any other stale field
 * stays a mismatch.
 */
import { assert, describe, it } from "@effect/vitest"
import { invertedClientChanges } from "./verdict.ts"

/** One attempt of a `client.updated` about cli_1 setting `tier`, sent at `sent` s, answered `status`. */
const attempt = (message: string, tier: string, sent: number, status: number | null) => ({
  message_id: message,
  event_type: "client.updated",
  duplicate: false,
  status,
  at: new Date(Date.UTC(2026, 11, 2, 12, 0, sent)).toISOString(),
  headers: { "hook-id": message, "hook-timestamp": String(Date.UTC(2026, 11, 2, 12, 0, sent) / 1000) },
  payload: JSON.stringify({ client: { id: "cli_1", tier }, changed_fields: ["tier"] })
})

describe("invertedClientChanges", () => {
  it("names the older change stored after the newer one, its first attempts refused", () => {
    const inverted = invertedClientChanges([
      attempt("msg_c", "C", 0, 503),
      attempt("msg_b", "B", 2, 200),
      attempt("msg_c", "C", 6, 200)
    ])
    assert.include(inverted("cli_1", "tier", "C") ?? "", "msg_c, sent first")
    assert.include(inverted("cli_1", "tier", "C") ?? "", "msg_b, sent later")
  })

  it("leaves a stale field a mismatch when the changes were stored in the order they were sent", () => {
    const inOrder = invertedClientChanges([attempt("msg_c", "C", 0, 200), attempt("msg_b", "B", 2, 200)])
    assert.isUndefined(inOrder("cli_1", "tier", "C"))
    // A value no change delivered, another field, another client: not this case either.
    const inverted = invertedClientChanges([
      attempt("msg_c", "C", 0, 503),
      attempt("msg_b", "B", 2, 200),
      attempt("msg_c", "C", 6, 200)
    ])
    assert.isUndefined(inverted("cli_1", "tier", "A"))
    assert.isUndefined(inverted("cli_1", "name", "C"))
    assert.isUndefined(inverted("cli_2", "tier", "C"))
  })
})
