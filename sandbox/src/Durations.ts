/**
 * Durations as the sandbox's options and flags write them (`10s`, `5m`, `1h`). Imports Effect's
 * modules by path, not the package index: the command line loads this to declare its flags, and
 * the index would load all of Effect for `--help`.
 */
import * as Duration from "effect/Duration"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"

export type DurationInput = Duration.Input | string

const shortUnits: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }

/**
 * Parses a duration written as `500ms`, `10s`, `5m`, `1h`, `2d`, or in Effect's own forms
 * (`"10 seconds"`, a number of milliseconds). `None` when it is none of these.
 */
export const parseDuration = (input: DurationInput): Option.Option<Duration.Duration> => {
  if (typeof input === "string") {
    const short = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$/.exec(input)
    if (short !== null) return Option.some(Duration.millis(Number(short[1]) * shortUnits[short[2]!]!))
  }
  // fromInput answers None for strings that are not Duration inputs
  return Duration.fromInput(input as Duration.Input)
}

/** A CLI/config schema for durations in the forms `parseDuration` accepts. */
export const DurationString = Schema.String.pipe(
  Schema.check(
    Schema.makeFilter((value: string) =>
      Option.isSome(parseDuration(value)) ? undefined : "expected a duration such as 10s, 5m, 1h or 500ms"
    )
  )
)
