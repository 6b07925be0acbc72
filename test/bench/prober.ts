/**
 * A prober as an orchestrator's would be: a process of its own that only sends `GET url` every
 * `everyMs` (5-s timeout, counted as 5 s) until its stdin closes, then prints
 * `{"latencies":[…],"failures":N}` on stdout. The partner benchmark runs one per probed path, so
 * a probe's time is the daemon's, not the time the benchmark's own work (its queries, its LISTEN)
 * kept the probe's answer waiting.
 *
 * `node test/bench/prober.ts URL EVERY_MS`
 */
const [url, everyMs] = [process.argv[2]!, Number(process.argv[3] ?? 500)]
const TIMEOUT_MS = 5_000
const latencies: Array<number> = []
let failures = 0
// Untimed: a process's first fetch loads its HTTP client (about 100 ms here), which is the
// prober's cost, not the daemon's. `/healthz`, so that no sample of the probed path is left out.
await fetch(new URL("/healthz", url), { signal: AbortSignal.timeout(TIMEOUT_MS) }).catch(() => undefined)

const state = { running: true }
process.stdin.on("close", () => (state.running = false)).resume()

while (state.running) {
  const started = performance.now()
  // A timeout may also strike while the body is read: either way the sample is a failure.
  const ok = await fetch(url, { signal: AbortSignal.timeout(TIMEOUT_MS) })
    .then(async (response) => {
      await response.arrayBuffer()
      return response.ok
    })
    .catch(() => false)
  latencies.push(Math.min(TIMEOUT_MS, performance.now() - started))
  if (!ok) failures++
  await new Promise((resolve) => setTimeout(resolve, everyMs))
}
process.stdout.write(`${JSON.stringify({ latencies, failures })}\n`)
