/**
 * The CRM emulator is its own package (sandbox/): it imports nothing of the daemon, the daemon
 * reaches it only from the `demo` and `sandbox` commands, and the image is built without it.
 */
import { assert, describe, it } from "@effect/vitest"
import { readdirSync, readFileSync } from "node:fs"
import { join, relative } from "node:path"

const root = new URL("../../", import.meta.url).pathname

const sources = (folder: string): ReadonlyArray<string> =>
  readdirSync(join(root, folder), { recursive: true, encoding: "utf8" })
    .filter((path) => path.endsWith(".ts"))
    .map((path) => join(folder, path))

const importsOf = (path: string) =>
  [...readFileSync(join(root, path), "utf8").matchAll(/(?:from|import\()\s*"([^"]+)"/g)].map((match) => match[1]!)

describe("the sandbox package", () => {
  it("imports nothing of the daemon", () => {
    const outside = sources("sandbox").flatMap((path) =>
      importsOf(path)
        .filter((target) => target.startsWith("."))
        .map((target) => relative(root, join(root, path, "..", target)))
        .filter((target) => !target.startsWith("sandbox/"))
        .map((target) => `${path} -> ${target}`)
    )
    assert.deepStrictEqual(outside, [])
  })

  it("is reached from the daemon's tree only by the demo and sandbox commands", () => {
    const users = sources("src").filter((path) =>
      importsOf(path).some((target) => target.startsWith("@crm-sync/sandbox"))
    )
    assert.deepStrictEqual(users.toSorted(), ["src/cli/CommandLine.ts", "src/cli/Demo.ts", "src/cli/DemoCommand.ts"])
    assert.include(
      readFileSync(join(root, "src/cli/CommandLine.ts"), "utf8"),
      'await import("@crm-sync/sandbox/cli").catch('
    )
  })

  it("stays out of the image", () => {
    const copies = readFileSync(join(root, "ops/Dockerfile"), "utf8")
      .split("\n")
      .filter((line) => line.startsWith("COPY "))
      .map((line) => line.split(/\s+/)[1])
    assert.deepStrictEqual(copies, ["package.json", "bin", "src", "migrations", "config"])
  })
})
