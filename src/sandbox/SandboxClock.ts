/**
 * The sandbox's notion of "now": the `Clock` the sandbox was built with (the live one, see
 * `Sandbox.layer`) plus an offset the admin API can move forward, so a test can age tokens,
 * idempotency keys, rate windows and debounce windows without waiting. The clock is captured once,
 * so an admin call made from a test fiber reads the same time as the server. Listeners are told
 * when the offset moves, so timers keyed to sandbox time (the `client.updated` debounce) fire at
 * once instead of at their real-time deadline.
 */
import { Clock, Context, DateTime, Effect, Layer } from "effect"

export class SandboxClock extends Context.Service<
  SandboxClock,
  {
    /** Sandbox time in epoch milliseconds. */
    readonly now: Effect.Effect<number>
    /** The underlying clock without the offset (what other machines' clocks say). */
    readonly wallNow: Effect.Effect<number>
    readonly offsetMs: Effect.Effect<number>
    /** Moves sandbox time forward (never backwards) and notifies listeners. */
    advance(ms: number): Effect.Effect<number>
    /** Registers an effect to run after every `advance`. */
    onAdvance(listener: Effect.Effect<void>): Effect.Effect<void>
    readonly reset: Effect.Effect<void>
  }
>()("crm-sync/sandbox/SandboxClock") {
  static readonly layer = Layer.effect(
    SandboxClock,
    Effect.gen(function* () {
      const clock = yield* Clock.Clock
      let offset = 0
      const listeners: Array<Effect.Effect<void>> = []
      const now = Effect.sync(() => clock.currentTimeMillisUnsafe() + offset)
      const advance = Effect.fn("SandboxClock.advance")(function* (ms: number) {
        offset += Math.max(0, ms)
        for (const listener of listeners) yield* listener
        return offset
      })
      return SandboxClock.of({
        now,
        wallNow: Effect.sync(() => clock.currentTimeMillisUnsafe()),
        offsetMs: Effect.sync(() => offset),
        advance,
        onAdvance: (listener) => Effect.sync(() => void listeners.push(listener)),
        reset: Effect.sync(() => {
          offset = 0
        })
      })
    })
  )
}

/**
 * ISO 8601 in UTC with milliseconds, the format of every sandbox timestamp (what
 * `DateTime.formatIso` prints, without building a DateTime: records are generated as pages are read).
 */
export const iso = (millis: number): string => new Date(millis).toISOString()

/** `YYYY-MM-DD` in UTC. */
export const isoDate = (millis: number): string => iso(millis).slice(0, 10)

/** Epoch milliseconds of an ISO timestamp produced by `iso`. */
export const millisOf = (timestamp: string): number => DateTime.toEpochMillis(DateTime.makeUnsafe(timestamp))
