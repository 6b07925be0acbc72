/**
 * The tables the commands print: names on the left, figures on the right, columns as wide as their
 * widest cell, nothing trailing. A database error told in one line carries what PostgreSQL or the
 * socket said, not only effect/sql's "Failed to connect".
 */
import { assert, describe, it } from "@effect/vitest"
import { AuthenticationError, ConnectionError, SqlError } from "effect/sql/SqlError"
import { oneLine, textTable } from "../../src/observability/Text.ts"

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

describe("oneLine of a database error", () => {
  it("appends PostgreSQL's or the socket's reason to effect/sql's message", () => {
    const refused = Object.assign(new Error('password authentication failed for user "crm_sync_runtime"'), {
      code: "28P01"
    })
    const auth = new SqlError({
      reason: new AuthenticationError({ cause: refused, message: "PgConnection: Failed to connect" })
    })
    assert.strictEqual(
      oneLine(auth),
      'PgConnection: Failed to connect: password authentication failed for user "crm_sync_runtime"'
    )
    // A connection tried on every address of a name: the attempts' messages.
    const attempts = Object.assign(
      new AggregateError([
        new Error("connect ECONNREFUSED ::1:5433"),
        new Error("connect ECONNREFUSED 127.0.0.1:5433")
      ]),
      { code: "ECONNREFUSED" }
    )
    const closed = new SqlError({
      reason: new ConnectionError({ cause: attempts, message: "PgConnection: Failed to connect" })
    })
    assert.strictEqual(
      oneLine(closed),
      "PgConnection: Failed to connect: connect ECONNREFUSED ::1:5433, connect ECONNREFUSED 127.0.0.1:5433"
    )
  })
})
