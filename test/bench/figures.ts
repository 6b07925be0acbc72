/**
 * Where benchmark figures go: between `<!-- bench:NAME:start -->` and `<!-- bench:NAME:end -->`
 * in README.md (and in the capability's own doc, when it has the same markers), formatted the way
 * `npm test`'s format check expects. `--no-docs` on a benchmark's command line only prints.
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs"
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

/** Writes `figures` (markdown) into README.md and `docs` between the named markers. */
export const recordFigures = async (name: string, figures: string, docs: ReadonlyArray<string> = []) => {
  if (process.argv.includes("--no-docs")) return
  const prettier = await import("prettier")
  for (const file of ["README.md", ...docs]) {
    const path = root(file)
    if (!existsSync(path)) continue
    const updated = replaceBetween(readFileSync(path, "utf8"), name, figures)
    if (updated === undefined) continue
    const options = await prettier.resolveConfig(path)
    writeFileSync(path, await prettier.format(updated, { ...options, parser: "markdown" }))
    console.log(`figures written to ${file}`)
  }
}
