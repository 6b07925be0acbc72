import { Effect, Exit, Redacted, Scope } from "effect"
import { spawn } from "node:child_process"
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { acquireEmbeddedDatabase, freePort } from "../../src/warehouse/EmbeddedDatabase.ts"
const main = new URL("../../src/main.ts", import.meta.url).pathname
const flags = (process.env.PROBE_FLAGS ?? "").split(" ").filter((f) => f !== "")
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
const rss = (pid: number) => {
  const s = readFileSync(`/proc/${pid}/status`, "utf8")
  return Math.round(Number(/VmRSS:\s+(\d+)/.exec(s)![1]) / 1024)
}
const dataDir = mkdtempSync(join(tmpdir(), "probe-"))
const scope = await Effect.runPromise(Scope.make())
const db = await Effect.runPromise(Scope.provide(acquireEmbeddedDatabase(dataDir), scope))
const url = Redacted.value(db.url)
const sp = await Effect.runPromise(freePort)
const sandbox = spawn(process.execPath, [main, "sandbox", "--port", String(sp), "--records", "1000"], {
  stdio: ["ignore", "pipe", "inherit"]
})
const token: string = await new Promise((res) => {
  let t = ""
  sandbox.stdout!.on("data", (c) => {
    t += c
    const m = /CRM_TOKEN=(\S+)/.exec(t)
    if (m) res(m[1]!)
  })
})
const config = join(dataDir, "c.json")
writeFileSync(
  config,
  JSON.stringify({
    database_url: url,
    webhook_port: await Effect.runPromise(freePort),
    admin_port: await Effect.runPromise(freePort),
    connections: [{ name: "default", base_url: `http://127.0.0.1:${sp}`, credential: "personal", token }]
  })
)
const daemon = spawn(process.execPath, [...flags, main, "run"], {
  env: { ...process.env, CRM_SYNC_CONFIG: config, CRM_SYNC_LOG_LEVEL: "warn" },
  stdio: ["ignore", "inherit", "inherit"]
})
const samples: Array<number> = []
for (let i = 0; i < 12; i++) {
  await sleep(5000)
  samples.push(rss(daemon.pid!))
}
console.log(`flags=[${flags.join(" ")}] rss every 5 s: ${samples.join(" ")}`)
daemon.kill("SIGTERM")
sandbox.kill("SIGTERM")
await sleep(1500)
await Effect.runPromise(Scope.close(scope, Exit.void))
process.exit(0)
