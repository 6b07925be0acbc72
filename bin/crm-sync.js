#!/usr/bin/env node
// The installed `crm-sync` command. Sources are TypeScript run directly by Node 24's type
// stripping. Under `npm run`/`npx` the pinned Node 24 (devDependency `node`) is first on PATH;
// anywhere else an older `node` may answer, so this re-executes under the pinned one. It also
// re-executes when Node was started without crm-sync's V8 flags (docs/decisions.md: "Memory"),
// which only a new process can take.
import { spawn } from "node:child_process"
import { constants } from "node:os"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const here = dirname(fileURLToPath(import.meta.url))
const main = join(here, "..", "src", "main.ts")
const major = Number(process.versions.node.split(".")[0])
const V8_FLAGS = ["--max-semi-space-size=32"]

const pinnedNode = () => {
  if (major >= 24) return process.execPath
  const require = createRequire(import.meta.url)
  try {
    return join(dirname(require.resolve("node/package.json")), "bin", "node")
  } catch {
    console.error("crm-sync needs Node.js 24 or newer; run `npm install` to fetch the pinned one.")
    process.exit(1)
  }
}

if (major >= 24 && V8_FLAGS.every((flag) => process.execArgv.includes(flag))) {
  await import(main)
} else {
  const child = spawn(pinnedNode(), [...V8_FLAGS, main, ...process.argv.slice(2)], { stdio: "inherit" })
  for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => child.kill(signal))
  // A child ended by a signal exits as shells report it: 128 + the signal's number (SIGKILL 137).
  child.on("exit", (code, signal) => process.exit(code ?? (signal ? 128 + (constants.signals[signal] ?? 0) : 1)))
}
