/**
 * How the backfill shows its progress: on a terminal, one progress bar per resource (cli-progress,
 * on stderr so that stdout keeps only the summary table) with pages, records, rate and an ETA;
 * elsewhere (a log file, a CI job, a container) a plain log line per resource every 15 seconds and
 * at each finish; or nothing. The ETA itself is computed by the backfill from the budget; this
 * module only formats and draws.
 */
import cliProgress from "cli-progress"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import type * as Scope from "effect/Scope"
import { formatDuration } from "../observability/Text.ts"

export type ProgressMode = "bars" | "lines" | "none"

/** What one resource's line shows. */
export interface ProgressState {
  /** Pages stored and the list's total, when known (unknown before the first page). */
  readonly pages: number
  readonly totalPages: number | undefined
  readonly records: number
  /** Records per second written by this invocation. */
  readonly recordsPerSecond: number
  /** e.g. "ETA 2 h 14 min at 500 req/h"; undefined when nothing sensible can be said. */
  readonly eta: string | undefined
  /** A word instead of the numbers: "waiting for the daemon's crawl", "done", "failed". */
  readonly status?: string
}

export interface ProgressDisplay {
  readonly start: (key: string, label: string) => Effect.Effect<void>
  readonly update: (key: string, state: ProgressState) => Effect.Effect<void>
  /** A one-off message (a wait, a failure), printed without breaking the bars. */
  readonly message: (text: string) => Effect.Effect<void>
  /**
   * While bars are drawn, log lines must go above them rather than through them: the logger to
   * use meanwhile (logfmt lines printed by the bars), or undefined to keep the program's own.
   */
  readonly logger: Logger.Logger<unknown, void> | undefined
}

const number = new Intl.NumberFormat("en-US")

/** A limit per window as people say it: "500 req/h", "100 req/10 min". */
export const formatLimit = (limit: number, windowMs: number): string => {
  const per =
    windowMs === 3_600_000 ? "h" : windowMs === 60_000 ? "min" : windowMs === 1_000 ? "s" : formatDuration(windowMs)
  return `${number.format(limit)} req/${per}`
}

/**
 * Milliseconds still needed for `remaining` requests: what the budget's windows allow
 * (`budgetWaitMs`, from RateBudget.timeUntil, which assumes nobody else uses them and requests
 * take no time) or the pace seen so far, whichever is slower — the honest one of the two.
 */
export const estimateMs = (remaining: number, budgetWaitMs: number, requestsSoFar: number, elapsedMs: number) =>
  remaining <= 0 ? 0 : Math.max(budgetWaitMs, requestsSoFar > 0 ? (remaining * elapsedMs) / requestsSoFar : 0)

/** "ETA 2 h 14 min at 500 req/h". */
export const etaText = (ms: number, limit: number, windowMs: number) =>
  `ETA ${Number.isFinite(ms) ? formatDuration(ms) : "unknown"} at ${formatLimit(limit, windowMs)}`

/** "financial_accounts 37/120 pages · 3,700 records · 310 rec/s · ETA 2 h 14 min at 500 req/h" without the label. */
export const describe = (state: ProgressState): string => {
  if (state.status !== undefined && state.pages === 0 && state.records === 0) return state.status
  const pages = `${number.format(state.pages)}/${state.totalPages === undefined ? "?" : number.format(state.totalPages)} pages`
  const parts = [
    pages,
    `${number.format(state.records)} records`,
    `${number.format(Math.round(state.recordsPerSecond))} rec/s`
  ]
  if (state.status !== undefined) parts.push(state.status)
  else if (state.eta !== undefined) parts.push(state.eta)
  return parts.join(" · ")
}

const LABEL_WIDTH = 20
const LINE_EVERY_MS = 15_000

const bars = Effect.acquireRelease(
  Effect.sync(() => {
    const multibar = new cliProgress.MultiBar(
      {
        stream: process.stderr,
        hideCursor: true,
        clearOnComplete: false,
        stopOnComplete: false,
        autopadding: true,
        fps: 4,
        format: (options, params, payload: { readonly label: string; readonly text: string }) =>
          `${payload.label.padEnd(LABEL_WIDTH)} ${cliProgress.Format.BarFormat(params.progress, options)} ${payload.text}`
      },
      cliProgress.Presets.shades_classic
    )
    return { multibar, bars: new Map<string, { bar: cliProgress.SingleBar; label: string }>() }
  }),
  ({ multibar }) => Effect.sync(() => multibar.stop())
).pipe(
  Effect.map(({ multibar, bars }): ProgressDisplay => ({
    start: (key, label) =>
      Effect.sync(() => {
        bars.set(key, { bar: multibar.create(1, 0, { label, text: "starting" }), label })
      }),
    update: (key, state) =>
      Effect.sync(() => {
        const held = bars.get(key)
        if (held === undefined) return
        const total = Math.max(1, state.totalPages ?? Math.max(1, state.pages))
        held.bar.setTotal(total)
        held.bar.update(Math.min(state.pages, total), { label: held.label, text: describe(state) })
      }),
    message: (text) => Effect.sync(() => multibar.log(`${text}\n`)),
    logger: Logger.make((options) => {
      multibar.log(`${Logger.formatLogFmt.log(options)}\n`)
    })
  }))
)

const lines = Effect.sync(() => {
  const labels = new Map<string, string>()
  const lastLine = new Map<string, { readonly at: number; readonly status: string | undefined }>()
  return {
    start: (key, label) =>
      Effect.sync(() => {
        labels.set(key, label)
      }),
    update: (key, state) =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        const last = lastLine.get(key)
        // Every 15 s, and at once for a new status (done, failed, waiting): a log, not a film.
        if (
          last !== undefined &&
          now - last.at < LINE_EVERY_MS &&
          (state.status === undefined || state.status === last.status)
        )
          return
        lastLine.set(key, { at: now, status: state.status })
        yield* Effect.logInfo(`backfill: ${labels.get(key) ?? key} ${describe(state)}`)
      }),
    message: (text) => Effect.logInfo(`backfill: ${text}`),
    logger: undefined
  } satisfies ProgressDisplay
})

const none: ProgressDisplay = {
  start: () => Effect.void,
  update: () => Effect.void,
  message: () => Effect.void,
  logger: undefined
}

/** The display for a mode; bars are stopped (and the cursor restored) when the scope closes. */
export const makeProgressDisplay = (mode: ProgressMode): Effect.Effect<ProgressDisplay, never, Scope.Scope> =>
  mode === "bars" ? bars : mode === "lines" ? lines : Effect.succeed(none)

/** Bars when stderr is a terminal, log lines otherwise. */
export const detectProgressMode = (): ProgressMode => (process.stderr.isTTY === true ? "bars" : "lines")
