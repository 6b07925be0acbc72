#!/usr/bin/env node
// The installed `crm-sync` command, and the entry point of every launcher (npm scripts, the image).
// Sources are TypeScript run directly by Node 24's type stripping. Node's compile cache is turned
// on here, before the first TypeScript module loads: a module read from the cache is not stripped,
// and the stripper, once loaded, stays resident (17 MB). Under `npm run`/`npx` the pinned Node 24
// (devDependency `node`) is first on PATH; anywhere else an older `node` may answer, so this
// re-executes under the pinned one. It also re-executes when Node was started without a young-
// generation size (bin/v8-flags.js), which only a new process can take.
import { spawn } from "node:child_process"
import { constants } from "node:os"
import nodeModule from "node:module"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { hasSemiSpaceFlag, v8FlagsFor } from "./v8-flags.js"

const here = dirname(fileURLToPath(import.meta.url))
const major = Number(process.versions.node.split(".")[0])
const args = process.argv.slice(2)

const pinnedNode = () => {
  if (major >= 24) return process.execPath
  const require = nodeModule.createRequire(import.meta.url)
  try {
    return join(dirname(require.resolve("node/package.json")), "bin", "node")
  } catch {
    console.error("crm-sync needs Node.js 24 or newer; run `npm install` to fetch the pinned one.")
    process.exit(1)
  }
}

if (major >= 24 && hasSemiSpaceFlag(process.execArgv)) {
  nodeModule.enableCompileCache()
  await import(join(here, "..", "src", "main.ts"))
} else {
  const child = spawn(pinnedNode(), [...v8FlagsFor(args), fileURLToPath(import.meta.url), ...args], {
    stdio: "inherit"
  })
  for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => child.kill(signal))
  // A child ended by a signal exits as shells report it: 128 + the signal's number (SIGKILL 137).
  child.on("exit", (code, signal) => process.exit(code ?? (signal ? 128 + (constants.signals[signal] ?? 0) : 1)))
}
