/**
 * How several deliveries of one client in a batch fold into one write (ClientWrites.foldClients),
 * without a database: the creation first, then in signed order; a named field takes the value of
 * the latest update naming it, a field no update names the first value seen.
 */
import { assert, describe, it } from "@effect/vitest"
import { type DecodedClient, foldClients } from "../../src/warehouse/ClientWrites.ts"

const T1 = "2026-03-02T09:01:00.000Z"
const T2 = "2026-03-02T09:02:00.000Z"

const update = (raw: Record<string, unknown>, signedAt: string, changedFields: ReadonlyArray<string>) =>
  ({ id: String(raw.id), raw, signedAt, changedFields }) satisfies DecodedClient
const creation = (raw: Record<string, unknown>) =>
  ({ id: String(raw.id), raw, signedAt: null, changedFields: null }) satisfies DecodedClient

describe("foldClients", () => {
  it("a creation alone fills and stands for no time", () => {
    assert.deepStrictEqual(foldClients([creation({ id: "c", tier: "gold" })]), [
      { id: "c", updated_at: null, raw: { id: "c", tier: "gold" }, field_signed_at: null }
    ])
  })

  it("folds in signed order whatever the order given, the creation first; ids in order", () => {
    const folded = foldClients([
      update({ id: "b", tier: "silver", name: "New" }, T2, ["name"]),
      creation({ id: "b", tier: "gold", name: "Old", since: "2020" }),
      update({ id: "b", tier: "silver", name: "Old" }, T1, ["tier", "nickname"]),
      creation({ id: "a" })
    ])
    assert.deepStrictEqual(folded, [
      { id: "a", updated_at: null, raw: { id: "a" }, field_signed_at: null },
      {
        id: "b",
        updated_at: T2,
        // The unnamed `since` from the creation; `nickname` is named but absent: nothing to write.
        raw: { id: "b", since: "2020", tier: "silver", name: "New" },
        field_signed_at: { tier: T1, name: T2 }
      }
    ])
  })

  it("of two updates naming a field in the same second, the later given wins; the id is never timed", () => {
    const folded = foldClients([
      update({ id: "c", tier: "gold" }, T1, ["tier", "id"]),
      update({ id: "c", tier: "platinum" }, T1, ["tier"])
    ])
    assert.deepStrictEqual(folded, [
      { id: "c", updated_at: T1, raw: { id: "c", tier: "platinum" }, field_signed_at: { tier: T1 } }
    ])
  })
})
