/**
 * Fault injection. A rule names what goes wrong (`kind`), where (`method`, `path` glob for HTTP
 * faults; `event` glob for webhook faults) and how often: with `probability` (drawn from a PRNG
 * seeded by the sandbox seed and the rule id, so a seeded run fails the same requests every
 * time), at most `times` times, after letting `skip` matching requests through. `page_drift`
 * fires on every `every`-th matching list request. This service only decides; the server, the
 * webhook sender and the drift mutations act on its decisions.
 */
import { Context, Effect, Layer, Schema } from "effect"
import { type ApiError, notFound } from "./errors.ts"
import { SandboxConfig } from "./Options.ts"
import { hash, hashString, Rng } from "./Prng.ts"
import { globMatches } from "./RequestLog.ts"

const Common = {
  /** Rule id; generated when absent. */
  id: Schema.optionalKey(Schema.String),
  method: Schema.optionalKey(Schema.String),
  /** Path glob, `*` matching anything (`/v1/businesses`, `/v1/*`). Default: every path. */
  path: Schema.optionalKey(Schema.String),
  /** Event-type glob for webhook faults (`task.*`). Default: every event. */
  event: Schema.optionalKey(Schema.String),
  /** Webhook faults: only deliveries of events about this record id. Default: every record. */
  record: Schema.optionalKey(Schema.String),
  /** Chance that a matching request is affected (default 1). */
  probability: Schema.optionalKey(Schema.Number.check(Schema.isBetween({ minimum: 0, maximum: 1 }))),
  /** Affect at most this many requests ("the next N requests"). Default: unlimited. */
  times: Schema.optionalKey(Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))),
  /** Let this many matching requests through first. */
  skip: Schema.optionalKey(Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)))
}

const When = Schema.Literals(["before", "after"])

export const FaultRuleInput = Schema.Union([
  /** An HTTP error status: `before` the handler (nothing happens) or `after` it (the write commits). */
  Schema.Struct({
    kind: Schema.Literal("status"),
    status: Schema.optionalKey(Schema.Int.check(Schema.isBetween({ minimum: 400, maximum: 599 }))),
    when: Schema.optionalKey(When),
    ...Common
  }),
  /** A 429 that no bucket caused (a rate-limit storm). */
  Schema.Struct({
    kind: Schema.Literal("rate_limit"),
    retry_after: Schema.optionalKey(Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))),
    limit: Schema.optionalKey(Schema.Literals(["token", "company", "ip"])),
    ...Common
  }),
  /**
   * Added latency: `before` the request is handled (default), `inside` its handling, once an
   * idempotent write holds its key (a repeat with the key meanwhile gets 409) and before it commits,
   * or `after` it: the answer is what the records were when the request arrived, sent late.
   */
  Schema.Struct({
    kind: Schema.Literal("latency"),
    ms: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
    when: Schema.optionalKey(Schema.Literals(["before", "inside", "after"])),
    ...Common
  }),
  /** TCP reset: `before` the handler runs, or `after` it committed its write. */
  Schema.Struct({ kind: Schema.Literal("reset"), when: Schema.optionalKey(When), ...Common }),
  /** The response body cut in half (the status and headers are intact). */
  Schema.Struct({ kind: Schema.Literal("truncate"), ...Common }),
  /** An HTML error page instead of JSON. */
  Schema.Struct({
    kind: Schema.Literal("non_json"),
    status: Schema.optionalKey(Schema.Int.check(Schema.isBetween({ minimum: 200, maximum: 599 }))),
    ...Common
  }),
  /** Records inserted, updated or removed between the list requests of one crawl. */
  Schema.Struct({
    kind: Schema.Literal("page_drift"),
    every: Schema.optionalKey(Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))),
    action: Schema.optionalKey(Schema.Literals(["insert", "update", "delete", "mixed"])),
    count: Schema.optionalKey(Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))),
    ...Common
  }),
  /** The delivery is sent twice, with the same hook-id. */
  Schema.Struct({ kind: Schema.Literal("webhook_duplicate"), ...Common }),
  Schema.Struct({
    kind: Schema.Literal("webhook_delay"),
    ms: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
    ...Common
  }),
  /** The delivery waits until the next delivery to the same endpoint has gone. */
  Schema.Struct({ kind: Schema.Literal("webhook_reorder"), ...Common }),
  /**
   * The first `attempts` attempts of the delivery fail with `status` (default 503), and it is
   * retried along the schedule, each attempt signed at its own time. `reach: "none"` (default):
   * a failed attempt is never sent (it never reached the receiver); `"receiver"`: it is sent and
   * the receiver's answer is lost (recorded as `status`), so the retry is a repeat.
   */
  Schema.Struct({
    kind: Schema.Literal("webhook_fail"),
    status: Schema.optionalKey(Schema.Int.check(Schema.isBetween({ minimum: 400, maximum: 599 }))),
    attempts: Schema.optionalKey(Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))),
    reach: Schema.optionalKey(Schema.Literals(["none", "receiver"])),
    ...Common
  })
])
export type FaultRuleInput = typeof FaultRuleInput.Type

export type FaultRule = FaultRuleInput & {
  readonly id: string
  /** Matching requests (or events) seen so far. */
  readonly matched: number
  /** Times the fault was applied. */
  readonly fired: number
}

export type HttpFault = Exclude<FaultRule, { readonly kind: `webhook_${string}` }>
export type WebhookFault = Extract<FaultRule, { readonly kind: `webhook_${string}` }>

interface RuleState {
  rule: FaultRuleInput & { readonly id: string }
  matched: number
  fired: number
  readonly rng: Rng
}

const isWebhookKind = (kind: FaultRuleInput["kind"]) => kind.startsWith("webhook_")

export class SandboxFaults extends Context.Service<
  SandboxFaults,
  {
    add(rule: FaultRuleInput): Effect.Effect<FaultRule>
    remove(id: string): Effect.Effect<void, ApiError>
    readonly list: Effect.Effect<ReadonlyArray<FaultRule>>
    readonly clear: Effect.Effect<void>
    /** The HTTP faults to apply to this request, in the order the rules were added. */
    forRequest(method: string, path: string): Effect.Effect<ReadonlyArray<HttpFault>>
    /** The webhook faults to apply to one delivery of this event type (about this record). */
    forDelivery(eventType: string, recordId?: string): Effect.Effect<ReadonlyArray<WebhookFault>>
  }
>()("crm-sync/sandbox/SandboxFaults") {
  static readonly layer = Layer.effect(
    SandboxFaults,
    Effect.gen(function* () {
      const { seed } = yield* SandboxConfig
      let rules: Array<RuleState> = []
      let counter = 0

      const snapshot = (state: RuleState): FaultRule => ({ ...state.rule, matched: state.matched, fired: state.fired })

      /** Counts a match and decides whether the rule fires on it. */
      const decide = (state: RuleState): boolean => {
        const rule = state.rule
        state.matched++
        if (rule.times !== undefined && state.fired >= rule.times) return false
        const position = state.matched - (rule.skip ?? 0)
        if (position < 1) return false
        if (rule.kind === "page_drift" && position % (rule.every ?? 1) !== 0) return false
        if (rule.probability !== undefined && state.rng.float() >= rule.probability) return false
        state.fired++
        return true
      }

      return SandboxFaults.of({
        add: (input) =>
          Effect.sync(() => {
            const id = input.id ?? `flt_${++counter}`
            const state: RuleState = {
              rule: { ...input, id },
              matched: 0,
              fired: 0,
              rng: new Rng(hash(seed, hashString(id)))
            }
            rules = [...rules.filter((r) => r.rule.id !== id), state]
            return snapshot(state)
          }),
        remove: Effect.fn("SandboxFaults.remove")(function* (id: string) {
          if (!rules.some((r) => r.rule.id === id)) return yield* notFound(`fault ${id} not found`)
          rules = rules.filter((r) => r.rule.id !== id)
        }),
        list: Effect.sync(() => rules.map(snapshot)),
        clear: Effect.sync(() => {
          rules = []
          counter = 0
        }),
        forRequest: (method, path) =>
          Effect.sync(() =>
            rules
              .filter(
                (state) =>
                  !isWebhookKind(state.rule.kind) &&
                  (state.rule.method === undefined || state.rule.method.toUpperCase() === method) &&
                  (state.rule.path === undefined || globMatches(state.rule.path, path)) &&
                  decide(state)
              )
              .map((state) => snapshot(state) as HttpFault)
          ),
        forDelivery: (eventType, recordId) =>
          Effect.sync(() =>
            rules
              .filter(
                (state) =>
                  isWebhookKind(state.rule.kind) &&
                  (state.rule.event === undefined || globMatches(state.rule.event, eventType)) &&
                  (state.rule.record === undefined || state.rule.record === recordId) &&
                  decide(state)
              )
              .map((state) => snapshot(state) as WebhookFault)
          )
      })
    })
  )
}
