/**
 * The operations files speak of metrics crm-sync really exports: every `crm_sync_*` name in the
 * alert rules and the dashboard is declared in the sources, the daemon's image and manifests run
 * commands the CLI has, and every way of starting crm-sync gives Node the V8 flags its command needs. The shipped
 * deployment (ops/kubernetes/config.json, the manifests, compose) is a valid config that receives
 * every event type, with every secret it names provided by the Secret and by compose's environment,
 * and probes and scrapes on the admin port, never on the internet-facing webhook port.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Redacted } from "effect"
import { decodeDocument, envRefNames, resolveEnvRefs } from "../../src/config/AppConfig.ts"
import { EnvironmentVariables } from "../../src/config/Variables.ts"
import { KnownEventTypes, UntypedEventTypes } from "../../src/crm/Events.ts"
import { parse, parseAllDocuments } from "yaml"
import { composeProblems, type Known, kubernetesProblems, leastPrivilegeProblems } from "./manifests.ts"
import { v8FlagsFor } from "../../bin/v8-flags.js"
import { spawnSync } from "node:child_process"
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
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

/** A stand-in for a value of the Secret. */
const secret = (name: string) => (name.startsWith("CRM_WEBHOOK_SECRET") ? "whsec_c2VjcmV0LXZhbHVlLWZvci10ZXN0" : "x")

describe("ops", () => {
  it("alert rules and the dashboard use only metrics crm-sync exports", () => {
    assert.isAbove(declared.size, 10)
    for (const file of ["ops/prometheus/alerts.yaml", "ops/grafana/crm-sync.json"]) {
      const names = referenced(read(file))
      assert.isAbove(names.size, 3, file)
      for (const name of names) assert.isTrue(declared.has(name), `${file}: ${name} is not a metric crm-sync exports`)
    }
  })

  it("the image runs as a numeric non-root user, built from a context without secrets or the local install", () => {
    const user = /^USER (\d+)(?::(\d+))?$/m.exec(read("ops/Dockerfile"))
    assert.isNotNull(user, "USER by number: runAsNonRoot can only check a numeric user")
    assert.notStrictEqual(user![1], "0")
    const ignored = read(".dockerignore")
      .split("\n")
      .map((line) => line.trim())
    for (const path of ["node_modules", ".crm-sync", ".env"]) assert.include(ignored, path, `.dockerignore: ${path}`)
    // The manifests run the image's user.
    for (const [, uid] of read("ops/kubernetes/crm-sync.yaml").matchAll(/runAsUser: (\d+)/g)) {
      assert.strictEqual(uid, user![1])
    }
  })

  it("the Prometheus Operator's objects scrape the admin port and carry alerts.yaml's rules, word for word", () => {
    const [monitor, rule] = parseAllDocuments(read("ops/kubernetes/prometheus-operator.yaml")).map(
      (document) => document.toJS() as Record<string, any>
    )
    // Neither object runs a container: only their shapes are checked.
    const noContainers: Known = { commands: new Set(), env: new Set() }
    assert.deepStrictEqual(kubernetesProblems(read("ops/kubernetes/prometheus-operator.yaml"), noContainers), [])
    assert.strictEqual(monitor!.kind, "ServiceMonitor")
    assert.strictEqual(monitor!.spec.endpoints[0].port, "admin")
    assert.strictEqual(monitor!.spec.endpoints[0].path, "/metrics")
    // It selects the admin Service by its label.
    const admin = parseAllDocuments(read("ops/kubernetes/crm-sync.yaml"))
      .map((document) => document.toJS() as Record<string, any>)
      .find((object) => object.kind === "Service" && object.metadata.name === "crm-sync-admin")
    for (const [label, value] of Object.entries(monitor!.spec.selector.matchLabels))
      assert.strictEqual(admin!.metadata.labels?.[label], value, `crm-sync-admin has label ${label}`)
    assert.strictEqual(rule!.kind, "PrometheusRule")
    assert.deepStrictEqual(rule!.spec.groups, parse(read("ops/prometheus/alerts.yaml")).groups)
  })

  it("the dashboard is valid JSON with a panel per query", () => {
    const dashboard = JSON.parse(read("ops/grafana/crm-sync.json"))
    assert.isAbove(dashboard.panels.length, 4)
    for (const panel of dashboard.panels) assert.isAbove(panel.targets.length, 0, panel.title)
  })

  it("the image fills Node's compile cache as the user it runs as, and a start then compiles nothing", () => {
    const dockerfile = read("ops/Dockerfile")
    assert.match(dockerfile, /^ENV NODE_COMPILE_CACHE=\/app\/\.compile-cache$/m)
    const fill = /^RUN (node .+bin\/crm-sync\.js --help.+)$/m.exec(dockerfile)
    assert.isNotNull(fill, "a RUN step that starts crm-sync to fill the cache")
    // Node keeps a cache per user: one filled by another user than the image's is never read.
    const users = [...dockerfile.matchAll(/^USER (.+)$/gm)]
    assert.lengthOf(users, 1)
    assert.isBelow(users[0]!.index, fill!.index, "the cache is filled after USER")
    const cache = mkdtempSync(join(tmpdir(), "crm-sync-compile-cache-"))
    const node = (command: string) =>
      spawnSync("sh", ["-c", command], {
        cwd: root,
        // `node` is the Node 24 running this test, as on the image.
        env: { PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ""}`, NODE_COMPILE_CACHE: cache },
        encoding: "utf8",
        timeout: 60_000
      })
    const entries = () => readdirSync(cache, { recursive: true }).length
    try {
      const filled = node(fill![1]!)
      assert.strictEqual(filled.status, 0, filled.stderr)
      const compiled = entries()
      assert.isAbove(compiled, 100, "compiled modules written")
      // The image's entry point, as it starts: every module it loads is read from the cache
      // (type stripping included; nothing new is written).
      const started = node(`node --max-semi-space-size=8 bin/crm-sync.js --help`)
      assert.strictEqual(started.status, 0, started.stderr)
      assert.strictEqual(entries(), compiled)
    } finally {
      rmSync(cache, { recursive: true, force: true })
    }
  })

  it("the image and the manifests run commands the CLI has, and probe the daemon's health routes", () => {
    const main = read("src/cli/CommandLine.ts")
    assert.match(read("ops/Dockerfile"), /ENTRYPOINT \["node", "--max-semi-space-size=8", "bin\/crm-sync.js"\]/)
    const manifests = read("ops/kubernetes/crm-sync.yaml")
    for (const [, command] of manifests.matchAll(/args: \["([a-z]+)"\]/g)) {
      assert.match(main, new RegExp(`Command\\.make\\(\\s*"${command}"`), `crm-sync ${command} exists`)
    }
    assert.match(manifests, /httpGet: \{ path: \/healthz, port: admin \}/)
    assert.match(manifests, /httpGet: \{ path: \/readyz, port: admin \}/)
    assert.match(manifests, /\{ name: admin, containerPort: 9090 \}/)
    assert.include(manifests, 'prometheus.io/port: "9090"')
    assert.include(read("ops/Dockerfile"), "process.env.CRM_SYNC_ADMIN_PORT||process.env.ADMIN_PORT||9090")
    // Only the webhook port is published to every interface by compose.
    assert.include(read("ops/compose.yaml"), '"127.0.0.1:9090:9090"')
  })

  it.effect("the shipped config receives every event type, with every secret from the Secret", () =>
    Effect.gen(function* () {
      const file = JSON.parse(read("ops/kubernetes/config.json"))
      const manifests = read("ops/kubernetes/crm-sync.yaml")
      const secretKeys = new Set([...manifests.matchAll(/--from-literal=([A-Z_]+)=/g)].map((match) => match[1]!))
      const compose = read("ops/compose.yaml")
      const named = envRefNames(file)
      assert.isAbove(named.length, 4)
      for (const name of [...named, "CRM_SYNC_DATABASE_URL", "CRM_SYNC_ENCRYPTION_KEY"]) {
        assert.isTrue(secretKeys.has(name), `the Secret's instructions give ${name}`)
        assert.match(compose, new RegExp(`\\b${name}:`), `compose sets ${name}`)
      }
      assert.include(read("ops/kubernetes/kustomization.yaml"), "config.json")
      assert.include(manifests, "value: /etc/crm-sync/config.json")

      // Decoded as the daemon decodes it, with stand-ins for the Secret's values.
      const resolved = yield* resolveEnvRefs(file, secret)
      const config = yield* decodeDocument({ ...(resolved as object), encryption_key: "a".repeat(64) })
      assert.strictEqual(config.connections[0]!.credential, "oauth", "only an OAuth token can subscribe (spec §5.6)")
      const endpoints = config.webhooks.endpoints
      for (const type of UntypedEventTypes) {
        assert.isTrue(
          endpoints.some((endpoint) => endpoint.event_type === type),
          `${type} carries no event_type: it needs an endpoint of its own`
        )
      }
      const allTypes = endpoints.filter((endpoint) => endpoint.event_type === undefined)
      assert.isAbove(allTypes.length, 0, "an endpoint receives the events that name their type")
      for (const type of KnownEventTypes) {
        assert.isTrue(
          allTypes.length > 0 || endpoints.some((endpoint) => endpoint.event_type === type),
          `${type} has an endpoint`
        )
      }
      for (const endpoint of endpoints) assert.match(Redacted.value(endpoint.secrets[0]!), /^whsec_/)
    })
  )

  it("every manifest parses, has its kind's shape, and names only commands, variables and ports crm-sync has", () => {
    const known: Known = {
      commands: new Set(
        [...read("src/cli/CommandLine.ts").matchAll(/Command\.make\(\s*"([a-z]+)"/g)].map((match) => match[1]!)
      ),
      // Each variable may also come from the file NAME_FILE names.
      env: new Set(
        [...EnvironmentVariables, ...envRefNames(JSON.parse(read("ops/kubernetes/config.json")))].flatMap((name) => [
          name,
          `${name}_FILE`
        ])
      )
    }
    assert.include(known.commands, "reconcile")
    const manifests = read("ops/kubernetes/crm-sync.yaml")
    assert.deepStrictEqual(kubernetesProblems(manifests, known), [])
    assert.deepStrictEqual(composeProblems(read("ops/compose.yaml"), known), [])
    for (const kind of ["Deployment", "CronJob", "Job", "PodDisruptionBudget", "NetworkPolicy", "Service"]) {
      assert.include(manifests, `kind: ${kind}`)
    }

    // The check fails on a manifest that names what crm-sync does not have.
    const broken = manifests
      .replace('args: ["reconcile"]', 'args: ["reconciliate"]')
      .replace("name: CRM_SYNC_LOG_LEVEL,", "name: LOGLEVEL,")
      .replace("httpGet: { path: /readyz, port: admin }", "httpGet: { path: /readyz, port: status }")
      .replace('"--max-semi-space-size=32", "bin/crm-sync.js"', '"--max-semi-space-size=8", "bin/crm-sync.js"')
    assert.deepStrictEqual(kubernetesProblems(broken, known), [
      "Deployment/crm-sync container migrate: sets LOGLEVEL, which crm-sync does not read",
      "Deployment/crm-sync container crm-sync: readinessProbe on unknown port status",
      'CronJob/crm-sync-reconcile container reconcile: runs "reconciliate", not a crm-sync command',
      'Job/crm-sync-backfill container backfill: command ["node","--max-semi-space-size=8","bin/crm-sync.js"], expected ["node","--max-semi-space-size=32","bin/crm-sync.js"]'
    ])
    const brokenCompose = read("ops/compose.yaml").replace('CRM_SYNC_ADMIN_PORT: "9090"', 'CRM_SYNC_ADMIN_PORT: "9191"')
    assert.deepStrictEqual(composeProblems(brokenCompose, known), [
      "compose: CRM_SYNC_ADMIN_PORT 9191 is not published"
    ])
  })

  it("the shipped manifests take the least-privilege path: the owner migrates in a step of its own, the rest checks", () => {
    const manifests = read("ops/kubernetes/crm-sync.yaml")
    assert.deepStrictEqual(leastPrivilegeProblems(manifests), [])
    // The Deployment's pods start only after the migrations ran: its init container migrates.
    assert.match(manifests, /initContainers:\s+- name: migrate\b/)
    // The owner's URL comes from a Secret the instructions create apart from the runtime's.
    assert.match(
      manifests,
      /kubectl create secret generic crm-sync-owner\s+\\\s+#?\s*--from-literal=CRM_SYNC_DATABASE_URL=postgres:\/\/crm_sync_owner/
    )
    assert.match(manifests, /--from-literal=CRM_SYNC_DATABASE_URL=postgres:\/\/crm_sync_runtime/)

    // The check fails on the manifests as they were: no migrate step, every pod applying.
    const applying = manifests.replaceAll(/^ *- \{ name: CRM_SYNC_MIGRATIONS, value: check \}\n/gm, "")
    assert.includeMembers(
      [...leastPrivilegeProblems(applying)],
      [
        "Deployment/crm-sync container crm-sync: CRM_SYNC_MIGRATIONS is not check",
        "CronJob/crm-sync-reconcile container reconcile: CRM_SYNC_MIGRATIONS is not check",
        "Job/crm-sync-backfill container backfill: CRM_SYNC_MIGRATIONS is not check"
      ]
    )
    const ownerEverywhere = manifests.replace(
      "envFrom:\n            - secretRef: { name: crm-sync }",
      "envFrom:\n            - secretRef: { name: crm-sync-owner }"
    )
    assert.include(
      [...leastPrivilegeProblems(ownerEverywhere)],
      "Deployment/crm-sync container crm-sync: sees the migration owner's Secret"
    )
  })

  it("every launcher starts Node through bin/crm-sync.js with the V8 flags its command needs", () => {
    assert.deepStrictEqual(v8FlagsFor(["run"]), ["--max-semi-space-size=8"])
    assert.deepStrictEqual(v8FlagsFor(["backfill", "--resource", "businesses"]), ["--max-semi-space-size=32"])
    const scripts = JSON.parse(read("package.json")).scripts as Record<string, string>
    assert.strictEqual(scripts.start, `node ${v8FlagsFor(["demo"]).join(" ")} bin/crm-sync.js demo`)
    // Any command: bin/crm-sync.js starts Node again with that command's flags.
    assert.strictEqual(scripts["crm-sync"], "node bin/crm-sync.js")
    assert.match(read("ops/Dockerfile"), /^CMD \["run"\]$/m)
    assert.include(
      read("ops/Dockerfile"),
      `ENTRYPOINT ["node", "${v8FlagsFor(["run"]).join('", "')}", "bin/crm-sync.js"]`
    )
    assert.include(
      read("test/bench/crawl.ts"),
      `execArgv: [...v8FlagsFor(["backfill"]), ...(process.env.BENCH_MEASURE_ARGS`,
      "the benchmark measures the process as launched"
    )
  })
})
