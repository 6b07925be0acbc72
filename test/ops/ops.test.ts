/**
 * The operations files speak of metrics crm-sync really exports: every `crm_sync_*` name in the
 * alert rules and the dashboard is declared in the sources, the daemon's image and manifests run
 * commands the CLI has, and every way of starting crm-sync gives Node the same V8 flags.
 */
import { assert, describe, it } from "@effect/vitest"
import { readdirSync, readFileSync, statSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("../../", import.meta.url))
const read = (path: string) => readFileSync(join(root, path), "utf8")

const sources = (dir: string): Array<string> =>
  readdirSync(join(root, dir)).flatMap((name) => {
    const path = join(dir, name)
    return statSync(join(root, path)).isDirectory() ? sources(path) : path.endsWith(".ts") ? [path] : []
  })

const declared = new Set(
  sources("src").flatMap((file) =>
    [...read(file).matchAll(/Metric\.(?:counter|gauge|histogram)\("(crm_sync_[a-z_]+)"/g)].map((match) => match[1]!)
  )
)

const referenced = (text: string) =>
  new Set([...text.matchAll(/crm_sync_[a-z_]+/g)].map((match) => match[0].replace(/_(bucket|sum|count)$/, "")))

describe("ops", () => {
  it("alert rules and the dashboard use only metrics crm-sync exports", () => {
    assert.isAbove(declared.size, 10)
    for (const file of ["ops/prometheus/alerts.yaml", "ops/grafana/crm-sync.json"]) {
      const names = referenced(read(file))
      assert.isAbove(names.size, 3, file)
      for (const name of names) assert.isTrue(declared.has(name), `${file}: ${name} is not a metric crm-sync exports`)
    }
  })

  it("the dashboard is valid JSON with a panel per query", () => {
    const dashboard = JSON.parse(read("ops/grafana/crm-sync.json"))
    assert.isAbove(dashboard.panels.length, 4)
    for (const panel of dashboard.panels) assert.isAbove(panel.targets.length, 0, panel.title)
  })

  it("the image and the manifests run commands the CLI has, and probe the daemon's health routes", () => {
    const main = read("src/main.ts")
    assert.match(read("ops/Dockerfile"), /ENTRYPOINT \["node", "--max-semi-space-size=32", "src\/main.ts"\]/)
    const manifests = read("ops/kubernetes/crm-sync.yaml")
    for (const [, command] of manifests.matchAll(/args: \["([a-z]+)"\]/g)) {
      assert.match(main, new RegExp(`Command\\.make\\(\\s*"${command}"`), `crm-sync ${command} exists`)
    }
    assert.include(manifests, "path: /healthz")
    assert.include(manifests, "path: /readyz")
  })

  it("every launcher starts Node with crm-sync's V8 flags", () => {
    const flag = "--max-semi-space-size=32"
    const scripts = JSON.parse(read("package.json")).scripts as Record<string, string>
    assert.include(scripts.start, `node ${flag} src/main.ts`)
    assert.include(scripts["crm-sync"], `node ${flag} src/main.ts`)
    assert.include(read("bin/crm-sync.js"), `["${flag}"]`)
    assert.include(read("ops/Dockerfile"), `"${flag}"`)
    assert.include(
      read("test/bench/crawl.ts"),
      `execArgv: ["${flag}", ...(process.env.BENCH_MEASURE_ARGS`,
      "the benchmark measures the process as launched"
    )
  })
})
