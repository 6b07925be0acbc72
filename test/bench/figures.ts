/**
 * Where benchmark figures go: between `<!-- bench:NAME:start -->` and `<!-- bench:NAME:end -->`
 * in every document that has those markers (docs/performance.md, docs/reliability.md, a
 * capability's own doc), formatted the way `npm test`'s format check expects. `--no-docs` on a
 * benchmark's command line only prints.
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs"
import { fileURLToPath } from "node:url"

const root = (path: string) => fileURLToPath(new URL(`../../${path}`, import.meta.url))

const replaceBetween = (text: string, name: string, figures: string): string | undefined => {
  const start = `<!-- bench:${name}:start -->`
  const end = `<!-- bench:${name}:end -->`
  const from = text.indexOf(start)
  const to = text.indexOf(end)
  if (from < 0 || to < from) return undefined
  return `${text.slice(0, from + start.length)}\n${figures}\n${text.slice(to)}`
}

/** Writes `figures` (markdown) between the named markers of README.md and every doc under docs/. */
export const recordFigures = async (name: string, figures: string, docs: ReadonlyArray<string> = []) => {
  if (process.argv.includes("--no-docs")) return
  const prettier = await import("prettier")
  const everyDoc = readdirSync(root("docs"))
    .filter((file) => file.endsWith(".md"))
    .map((file) => `docs/${file}`)
  for (const file of new Set(["README.md", ...docs, ...everyDoc])) {
    const path = root(file)
    if (!existsSync(path)) continue
    const updated = replaceBetween(readFileSync(path, "utf8"), name, figures)
    if (updated === undefined) continue
    const options = await prettier.resolveConfig(path)
    writeFileSync(path, await prettier.format(updated, { ...options, parser: "markdown" }))
    console.log(`figures written to ${file}`)
  }
}
