/**
 * Probes back off while a co-tenant stays. The CRM admits 10 a window to crm-sync (others spend
 * the rest of its 20): after the first burst the ceiling is 10, and each probe to 15 is refused.
 * The wait before the next probe doubles after each refused one (1, 2, 4, ... clean windows), so a
 * co-tenant that stays costs fewer and fewer refused requests; a probe that passes (the co-tenant
 * now leaves 15) starts the waits over. The wait grows no longer than the ceiling holds (its ttl
 * in windows, less two), so that the next probe comes before the ceiling expires. Counts from the
 * sandbox's request log, window by window.
 */
import { assert, layer } from "@effect/vitest"
import { Effect } from "effect"
import { Sandbox } from "@crm-sync/sandbox"
import type { RequestLogEntry } from "@crm-sync/sandbox"
import { client, harness } from "../sync/harness.ts"

const WINDOW_MS = 3_000

interface ServerWindow {
  readonly start: number
  ok: number
  limited: number
}

/** The sandbox's windows over its log: each opens at the first admitted request after the last one ended. */
const windowsOf = (entries: ReadonlyArray<RequestLogEntry>, windowMs = WINDOW_MS) => {
  const windows: Array<ServerWindow> = []
  for (const entry of entries) {
    const at = Date.parse(entry.at)
    let current = windows.at(-1)
    if ((current === undefined || at >= current.start + windowMs) && entry.status !== 429)
      windows.push((current = { start: at, ok: 0, limited: 0 }))
    if (current === undefined) continue
    if (entry.status === 429) current.limited++
    else current.ok++
  }
  return windows
}

/** The indexes of the windows that met a 429. */
const refusedIn = (windows: ReadonlyArray<ServerWindow>) =>
  windows.flatMap((window, index) => (window.limited > 0 ? [index] : []))

/** The windows without a 429 between each two that met one, in order. */
const gaps = (indexes: ReadonlyArray<number>) => indexes.slice(1).map((index, i) => index - indexes[i]! - 1)

/** The CRM admits 10 of crm-sync's configured 20 a window. */
const world = (windowMs: number, budget: Record<string, unknown> = {}) =>
  harness({
    sandbox: {
      seed: 5,
      records: 200,
      window: `${windowMs} millis`,
      limits: { personal: { token: 10, company: 1_000_000, ip: 1_000_000 } }
    },
    limits: { token: 20, company: 1_000_000, ip: 1_000_000, window: `${windowMs} millis` },
    config: { budget: { probe_step: 0.25, reserve_interactive: 0, reserve_incremental: 0, ...budget } }
  })

layer(world(WINDOW_MS), { timeout: 240_000, excludeTestServices: true })("probes back off", (it) => {
  it.effect(
    "each refused probe doubles the wait before the next; a probe that passes starts it over",
    () =>
      Effect.gen(function* () {
        const sandbox = yield* Sandbox
        const crm = yield* client
        const since = yield* sandbox.admin.lastRequestSeq
        const page = crm.listFinancialAccounts({ page: 1, per_page: 100 }, { priority: "bulk" })
        const windows = Effect.map(sandbox.admin.requests({ since }), (entries) =>
          windowsOf(entries.filter((entry) => entry.path.startsWith("/v1/")))
        )
        // The co-tenant stays: the first burst, then two refused probes.
        let guard = 0
        while (refusedIn(yield* windows).length < 3 && guard++ < 400) yield* page
        const staying = yield* windows
        // The co-tenant now leaves 15: the next probe (10 → 15) passes; the one after (→ 20) is refused.
        yield* sandbox.admin.setRateLimits({ personal: { token: 15 } })
        const changedAt = staying.length - 1
        while (refusedIn(yield* windows).length < 5 && guard++ < 400) yield* page
        const all = yield* windows
        const seen = JSON.stringify(all.map(({ ok, limited }) => ({ ok, limited })))

        const refused = refusedIn(all)
        assert.lengthOf(refused, 5, seen)
        assert.strictEqual(refused[0], 0, `the first window meets the limit: ${seen}`)
        // Learned, then refused probes after 1 and after 2 clean windows (the wait doubled).
        assert.deepStrictEqual(gaps(refused.slice(0, 3)), [1, 2], seen)
        // The wait had reached 4: the next probe came after 4 clean windows, and passed (15 admitted).
        const passed = all.findIndex((window, index) => index > changedAt && window.limited === 0 && window.ok > 10)
        assert.isAbove(passed, refused[2]!, seen)
        assert.strictEqual(passed - refused[2]! - 1, 4, `the probe that passed waited 4 windows: ${seen}`)
        // After it, the waits start over: the next probe follows at once and is refused, and the one
        // after it waits 2 windows (1 doubled), not 8.
        assert.strictEqual(refused[3], passed + 1, seen)
        assert.deepStrictEqual(gaps(refused.slice(3)), [2], seen)
      }),
    { timeout: 240_000 }
  )
})

const LONG_WINDOW_MS = 20_000

layer(world(LONG_WINDOW_MS, { learned_ceiling_ttl: "1 minute" }), { timeout: 300_000, excludeTestServices: true })(
  "probes back off no longer than the ceiling holds",
  (it) => {
    it.effect(
      "the next probe comes before the ceiling it would test expires: a 1-minute ceiling of 20-s windows, a probe every other window",
      () =>
        Effect.gen(function* () {
          const sandbox = yield* Sandbox
          const crm = yield* client
          const since = yield* sandbox.admin.lastRequestSeq
          const page = crm.listFinancialAccounts({ page: 1, per_page: 100 }, { priority: "bulk" })
          const windows = Effect.map(sandbox.admin.requests({ since }), (entries) =>
            windowsOf(
              entries.filter((entry) => entry.path.startsWith("/v1/")),
              LONG_WINDOW_MS
            )
          )
          let guard = 0
          while (refusedIn(yield* windows).length < 3 && guard++ < 200) yield* page
          const all = yield* windows
          const seen = JSON.stringify(all.map(({ ok, limited }) => ({ ok, limited })))
          const refused = refusedIn(all)
          assert.lengthOf(refused, 3, seen)
          // A wait of 2 (or the whole minute) would have let the ceiling expire first: crm-sync would
          // have taken the whole 20 at once, and learned the ceiling again from a burst.
          assert.deepStrictEqual(gaps(refused), [1, 1], seen)
          for (const index of refused.slice(1)) assert.strictEqual(all[index]!.limited, 1, seen)
        }),
      { timeout: 300_000 }
    )
  }
)
