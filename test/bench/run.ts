/**
 * `npm run bench [-- NAME ...] [-- --quick] [-- --no-docs]`: runs the benchmarks one after another,
 * each in a process of its own (they measure memory and CPU, and must not share a heap), and
 * passes the flags on, each with its value when one follows (`--accounts 20000`). With no name, every one: budget, fairness, crawl, intake, freshness, hostile, startup, partner, statusview, history. Each prints its
 * figures and writes them into the docs between their markers (see figures.ts).
 */
import { spawnSync } from "node:child_process"
import { fileURLToPath } from "node:url"
import { v8FlagsFor } from "../../bin/v8-flags.js"

const benches = [
  "budget",
  "fairness",
  "crawl",
  "intake",
  "freshness",
  "hostile",
  "startup",
  "partner",
  "statusview",
  "history"
] as const

const args = process.argv.slice(2)
const isBench = (arg: string) => (benches as ReadonlyArray<string>).includes(arg)
/** A flag, and the word after it when that is neither a flag nor a benchmark (its value). */
const flags: Array<string> = []
const named: Array<string> = []
for (let i = 0; i < args.length; i++) {
  const arg = args[i]!
  if (!arg.startsWith("--")) named.push(arg)
  else {
    flags.push(arg)
    const next = args[i + 1]
    if (next !== undefined && !next.startsWith("--") && !isBench(next)) flags.push(args[++i]!)
  }
}
const unknown = named.filter((name) => !isBench(name))
if (unknown.length > 0) {
  console.error(`unknown benchmark ${unknown.join(", ")}; known: ${benches.join(", ")}`)
  process.exit(2)
}

let failed = 0
for (const bench of named.length > 0 ? named : benches) {
  console.log(`\n=== ${bench} ===`)
  const file = fileURLToPath(new URL(`./${bench}.ts`, import.meta.url))
  // Most benchmarks measure the daemon's code in their own process: Node gets the daemon's V8
  // flags; the crawl benchmark measures a backfill (its measuring child gets the backfill's).
  const result = spawnSync(
    process.execPath,
    [...v8FlagsFor([bench === "crawl" ? "backfill" : "run"]), file, ...flags],
    { stdio: "inherit" }
  )
  if (result.status !== 0) {
    console.error(`${bench}: exited with ${result.status ?? result.signal}`)
    failed++
  }
}
process.exit(failed === 0 ? 0 : 1)
