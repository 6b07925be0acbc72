#!/usr/bin/env node
// The installed `crm-sync` command. Sources are TypeScript run directly by Node 24's type
// stripping. Under `npm run`/`npx` the pinned Node 24 (devDependency `node`) is first on PATH;
// anywhere else an older `node` may answer, so this re-executes under the pinned one.
import { spawn } from "node:child_process"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const here = dirname(fileURLToPath(import.meta.url))
const main = join(here, "..", "src", "main.ts")
const major = Number(process.versions.node.split(".")[0])

if (major >= 24) {
  await import(main)
} else {
  const require = createRequire(import.meta.url)
  let node
  try {
    node = join(dirname(require.resolve("node/package.json")), "bin", "node")
  } catch {
    console.error("crm-sync needs Node.js 24 or newer; run `npm install` to fetch the pinned one.")
    process.exit(1)
  }
  const child = spawn(node, [main, ...process.argv.slice(2)], { stdio: "inherit" })
  for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => child.kill(signal))
  child.on("exit", (code, signal) => process.exit(code ?? (signal ? 128 : 1)))
}
