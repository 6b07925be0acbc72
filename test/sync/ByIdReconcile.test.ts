/**
 * Which known tasks, meetings and notes a reconciliation re-reads first: those never checked, then
 * the least recently checked, then the least recently written; and under which path a note is read.
 */
import { assert, describe, it } from "@effect/vitest"
import { leastRecentlyChecked, noteParentOf } from "../../src/sync/ByIdReconcile.ts"
import type { KnownRecord } from "../../src/warehouse/Warehouse.ts"

const known = (resource: KnownRecord["resource"], id: string, synced_ms: number): KnownRecord => ({
  resource,
  id,
  notable_type: null,
  notable_id: null,
  household_id: null,
  synced_ms,
  live_transcript: false
})

describe("by-id reconciliation", () => {
  it("reads the never checked first, then the least recently checked, then the least recently written", () => {
    const rows = [
      known("tasks", "t1", 100),
      known("meetings", "m1", 300),
      known("notes", "n1", 200),
      known("tasks", "t2", 50),
      known("meetings", "m2", 50)
    ]
    const checkedAt = new Map([
      ["tasks/t1", 2_000],
      ["meetings/m1", 1_000]
    ])
    assert.deepStrictEqual(
      leastRecentlyChecked(rows, checkedAt).map((row) => `${row.resource}/${row.id}`),
      ["meetings/m2", "tasks/t2", "notes/n1", "meetings/m1", "tasks/t1"]
    )
  })

  it("reads a note under its notable, else under its household", () => {
    assert.deepStrictEqual(noteParentOf({ notable_type: "Contact", notable_id: "c1", household_id: "h1" }), {
      parent: "contact",
      id: "c1"
    })
    assert.deepStrictEqual(noteParentOf({ notable_type: "Project", notable_id: "p1", household_id: "h1" }), {
      parent: "household",
      id: "h1"
    })
    assert.isUndefined(noteParentOf({ notable_type: null, notable_id: null, household_id: null }))
  })
})
