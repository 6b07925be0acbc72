/**
 * docs/warehouse.md's diagram is the one generated from the table declarations (`npm run
 * docs:erd`), so it cannot fall behind them (nor, through Declarations.integration.test.ts, behind
 * the migrations). It draws every table; what each holds is left to the tables' comments.
 */
import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import { readFileSync } from "node:fs"
import { renderErd, warehouseDoc, withErd } from "../../scripts/erd.ts"
import { Declarations } from "../../src/warehouse/Tables.ts"

it.effect("docs/warehouse.md holds the diagram generated from the declarations (npm run docs:erd)", () =>
  Effect.gen(function* () {
    const document = readFileSync(warehouseDoc, "utf8")
    const expected = yield* withErd(document, renderErd(Declarations))
    assert.strictEqual(document, expected, "docs/warehouse.md is out of date: run npm run docs:erd")
    for (const table of Declarations) {
      assert.include(document, `  ${table.table} {`)
      for (const reference of table.references) {
        assert.include(document, `${reference.table} ||--o{ ${table.table}`)
      }
    }
  })
)
