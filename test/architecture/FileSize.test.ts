/**
 * Source files stay readable: none over 800 lines, and one over 600 only with a one-line reason
 * as its first line (a declarative table may be long; a service may not). Functions over 80
 * lines are refused by the linter (.oxlintrc.json, for src/ and sandbox/src/).
 */
import { assert, describe, it } from "@effect/vitest"
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"

const root = new URL("../../", import.meta.url).pathname

const sources = (folder: string) =>
  readdirSync(join(root, folder), { recursive: true, encoding: "utf8" })
    .filter((path) => path.endsWith(".ts"))
    .map((path) => {
      const lines = readFileSync(join(root, folder, path), "utf8").split("\n")
      return { path: join(folder, path), lines: lines.length, first: lines[0] ?? "" }
    })

describe("source file size", () => {
  it("no file over 800 lines; over 600 only with a reason on its first line", () => {
    const files = [...sources("src"), ...sources("sandbox/src")]
    assert.isAbove(files.length, 100)
    assert.deepStrictEqual(
      files.filter((file) => file.lines > 800).map((file) => file.path),
      []
    )
    assert.deepStrictEqual(
      files.filter((file) => file.lines > 600 && !/^\/\/ \S/.test(file.first)).map((file) => file.path),
      []
    )
  })
})
