/**
 * The window arithmetic of spec §8 on its own: fresh windows from the first permit, the safety
 * margins at the close, all-or-nothing over several buckets, reserves that shrink over a window,
 * 429 blocks, and the ETA.
 */
import { assert, describe, it } from "@effect/vitest"
import { decide, earliest, grantable, type Policy, timeUntil, type WindowState } from "../../src/budget/Windows.ts"

const policy: Policy = { reserveInteractive: 0.1, reserveIncremental: 0.1, marginMs: 100, pacing: "learned" }
const bucket = (overrides: Partial<WindowState> = {}): WindowState => ({
  key: "token:a",
  scope: "token",
  limit: 100,
  windowMs: 10_000,
  windowStart: null,
  used: 0,
  blockedUntil: null,
  ...overrides
})

describe("Windows.decide", () => {
  it("starts a window at the first permit", () => {
    const decision = decide([bucket()], 5_000, 1, "interactive", policy)
    assert.strictEqual(decision.kind, "grant")
    if (decision.kind === "grant") {
      assert.strictEqual(decision.windows[0]!.windowStart, 5_000)
      assert.strictEqual(decision.windows[0]!.used, 1)
    }
  })

  it("refuses a full window until it has ended plus the margin, then starts afresh", () => {
    const full = bucket({ windowStart: 0, used: 100 })
    const decision = decide([full], 3_000, 1, "interactive", policy)
    assert.deepStrictEqual(decision, { kind: "wait", until: 10_100, bucket: "token:a", reason: "full" })
    const later = decide([full], 10_100, 1, "interactive", policy)
    assert.strictEqual(later.kind, "grant")
    if (later.kind === "grant")
      assert.deepStrictEqual([later.windows[0]!.windowStart, later.windows[0]!.used], [10_100, 1])
  })

  it("opens the next window at most 500 ms after the last one's end, whatever the closing margin", () => {
    const hour = bucket({ windowMs: 3_600_000, windowStart: 0, used: 100 })
    const wide = { ...policy, marginMs: 2_000 }
    // Closing: nothing in the last 2 s of the window, though it had room.
    assert.strictEqual(
      grantable(bucket({ windowMs: 3_600_000, windowStart: 0, used: 0 }), 3_598_500, "interactive", wide),
      0
    )
    // Opening: the full window waits until its end plus 500 ms, not plus 2 s.
    assert.deepStrictEqual(decide([hour], 1_000, 1, "interactive", wide), {
      kind: "wait",
      until: 3_600_500,
      bucket: "token:a",
      reason: "full"
    })
  })

  it("grants nothing in the closing margin of a window, even with room left", () => {
    const decision = decide([bucket({ windowStart: 0, used: 10 })], 9_950, 1, "interactive", policy)
    assert.deepStrictEqual(decision, { kind: "wait", until: 10_100, bucket: "token:a", reason: "closing" })
  })

  it("is all or nothing over several buckets and waits for the latest of them", () => {
    const token = bucket({ windowStart: 0, used: 0 })
    const company = bucket({ key: "company:x", scope: "company", windowStart: 0, used: 100 })
    const ip = bucket({ key: "ip:default", scope: "ip", blockedUntil: 20_000 })
    const decision = decide([token, company, ip], 1_000, 1, "interactive", policy)
    assert.deepStrictEqual(decision, { kind: "wait", until: 20_000, bucket: "ip:default", reason: "blocked" })
    const granted = decide([token, company], 10_100, 1, "interactive", policy)
    assert.strictEqual(granted.kind, "grant")
  })

  it("keeps the reserves from bulk and incremental work at the start of a window", () => {
    const state = bucket({ windowStart: 0, used: 80 })
    assert.strictEqual(decide([state], 0, 1, "bulk", policy).kind, "wait")
    assert.strictEqual(decide([state], 0, 1, "incremental", policy).kind, "grant")
    assert.strictEqual(decide([bucket({ windowStart: 0, used: 90 })], 0, 1, "incremental", policy).kind, "wait")
    assert.strictEqual(decide([bucket({ windowStart: 0, used: 99 })], 0, 1, "interactive", policy).kind, "grant")
  })

  it("lets the reserve decay so bulk work can use the whole window by its close", () => {
    const state = bucket({ windowStart: 0, used: 99 })
    const { at, reason } = earliest(state, 1, 1, "bulk", policy)
    assert.strictEqual(reason, "reserve")
    assert.isTrue(at > 1 && at < 9_900, `the last permit comes before the close, at ${at}`)
    assert.strictEqual(decide([state], at, 1, "bulk", policy).kind, "grant")
    assert.strictEqual(decide([state], at - 2, 1, "bulk", policy).kind, "wait")
  })

  it("waits out a 429 block and then starts a fresh window", () => {
    const blocked = bucket({ blockedUntil: 4_000 })
    assert.deepStrictEqual(decide([blocked], 1_000, 1, "interactive", policy), {
      kind: "wait",
      until: 4_000,
      bucket: "token:a",
      reason: "blocked"
    })
    const after = decide([blocked], 4_000, 1, "interactive", policy)
    assert.strictEqual(after.kind, "grant")
  })

  it("never shrinks a short window's usable part below nine tenths", () => {
    const tiny = bucket({ windowMs: 500, windowStart: 0, used: 0 })
    assert.strictEqual(grantable(tiny, 440, "interactive", { ...policy, marginMs: 2_000 }), 100)
    assert.strictEqual(grantable(tiny, 460, "interactive", { ...policy, marginMs: 2_000 }), 0)
  })
})

describe("Windows.timeUntil", () => {
  it("is zero when the permits fit now", () => {
    assert.strictEqual(timeUntil([bucket()], 0, 50, "interactive", policy), 0)
  })

  it("counts whole windows for work larger than one window", () => {
    // 250 permits at 100 a window: this window, the next (starting at 10 100), and a third at 20 200.
    assert.strictEqual(timeUntil([bucket()], 0, 250, "interactive", policy), 20_200)
  })

  it("is governed by the strictest bucket and any block", () => {
    const loose = bucket({ key: "ip:x", scope: "ip", limit: 1_000 })
    const blocked = bucket({ blockedUntil: 3_000 })
    assert.strictEqual(timeUntil([loose, blocked], 0, 100, "interactive", policy), 3_000)
  })
})
