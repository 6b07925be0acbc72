/**
 * The sandbox's notion of "now": the `Clock` the sandbox was built with (the live one, see
 * `Sandbox.layer`) plus an offset the admin API can move forward, so a test can age tokens,
 * idempotency keys, rate windows and debounce windows without waiting. The clock is captured once,
 * so an admin call made from a test fiber reads the same time as the server. Listeners are told
 * when the offset moves, so timers keyed to sandbox time (the `client.updated` debounce) fire at
 * once instead of at their real-time deadline. The `clockSkew` option shifts both: the CRM's
 * machine clock runs ahead of (or behind) crm-sync's by that much, in the timestamps it writes
 * and in the time it signs deliveries with.
 */
import { Clock, Context, DateTime, Effect, Layer, Option } from "effect"
import { SandboxConfig } from "./Options.ts"

export class SandboxClock extends Context.Service<
  SandboxClock,
  {
    /** Sandbox time in epoch milliseconds. */
    readonly now: Effect.Effect<number>
    /** The CRM machine's clock: the underlying clock plus the skew, without the offset. */
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
      const config = yield* Effect.serviceOption(SandboxConfig)
      const skew = Option.isSome(config) ? config.value.clockSkewMs : 0
      let offset = 0
      const listeners: Array<Effect.Effect<void>> = []
      const wall = () => clock.currentTimeMillisUnsafe() + skew
      const now = Effect.sync(() => wall() + offset)
      const advance = Effect.fn("SandboxClock.advance")(function* (ms: number) {
        offset += Math.max(0, ms)
        for (const listener of listeners) yield* listener
        return offset
      })
      return SandboxClock.of({
        now,
        wallNow: Effect.sync(wall),
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

const DAY_MS = 86_400_000
const TWO_DIGITS = Array.from({ length: 100 }, (_, n) => String(n).padStart(2, "0"))
const THREE_DIGITS = Array.from({ length: 1000 }, (_, n) => String(n).padStart(3, "0"))

/**
 * ISO 8601 in UTC with milliseconds, the format of every sandbox timestamp: what
 * `Date.prototype.toISOString` prints, computed with integer arithmetic (the civil date of a day
 * number, after Howard Hinnant's `civil_from_days`) in about a third of its time. Records are
 * generated as pages are read, three or more timestamps each. Years outside 0–9999 (never
 * generated) take `toISOString`'s own path.
 */
export const iso = (millis: number): string => {
  const days = Math.floor(millis / DAY_MS)
  let rest = millis - days * DAY_MS
  const shifted = days + 719_468 // days from 0000-03-01
  const era = Math.floor(shifted / 146_097)
  const dayOfEra = shifted - era * 146_097
  const yearOfEra = Math.floor(
    (dayOfEra - Math.floor(dayOfEra / 1460) + Math.floor(dayOfEra / 36_524) - Math.floor(dayOfEra / 146_096)) / 365
  )
  const dayOfYear = dayOfEra - (365 * yearOfEra + Math.floor(yearOfEra / 4) - Math.floor(yearOfEra / 100))
  const monthIndex = Math.floor((5 * dayOfYear + 2) / 153) // from March
  const day = dayOfYear - Math.floor((153 * monthIndex + 2) / 5) + 1
  const month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
  const year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
  if (!Number.isInteger(millis) || year < 0 || year > 9999) return new Date(millis).toISOString()
  const hour = Math.floor(rest / 3_600_000)
  rest -= hour * 3_600_000
  const minute = Math.floor(rest / 60_000)
  rest -= minute * 60_000
  const second = Math.floor(rest / 1000)
  const yyyy = year < 1000 ? String(year).padStart(4, "0") : String(year)
  return `${yyyy}-${TWO_DIGITS[month]}-${TWO_DIGITS[day]}T${TWO_DIGITS[hour]}:${TWO_DIGITS[minute]}:${TWO_DIGITS[second]}.${THREE_DIGITS[rest - second * 1000]}Z`
}

/** `YYYY-MM-DD` in UTC. */
export const isoDate = (millis: number): string => iso(millis).slice(0, 10)

/** Epoch milliseconds of an ISO timestamp produced by `iso`. */
export const millisOf = (timestamp: string): number => DateTime.toEpochMillis(DateTime.makeUnsafe(timestamp))
