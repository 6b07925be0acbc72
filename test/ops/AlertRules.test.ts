/**
 * The alert rules under promtool (Debian's prometheus package; scripts/ensure-test-tools.sh
 * installs it): the rules load, and ops/prometheus/alerts.test.yaml's cases — a healthy replica,
 * a vanished target, waiting outbox rows, an overdue and failing job, a lost grant, slow webhook
 * changes, schedules that do not fit, a refused delivery with none stored since, an endpoint that
 * stored nothing a day after the subscription — fire exactly the alerts they state, labels and summaries.
 */
import { assert, describe, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"

const folder = new URL("../../ops/prometheus/", import.meta.url).pathname

const promtool = (args: ReadonlyArray<string>) => {
  const result = spawnSync("promtool", args, { cwd: folder, encoding: "utf8", timeout: 60_000 })
  if (result.error !== undefined)
    throw new Error(`promtool: ${result.error.message} (run scripts/ensure-test-tools.sh)`)
  return { code: result.status, output: `${result.stdout}${result.stderr}` }
}

describe("alert rules", () => {
  it("load in promtool", () => {
    const checked = promtool(["check", "rules", "alerts.yaml"])
    assert.strictEqual(checked.code, 0, checked.output)
    assert.match(checked.output, /SUCCESS: 17 rules found/)
  })

  it("fire as their unit tests state", () => {
    const tested = promtool(["test", "rules", "alerts.test.yaml"])
    assert.strictEqual(tested.code, 0, tested.output)
    assert.include(tested.output, "SUCCESS")
  })
})
