/**
 * The three request buckets of spec §8: per token (personal) or per app user (OAuth), per company
 * (personal) or per app and company (OAuth), and per client IP. Each is a fixed window that opens
 * at the bucket's first request and lasts `window`; a request must fit in all three, and when
 * more than one is full the one that frees up last is named (it decides when a retry can pass).
 * Effect's `RateLimiter` (persistence) implements its own window algorithms and does not report
 * which of several limits refused a request, which §7 requires; hence this small counter.
 */
import { Context, Effect, Layer } from "effect"
import type { Credential } from "./Auth.ts"
import type { RateLimits, RateLimitsInput } from "./Options.ts"
import { type ApiError, rateLimited } from "./errors.ts"
import { SandboxConfig } from "./Options.ts"
import { iso, SandboxClock } from "./SandboxClock.ts"

export type LimitName = "token" | "company" | "ip"

/** How a co-tenant spends its share of a window: evenly over it, or all of it as it opens. */
export type CotenantSpread = "even" | "start"

interface Bucket {
  windowStart: number
  count: number
  /** The limit the last request it admitted was held to (an address's differs by credential kind). */
  limit?: number
}

export interface BucketState {
  readonly key: string
  readonly limit: number
  /** Requests counted in the window: the callers' and the co-tenants'. */
  readonly used: number
  /** Of `used`, what co-tenants and charges spent. */
  readonly foreign: number
  readonly window_started_at: string
  readonly resets_at: string
}

interface Check {
  readonly name: LimitName
  readonly key: string
  readonly limit: number
}

/**
 * What the limiter holds. Other consumers of the same token, app or address (the firm's other
 * integrations) can be played: a co-tenant spends a steady number of requests per window on a
 * bucket, spread evenly over the window, a one-off charge adds to the current window, and the
 * limits can change while the sandbox runs. Their use counts like the caller's own.
 */
interface LimiterState {
  readonly windowMs: number
  readonly buckets: Map<string, Bucket>
  limits: RateLimits
  readonly cotenants: Map<string, { readonly perWindow: number; readonly spread: CotenantSpread }>
  /** One-off charges, by bucket, for the window that began at `windowStart`. */
  readonly charges: Map<string, { windowStart: number; amount: number }>
}

/** Foreign requests in `key`'s window that began at `windowStart`, as of `now`. */
const foreign = (state: LimiterState, key: string, windowStart: number, now: number) => {
  const cotenant = state.cotenants.get(key)
  const perWindow = cotenant?.perWindow ?? 0
  const elapsed = cotenant?.spread === "start" ? 1 : Math.min(1, Math.max(0, (now - windowStart) / state.windowMs))
  const charged = state.charges.get(key)
  return Math.floor(perWindow * elapsed) + (charged?.windowStart === windowStart ? charged.amount : 0)
}

/** The buckets a request counts against: all three, or only its address when unauthenticated. */
export const checksFor = (limits: RateLimits, credential: Credential | undefined, ip: string): ReadonlyArray<Check> => {
  if (credential === undefined) {
    // an unauthenticated request only has an address to count against
    return [{ name: "ip", key: `ip:${ip}`, limit: limits.personal.ip }]
  }
  if (credential.kind === "personal") {
    return [
      { name: "token", key: `token:${credential.tokenId}`, limit: limits.personal.token },
      { name: "company", key: `company:${credential.company}`, limit: limits.personal.company },
      { name: "ip", key: `ip:${ip}`, limit: limits.personal.ip }
    ]
  }
  return [
    { name: "token", key: `user:${credential.clientId}:${credential.userId}`, limit: limits.oauth.user },
    { name: "company", key: `app:${credential.clientId}:${credential.company}`, limit: limits.oauth.app },
    { name: "ip", key: `ip:${ip}`, limit: limits.oauth.ip }
  ]
}

/** The limit of a bucket, from the prefix of its key. */
/** The limit of a bucket no request has reached yet (a charge), from the prefix of its key. */
export const limitOf = (limits: RateLimits, key: string) =>
  key.startsWith("token:")
    ? limits.personal.token
    : key.startsWith("company:")
      ? limits.personal.company
      : key.startsWith("user:")
        ? limits.oauth.user
        : key.startsWith("app:")
          ? limits.oauth.app
          : limits.personal.ip

const admit = Effect.fn("SandboxRateLimiter.admit")(function* (
  options: SandboxConfig["Service"],
  clock: SandboxClock["Service"],
  state: LimiterState,
  credential: Credential | undefined,
  ip: string
) {
  const now = yield* clock.now
  const current = checksFor(state.limits, credential, ip).map((check) => {
    const bucket = state.buckets.get(check.key)
    // a window begins at the first request after the previous one ended
    const open = bucket !== undefined && now < bucket.windowStart + options.windowMs
    return { check, windowStart: open ? bucket.windowStart : now, count: open ? bucket.count : 0 }
  })
  const full = current
    .filter((entry) => entry.count + foreign(state, entry.check.key, entry.windowStart, now) >= entry.check.limit)
    .toSorted((a, b) => b.windowStart - a.windowStart)
  const commit = () => {
    for (const entry of current) {
      state.buckets.set(entry.check.key, {
        windowStart: entry.windowStart,
        count: entry.count + 1,
        limit: entry.check.limit
      })
    }
  }
  const strictest = full[0]
  if (strictest === undefined) {
    commit()
    return
  }
  if (options.countRejected) commit()
  const resetsAt = strictest.windowStart + options.windowMs
  const retryAfter = Math.max(1, Math.ceil((resetsAt - now) / 1000))
  return yield* rateLimited(
    strictest.check.name,
    retryAfter,
    `${strictest.check.name} rate limit of ${strictest.check.limit} requests per window exceeded; retry after ${retryAfter} s`
  )
})

const charge = Effect.fnUntraced(function* (
  clock: SandboxClock["Service"],
  state: LimiterState,
  bucket: string,
  amount: number
) {
  const now = yield* clock.now
  const held = state.buckets.get(bucket)
  const open = held !== undefined && now < held.windowStart + state.windowMs
  const windowStart = open ? held.windowStart : now
  if (!open)
    state.buckets.set(bucket, { windowStart, count: 0, ...(held?.limit === undefined ? {} : { limit: held.limit }) })
  const charged = state.charges.get(bucket)
  const before = charged?.windowStart === windowStart ? charged.amount : 0
  state.charges.set(bucket, { windowStart, amount: before + amount })
})

const bucketStates = Effect.fnUntraced(function* (clock: SandboxClock["Service"], state: LimiterState) {
  const now = yield* clock.now
  return [...state.buckets.entries()].map(([key, bucket]): BucketState => {
    const open = now < bucket.windowStart + state.windowMs
    const spent = open ? foreign(state, key, bucket.windowStart, now) : 0
    return {
      key,
      limit: bucket.limit ?? limitOf(state.limits, key),
      used: (open ? bucket.count : 0) + spent,
      foreign: spent,
      window_started_at: iso(bucket.windowStart),
      resets_at: iso(bucket.windowStart + state.windowMs)
    }
  })
})

export class SandboxRateLimiter extends Context.Service<
  SandboxRateLimiter,
  {
    /** Counts one request, or fails with 429 naming the exhausted bucket. */
    admit(credential: Credential | undefined, ip: string): Effect.Effect<void, ApiError>
    readonly buckets: Effect.Effect<ReadonlyArray<BucketState>>
    readonly reset: Effect.Effect<void>
    /**
     * A co-tenant spending `perWindow` requests of every window of `bucket` (0 removes it): evenly
     * over the window, or all of it as the window opens (`start`).
     */
    setCotenant(bucket: string, perWindow: number, spread?: CotenantSpread): Effect.Effect<void>
    /** Charges `amount` foreign requests to the current window of `bucket` (opening one if none). */
    charge(bucket: string, amount: number): Effect.Effect<void>
    /** Changes limits while running; returns the limits now in force. */
    setLimits(patch: RateLimitsInput): Effect.Effect<RateLimits>
  }
>()("crm-sync/sandbox/SandboxRateLimiter") {
  static readonly layer = Layer.effect(
    SandboxRateLimiter,
    Effect.gen(function* () {
      const options = yield* SandboxConfig
      const clock = yield* SandboxClock
      const state: LimiterState = {
        windowMs: options.windowMs,
        buckets: new Map(),
        limits: options.limits,
        cotenants: new Map(),
        charges: new Map()
      }
      return SandboxRateLimiter.of({
        admit: (credential, ip) => admit(options, clock, state, credential, ip),
        setCotenant: (bucket, perWindow, spread = "even") =>
          Effect.sync(() => {
            if (perWindow <= 0) state.cotenants.delete(bucket)
            else state.cotenants.set(bucket, { perWindow, spread })
          }),
        charge: (bucket, amount) => charge(clock, state, bucket, amount),
        setLimits: (patch) =>
          Effect.sync(() => {
            state.limits = {
              personal: { ...state.limits.personal, ...patch.personal },
              oauth: { ...state.limits.oauth, ...patch.oauth }
            }
            return state.limits
          }),
        buckets: bucketStates(clock, state),
        reset: Effect.sync(() => {
          state.buckets.clear()
          state.cotenants.clear()
          state.charges.clear()
          state.limits = options.limits
        })
      })
    })
  )
}
