/**
 * `crm-sync status --watch`: the status view redrawn at an interval, for an operator on a server
 * without a browser. On a terminal each frame is drawn over the last, in place, as `top` does:
 * cursor home, each line cleared to its end, then the rest of the screen (clearing the whole
 * screen first would flicker), cut to the screen's size so that it never scrolls. To a pipe or a
 * file, frames follow one another, each under a plain `--- ` line. It runs until interrupted
 * (Ctrl-C, SIGTERM), which ends the command with exit 0; a refresh that fails is shown in its
 * frame and tried again at the next.
 */
import * as Console from "effect/Console"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import { oneLine } from "../observability/Text.ts"

export const DEFAULT_INTERVAL_SECONDS = 5
/** Faster than this, a watch of hundreds of connections would keep the database busy for a picture. */
export const MIN_INTERVAL_SECONDS = 1

/** The terminal's size, or `undefined` when stdout is not one. */
export interface Screen {
  readonly rows: number
  readonly columns: number
}

const HOME = "\x1b[H"
const CLEAR_LINE = "\x1b[K"
const CLEAR_BELOW = "\x1b[J"

/**
 * One frame of `text` under `header`, as printed by a line (Console.log ends it): in place on a
 * terminal, else after a plain line and followed by an empty one.
 */
export const frame = (text: string, header: string, screen: Screen | undefined): string => {
  if (screen === undefined) return `--- ${header}\n${text}\n`
  const lines = [header, "", ...text.split("\n")]
  // The last row stays free for the line's end: a line written there would scroll the screen.
  const room = Math.max(1, screen.rows - 1)
  const shown = lines.length <= room ? lines : [...lines.slice(0, room - 1), `… ${lines.length - room + 1} more lines`]
  return `${HOME}${shown.map((line) => `${line.slice(0, screen.columns)}${CLEAR_LINE}`).join("\n")}${CLEAR_BELOW}`
}

/**
 * Draws what `render` makes every `intervalSeconds` until interrupted. `render` returns the
 * frame's text and time; `screen` is asked at each frame (a terminal may be resized).
 */
export const watch = <E, R>(
  render: Effect.Effect<{ readonly text: string; readonly at: string }, E, R>,
  intervalSeconds: number,
  screen: () => Screen | undefined
) => {
  const every = `every ${intervalSeconds} s`
  const draw = render.pipe(
    Effect.map(({ at, text }) => ({ text, header: `crm-sync status at ${at}, ${every}` })),
    Effect.catch((error) =>
      Effect.succeed({
        text: `status could not be read: ${oneLine(error)}`,
        header: `crm-sync status, ${every}: trying again`
      })
    ),
    Effect.flatMap(({ header, text }) => {
      const size = screen()
      return Console.log(frame(text, size === undefined ? header : `${header} (Ctrl-C to stop)`, size))
    })
  )
  return Effect.repeat(draw, Schedule.spaced(Duration.seconds(intervalSeconds))).pipe(Effect.asVoid)
}
