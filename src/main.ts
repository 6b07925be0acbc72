/**
 * crm-sync's program: loads the command line (src/cli/CommandLine.ts). Started through
 * bin/crm-sync.js, which gives Node its flags and turns the compile cache on first; started
 * directly (`node src/main.ts`, as the tests do), it turns the cache on for the modules after it.
 */
import { enableCompileCache } from "node:module"

enableCompileCache()
await import("./cli/CommandLine.ts")
