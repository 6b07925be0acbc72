/**
 * RuntimeMetrics: the process's own health on `/metrics` — resident memory (what a container's
 * memory limit counts), V8 heap in use, and the event loop's delay (its 99th percentile and worst
 * over the last interval, from `perf_hooks.monitorEventLoopDelay`) — sampled every 10 seconds by
 * the daemon. A busy or starved event loop delays every webhook acknowledgement and permit.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import { monitorEventLoopDelay } from "node:perf_hooks"
import * as Metrics from "./Metrics.ts"

const INTERVAL = Duration.seconds(10)

/** Samples the gauges every INTERVAL for the daemon's lifetime. */
export const RuntimeMetricsLive = Layer.effectDiscard(
  Effect.gen(function* () {
    const delay = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const histogram = monitorEventLoopDelay({ resolution: 20 })
        histogram.enable()
        return histogram
      }),
      (histogram) => Effect.sync(() => histogram.disable())
    )
    const sample = Effect.gen(function* () {
      const memory = process.memoryUsage()
      yield* Metrics.set(Metrics.processResidentMemory, memory.rss)
      yield* Metrics.set(Metrics.processHeapUsed, memory.heapUsed)
      // Nanoseconds in the histogram; seconds on /metrics.
      yield* Metrics.set(Metrics.eventLoopDelay, delay.percentile(99) / 1e9, { quantile: "0.99" })
      yield* Metrics.set(Metrics.eventLoopDelay, delay.max / 1e9, { quantile: "max" })
      delay.reset()
    })
    yield* Effect.forkScoped(Effect.repeat(sample, Schedule.spaced(INTERVAL)))
  })
)
