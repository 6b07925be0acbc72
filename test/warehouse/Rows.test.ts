/**
 * How a received record becomes rows, without a database: one record per id (the newest), the
 * references a batch names merged per id, text jsonb cannot store found and replaced, and a parent
 * row that carries typed columns only where the decoded value is not the received one.
 */
import { assert, describe, it } from "@effect/vitest"
import {
  type AnyTable,
  type Decoded,
  hasUnstorableText,
  latestPerId,
  mergeSightings,
  recordRow,
  storable
} from "../../src/warehouse/Rows.ts"

const item = (id: string, updatedAt: string | null, json = id): Decoded => ({
  id,
  updatedAt,
  json,
  sightings: [],
  parts: undefined
})

describe("latestPerId", () => {
  it("keeps the newest snapshot of each id, the later of equals, sorted by id", () => {
    const kept = latestPerId([
      item("b", "2024-01-02T00:00:00Z", "b-new"),
      item("a", "2024-01-01T00:00:00Z", "a-first"),
      item("b", "2024-01-01T00:00:00Z", "b-old"),
      item("a", "2024-01-01T00:00:00Z", "a-second"),
      item("c", "2024-01-01T00:00:00Z", "c-dated"),
      item("c", null, "c-undated")
    ])
    assert.deepStrictEqual(
      kept.map((decoded) => decoded.json),
      ["a-second", "b-new", "c-dated"]
    )
  })
})

describe("mergeSightings", () => {
  it("merges what a batch says of each reference, later fields over earlier, sorted by id", () => {
    const merged = mergeSightings([
      { resource: "users", record: { id: "u2", name: "Ann" } },
      { resource: "households", record: { id: "h1" } },
      { resource: "users", record: { id: "u1" } },
      { resource: "users", record: { id: "u2", email: "ann@example.com" } },
      { resource: "users", record: { id: "u2", name: "Ann B." } }
    ])
    assert.deepStrictEqual(merged.get("users"), [{ id: "u1" }, { id: "u2", name: "Ann B.", email: "ann@example.com" }])
    assert.deepStrictEqual(merged.get("households"), [{ id: "h1" }])
    assert.isFalse(merged.has("teams"))
  })
})

describe("unstorable text", () => {
  it("finds U+0000 and lone surrogates, in keys and values at any depth", () => {
    assert.isFalse(hasUnstorableText({ name: "plain", list: ["é", "😀"] }))
    assert.isTrue(hasUnstorableText({ nested: [{ note: "a\u0000b" }] }))
    assert.isTrue(hasUnstorableText({ ["key\uD800"]: 1 }))
  })

  it("replaces them with U+FFFD, and keeps the fact of a non-JSON value", () => {
    assert.deepStrictEqual(storable({ ["k\u0000"]: ["x\uDC00", 1, undefined] }), { ["k\uFFFD"]: ["x\uFFFD", 1, null] })
    assert.isFalse(hasUnstorableText(storable({ a: "\u0000\uD800" })))
  })
})

describe("recordRow", () => {
  // A table whose model turns a null list into [] and computes a column absent from the record.
  const table = {
    row: (record: { readonly tags: ReadonlyArray<string>; readonly name: string }) => ({
      name: record.name,
      tags: record.tags,
      name_length: record.name.length
    })
  } as unknown as AnyTable

  it("sends typed columns only where the decoded value is not the received one", () => {
    const raw = { id: "r1", name: "Acme", tags: null }
    const row = recordRow(table, raw, { name: "Acme", tags: [] }, "r1", "2024-01-01T00:00:00Z")
    assert.deepStrictEqual(row, {
      id: "r1",
      updated_at: "2024-01-01T00:00:00Z",
      raw,
      typed: { tags: [], name_length: 4 }
    })
  })

  it("sends no typed columns when every one is read from `raw` as received", () => {
    const table2 = { row: (record: { readonly name: string }) => ({ name: record.name }) } as unknown as AnyTable
    const raw = { id: "r2", name: "Acme" }
    assert.deepStrictEqual(recordRow(table2, raw, { name: "Acme" }, "r2", null), { id: "r2", updated_at: null, raw })
  })
})
