/**
 * Many connections on one egress: a partner serving 20 firms sends every connection's requests
 * from one address, so the per-IP bucket (spec §8) is what binds. With every connection wanting
 * more than its share, each full window of the IP bucket is shared fairly: the least-served
 * connection gets at least 90% of an even share, and each connection's own token bucket still
 * holds. Counts from the sandbox's request log.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Fiber, Layer } from "effect"
import { FetchHttpClient } from "effect/http"
import { RateBudget } from "../../src/budget/RateBudget.ts"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { CrmClient } from "../../src/crm/CrmClient.ts"
import { Credentials } from "../../src/crm/Credentials.ts"
import { Sandbox } from "@crm-sync/sandbox"
import { TestDatabase } from "../support/TestDatabase.ts"

const CONNECTIONS = 20
const IP_LIMIT = 200
const WINDOW_MS = 4_000

const SandboxLive = Sandbox.layer({
  seed: 9,
  records: 200,
  window: `${WINDOW_MS} millis`,
  limits: { personal: { token: 1_000, company: 1_000_000, ip: IP_LIMIT } }
})

const names = Array.from({ length: CONNECTIONS }, (_, index) => `firm-${String(index + 1).padStart(2, "0")}`)

const Config = Layer.unwrap(
  Effect.gen(function* () {
    const sandbox = yield* Sandbox
    const tokens = yield* Effect.forEach(names, () => sandbox.admin.createToken({ userId: sandbox.credentials.userId }))
    return AppConfig.layerFrom({
      connections: names.map((name, index) => ({
        name,
        base_url: sandbox.baseUrl,
        credential: "personal",
        token: tokens[index]!.token,
        limits: { token: 1_000, company: 1_000_000, ip: IP_LIMIT, window: `${WINDOW_MS} millis` },
        egress: "partner-nat",
        company_bucket: name
      })),
      budget: { reserve_interactive: 0, reserve_incremental: 0, safety_margin: "100 millis" }
    })
  })
)

const World = Layer.mergeAll(RateBudget.layer, Credentials.layer).pipe(
  Layer.provideMerge(FetchHttpClient.layer),
  Layer.provideMerge(Config),
  Layer.provideMerge(TestDatabase),
  Layer.provideMerge(SandboxLive)
)

layer(World, { timeout: 120_000, excludeTestServices: true })("one egress, twenty connections", (it) => {
  it.effect("each full IP window is shared evenly: the least-served connection gets ≥ 90% of its share", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      const since = yield* sandbox.admin.lastRequestSeq
      const clients = yield* Effect.forEach(names, (name) => CrmClient.make(name).pipe(Effect.orDie))
      // Every connection wants far more than its share: a few requests in flight each, without end.
      const workers = yield* Effect.forEach(clients, (client) =>
        Effect.forkChild(
          Effect.forEach(
            Array.from({ length: 4 }),
            () => Effect.forever(client.listFinancialAccounts({ page: 1, per_page: 1 }, { priority: "bulk" })),
            { concurrency: "unbounded", discard: true }
          )
        )
      )
      yield* Effect.sleep(`${WINDOW_MS * 4} millis`)
      yield* Effect.forEach(workers, Fiber.interrupt, { discard: true })

      const entries = (yield* sandbox.admin.requests({ since })).filter((entry) => entry.path.startsWith("/v1/"))
      assert.strictEqual(entries.filter((entry) => entry.status === 429).length, 0, "no request over a limit")
      // The sandbox's IP windows: each begins at the first request after the previous one ended.
      const windows: Array<{ start: number; byToken: Map<string, number> }> = []
      for (const entry of entries) {
        const at = Date.parse(entry.at)
        let current = windows.at(-1)
        if (current === undefined || at >= current.start + WINDOW_MS)
          windows.push((current = { start: at, byToken: new Map() }))
        const token = entry.headers.authorization ?? ""
        current.byToken.set(token, (current.byToken.get(token) ?? 0) + 1)
      }
      // The full windows: all but the last (cut short when the workers stopped).
      const full = windows.slice(0, -1)
      assert.isAtLeast(full.length, 2)
      for (const window of full) {
        const counts = [...window.byToken.values()]
        const total = counts.reduce((sum, n) => sum + n, 0)
        assert.strictEqual(window.byToken.size, CONNECTIONS, "every connection was served")
        const fair = total / CONNECTIONS
        assert.isAtLeast(
          Math.min(...counts),
          0.9 * fair,
          `least-served ${Math.min(...counts)} of a fair ${fair}: ${counts}`
        )
      }
    })
  )
})
