/**
 * The documentation stays a reference a newcomer can read: every local link of the README, the
 * CHANGELOG, docs/, sandbox/README.md and config/README.md points at a file that exists (and, with
 * `#anchor`, at a heading of it), and docs/*.md with the two READMEs stay within 150 KB in all,
 * no page over 25 KB.
 */
import { assert, describe, it } from "@effect/vitest"
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs"
import { dirname, join, relative } from "node:path"

const root = new URL("../../", import.meta.url).pathname

const docs = readdirSync(join(root, "docs"))
  .filter((file) => file.endsWith(".md"))
  .map((file) => join("docs", file))
const budgeted = [...docs, "sandbox/README.md", "config/README.md"]
const linking = [...budgeted, "README.md", "CHANGELOG.md"]

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens. */
const slug = (heading: string) =>
  heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-")

/** The anchors of a markdown file's headings (a repeated heading gets -1, -2, ...). */
const anchors = (text: string): Set<string> => {
  const seen = new Map<string, number>()
  const result = new Set<string>()
  for (const match of text.replace(/```[\s\S]*?```/g, "").matchAll(/^#{1,6}\s+(.+)$/gm)) {
    const base = slug(match[1]!)
    const count = seen.get(base) ?? 0
    seen.set(base, count + 1)
    result.add(count === 0 ? base : `${base}-${count}`)
  }
  return result
}

/** Every `](target)` of a file outside code blocks that is not a web address. */
const localLinks = (text: string): Array<string> =>
  [...text.replace(/```[\s\S]*?```/g, "").matchAll(/\]\(([^)\s]+)\)/g)]
    .map((match) => match[1]!)
    .filter((target) => !/^[a-z]+:/i.test(target))

const broken = (file: string): Array<string> => {
  const text = readFileSync(join(root, file), "utf8")
  return localLinks(text).flatMap((target) => {
    const [path, anchor] = target.split("#") as [string, string | undefined]
    const resolved = path === "" ? join(root, file) : join(root, dirname(file), path)
    if (!existsSync(resolved)) return [`${file}: ${target} (no such file)`]
    if (anchor === undefined || !resolved.endsWith(".md")) return []
    return anchors(readFileSync(resolved, "utf8")).has(anchor)
      ? []
      : [`${file}: ${target} (no heading #${anchor} in ${relative(root, resolved)})`]
  })
}

describe("documentation", () => {
  it("every local link points at a file, and an anchor at one of its headings", () => {
    assert.isAbove(linking.length, 8)
    assert.deepStrictEqual(linking.flatMap(broken), [])
  })

  it("docs/*.md, sandbox/README.md and config/README.md: at most 150 KB in all, 25 KB a page", () => {
    const sizes = budgeted.map((file) => ({ file, bytes: statSync(join(root, file)).size }))
    assert.deepStrictEqual(
      sizes.filter((page) => page.bytes > 25_000).map((page) => `${page.file}: ${page.bytes} bytes`),
      []
    )
    const total = sizes.reduce((sum, page) => sum + page.bytes, 0)
    assert.isAtMost(total, 150_000, `docs total ${total} bytes`)
  })
})
