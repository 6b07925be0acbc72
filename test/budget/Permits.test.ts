/**
 * Permit granting on its own, beyond the windows' arithmetic: bulk permits taken ahead with the
 * room, spacing near a ceiling, even shares of a shared bucket, and what this process holds
 * between transactions (permits taken ahead, 429 blocks).
 */
import { assert, describe, it } from "@effect/vitest"
import { bulkAhead, grantOrWait, LocalPermits, type LockedRow, reservoirKey } from "../../src/budget/Permits.ts"
import type { Policy, WindowState } from "../../src/budget/Windows.ts"

const policy: Policy = { reserveInteractive: 0, reserveIncremental: 0, marginMs: 0, pacing: "learned" }
const NOW = 100_000

const bucket = (overrides: Partial<WindowState> = {}): WindowState => ({
  key: "token:a",
  scope: "token",
  limit: 1_000,
  windowMs: 100_000,
  windowStart: null,
  used: 0,
  blockedUntil: null,
  ...overrides
})

const rowOf = (state: WindowState, overrides: Partial<LockedRow> = {}): LockedRow => ({
  bucket: state.key,
  scope: state.scope,
  window_ms: state.windowMs,
  learned_base: null,
  updated_ms: 0,
  shares: {},
  prev_consumers: 0,
  now_ms: NOW,
  ...overrides
})

describe("bulkAhead", () => {
  it("takes one permit per 100 of room, at least 1 and at most 32", () => {
    assert.deepStrictEqual([bulkAhead(0), bulkAhead(99), bulkAhead(500), bulkAhead(100_000)], [1, 1, 5, 32])
  })
})

describe("grantOrWait", () => {
  it("takes bulk permits ahead with the room left, and only those asked for without `ahead`", () => {
    const state = bucket()
    const ahead = grantOrWait([rowOf(state)], [state], 1, "bulk", policy, true)
    assert.strictEqual(ahead.decision.kind, "grant")
    assert.strictEqual(ahead.taken, 10)
    assert.strictEqual(ahead.now, NOW)
    assert.strictEqual(grantOrWait([rowOf(state)], [state], 1, "bulk", policy, false).taken, 1)
  })

  it("while a learned ceiling holds, paces permits evenly across the window and takes none ahead", () => {
    // Ceiling 100 (learned), a window of 100 s begun 20 s ago: the k-th permit is due when
    // (k - 1)/100 of it has passed, so the 21st is due now.
    const state = bucket({ limit: 100, windowStart: NOW - 20_000, used: 20 })
    const learned = rowOf(state, { learned_base: 90 })
    const onPace = grantOrWait([learned], [state], 1, "bulk", policy, true)
    assert.strictEqual(onPace.decision.kind, "grant")
    assert.strictEqual(onPace.taken, 1)
    const ahead = { ...state, used: 21 }
    // The 22nd permit is due when 21/100 of the window has passed.
    assert.deepStrictEqual(grantOrWait([learned], [ahead], 1, "bulk", policy, true).decision, {
      kind: "wait",
      until: NOW - 20_000 + 21_000,
      bucket: "token:a",
      reason: "full"
    })
    // Without a learned ceiling (crm-sync alone on the bucket) the same request is granted at once,
    // and users' own writes are never paced.
    assert.strictEqual(grantOrWait([rowOf(ahead)], [ahead], 1, "bulk", policy, true).decision.kind, "grant")
    assert.strictEqual(grantOrWait([learned], [ahead], 1, "interactive", policy, false).decision.kind, "grant")
  })

  it("with pacing `always`, paces the configured limit too", () => {
    const always: Policy = { ...policy, pacing: "always" }
    const state = bucket({ limit: 100, windowStart: NOW - 20_000, used: 21 })
    assert.deepStrictEqual(grantOrWait([rowOf(state)], [state], 1, "bulk", always, true).decision, {
      kind: "wait",
      until: NOW - 20_000 + 21_000,
      bucket: "token:a",
      reason: "full"
    })
    // On pace, granted, and none taken ahead.
    const onPace = grantOrWait([rowOf(state)], [{ ...state, used: 20 }], 1, "bulk", always, true)
    assert.strictEqual(onPace.decision.kind, "grant")
    assert.strictEqual(onPace.taken, 1)
  })

  it("near a ceiling takes no permits ahead, and spaces grants by the row's last one", () => {
    const state = bucket({ windowStart: NOW - 1_000, used: 950 })
    const recent = grantOrWait([rowOf(state, { updated_ms: NOW - 100 })], [state], 1, "bulk", policy, true)
    assert.deepStrictEqual(recent.decision, { kind: "wait", until: NOW + 150, bucket: "token:a", reason: "full" })
    assert.strictEqual(recent.taken, 1)
    const spaced = grantOrWait([rowOf(state, { updated_ms: NOW - 300 })], [state], 1, "bulk", policy, true)
    assert.strictEqual(spaced.decision.kind, "grant")
  })

  it("holds a connection past its even share of a shared bucket until the shares no longer bind", () => {
    const token = bucket()
    const ip = bucket({ key: "ip:x", scope: "ip", windowStart: NOW - 1_000, used: 450 })
    const rows = [rowOf(token), rowOf(ip, { shares: { "token:a": 450, "token:b": 0 } })]
    const held = grantOrWait(rows, [token, ip], 1, "incremental", policy, false)
    // limit 1,000 less the spaced tenth, shared by two: 450 each; free from 85% of the window.
    assert.deepStrictEqual(held.decision, {
      kind: "wait",
      until: NOW - 1_000 + 85_000,
      bucket: "ip:x",
      reason: "reserve"
    })
  })

  it("takes only the permit asked for when its fair share has room for it but not for those taken ahead", () => {
    // Shared by two, 450 each (as above); this connection has used 448 of its share. Taken ahead,
    // a bulk permit would be four and overrun it, and the crawl would wait for the window's end.
    const token = bucket()
    const ip = bucket({ key: "ip:x", scope: "ip", windowStart: NOW - 1_000, used: 448 })
    const rows = [rowOf(token), rowOf(ip, { shares: { "token:a": 448, "token:b": 0 } })]
    const granting = grantOrWait(rows, [token, ip], 1, "bulk", policy, true)
    assert.strictEqual(granting.decision.kind, "grant")
    assert.strictEqual(granting.taken, 1)
  })

  it("neither spaces nor holds interactive work to fair shares", () => {
    const token = bucket({ windowStart: NOW - 1_000, used: 950 })
    const ip = bucket({ key: "ip:x", scope: "ip", windowStart: NOW - 1_000, used: 450 })
    const rows = [rowOf(token, { updated_ms: NOW }), rowOf(ip, { shares: { "token:a": 450, "token:b": 0 } })]
    assert.strictEqual(grantOrWait(rows, [token, ip], 1, "interactive", policy, false).decision.kind, "grant")
  })
})

describe("LocalPermits", () => {
  const key = reservoirKey([bucket(), bucket({ key: "ip:x", scope: "ip" })])
  const open = [bucket({ windowStart: 0 })]

  it("hands out the permits held ahead until they lapse", () => {
    const local = new LocalPermits()
    local.hold(key, 2, open, policy, 0, 5_000)
    assert.isTrue(local.takeHeld(key, 5_500))
    assert.isFalse(local.takeHeld(key, 6_000), "held for at most a second")
    local.hold(key, 2, open, policy, 0, 7_000)
    assert.isTrue(local.takeHeld(key, 7_100))
    assert.isTrue(local.takeHeld(key, 7_200))
    assert.isFalse(local.takeHeld(key, 7_300), "only as many as were held")
  })

  it("never holds permits past the window's close", () => {
    const local = new LocalPermits()
    // The window closes at 100,000 on the database's clock; it is 99,800 there and 5,000 here.
    local.hold(key, 1, open, policy, 99_800, 5_000)
    assert.isFalse(local.takeHeld(key, 5_200))
  })

  it("a 429 blocks its buckets and drops the permits held for any set that has one of them", () => {
    const local = new LocalPermits()
    local.hold(key, 3, open, policy, 0, 5_000)
    local.block(new Set(["ip:x"]), 9_000)
    assert.isFalse(local.takeHeld(key, 5_100))
    assert.deepStrictEqual(local.blocked([bucket(), bucket({ key: "ip:x", scope: "ip" })], 6_000), {
      waitMs: 3_000,
      bucket: "ip:x",
      reason: "blocked"
    })
    assert.isUndefined(local.blocked([bucket()], 6_000))
    assert.isUndefined(local.blocked([bucket({ key: "ip:x", scope: "ip" })], 9_000))
  })
})
