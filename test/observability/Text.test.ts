/**
 * The tables the commands print: names on the left, figures on the right, columns as wide as their
 * widest cell, nothing trailing.
 */
import { assert, describe, it } from "@effect/vitest"
import { textTable } from "../../src/observability/Text.ts"

describe("textTable", () => {
  it("aligns names left and figures right, two spaces apart", () => {
    assert.deepStrictEqual(
      textTable(
        ["name", "status", "pages"],
        [
          ["businesses", "done", "1,200"],
          ["notes", "failed", "7"]
        ],
        2
      ),
      ["name        status  pages", "businesses  done    1,200", "notes       failed      7"]
    )
  })

  it("widens a column to its header and trims the last column's padding", () => {
    assert.deepStrictEqual(textTable(["connection", "note"], [["a", ""]], 2), ["connection  note", "a"])
  })
})
