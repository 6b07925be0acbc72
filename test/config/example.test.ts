import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { readFileSync } from "node:fs"
import { decodeDocument } from "../../src/config/AppConfig.ts"

describe("config/example.json", () => {
  it.effect("decodes, and documents every key that the config accepts", () =>
    Effect.gen(function* () {
      const example = JSON.parse(readFileSync(new URL("../../config/example.json", import.meta.url), "utf8"))
      const decoded = yield* decodeDocument(example)
      assert.strictEqual(decoded.connections.length, 2)
      const reference = readFileSync(new URL("../../config/README.md", import.meta.url), "utf8")
      const keys = (value: unknown, prefix: string): Array<string> =>
        typeof value === "object" && value !== null && !Array.isArray(value)
          ? Object.entries(value).flatMap(([key, inner]) =>
              Array.isArray(inner) && inner.some((item) => typeof item === "object")
                ? [`${prefix}${key}[]`, ...inner.flatMap((item) => keys(item, `${prefix}${key}[].`))]
                : typeof inner === "object" && inner !== null
                  ? keys(inner, `${prefix}${key}.`)
                  : [`${prefix}${key}`]
            )
          : []
      for (const key of new Set(keys(example, ""))) {
        const documented = key.startsWith("connections[].oauth.")
          ? "connections[].oauth"
          : key.startsWith("connections[].limits.")
            ? "connections[].limits"
            : key
        assert.include(reference, `\`${documented}\``, `config/README.md documents ${documented}`)
      }
    })
  )
})
