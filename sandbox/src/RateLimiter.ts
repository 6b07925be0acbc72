/**
 * The three request buckets of spec §8: per token (personal) or per app user (OAuth), per company
 * (personal) or per app and company (OAuth), and per client IP. Each is a fixed window that opens
 * at the bucket's first request and lasts `window`; a request must fit in all three, and when
 * more than one is full the one that frees up last is named (it decides when a retry can pass).
 * Effect's `RateLimiter` (persistence) implements its own window algorithms and does not report
 * which of several limits refused a request, which §7 requires; hence this small counter.
 *
 * Other consumers of the same token, app or address (the firm's other integrations) can be played:
 * a co-tenant spends a steady number of requests per window on a bucket, spread evenly over the
 * window (`setCotenant`), a one-off charge adds to the current window (`charge`), and the limits
 * can change while the sandbox runs (`setLimits`). Their use counts like the caller's own.
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
      const buckets = new Map<string, Bucket>()
      let limits: RateLimits = options.limits
      const cotenants = new Map<string, { readonly perWindow: number; readonly spread: CotenantSpread }>()
      /** One-off charges, by bucket, for the window that began at `windowStart`. */
      const charges = new Map<string, { windowStart: number; amount: number }>()

      /** Foreign requests in `key`'s window that began at `windowStart`, as of `now`. */
      const foreign = (key: string, windowStart: number, now: number) => {
        const cotenant = cotenants.get(key)
        const perWindow = cotenant?.perWindow ?? 0
        const elapsed =
          cotenant?.spread === "start" ? 1 : Math.min(1, Math.max(0, (now - windowStart) / options.windowMs))
        const charged = charges.get(key)
        return Math.floor(perWindow * elapsed) + (charged?.windowStart === windowStart ? charged.amount : 0)
      }

      const checksFor = (credential: Credential | undefined, ip: string): ReadonlyArray<Check> => {
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

      const admit = Effect.fn("SandboxRateLimiter.admit")(function* (credential: Credential | undefined, ip: string) {
        const now = yield* clock.now
        const checks = checksFor(credential, ip)
        const current = checks.map((check) => {
          const bucket = buckets.get(check.key)
          // a window begins at the first request after the previous one ended
          const open = bucket !== undefined && now < bucket.windowStart + options.windowMs
          return { check, windowStart: open ? bucket.windowStart : now, count: open ? bucket.count : 0 }
        })
        const full = current
          .filter((state) => state.count + foreign(state.check.key, state.windowStart, now) >= state.check.limit)
          .toSorted((a, b) => b.windowStart - a.windowStart)
        const commit = () => {
          for (const state of current) {
            buckets.set(state.check.key, { windowStart: state.windowStart, count: state.count + 1 })
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

      const limitOf = (key: string) =>
        key.startsWith("token:")
          ? limits.personal.token
          : key.startsWith("company:")
            ? limits.personal.company
            : key.startsWith("user:")
              ? limits.oauth.user
              : key.startsWith("app:")
                ? limits.oauth.app
                : limits.personal.ip

      return SandboxRateLimiter.of({
        admit,
        setCotenant: (bucket, perWindow, spread = "even") =>
          Effect.sync(() => {
            if (perWindow <= 0) cotenants.delete(bucket)
            else cotenants.set(bucket, { perWindow, spread })
          }),
        charge: (bucket, amount) =>
          Effect.gen(function* () {
            const now = yield* clock.now
            const held = buckets.get(bucket)
            const open = held !== undefined && now < held.windowStart + options.windowMs
            const windowStart = open ? held.windowStart : now
            if (!open) buckets.set(bucket, { windowStart, count: 0 })
            const charged = charges.get(bucket)
            const before = charged?.windowStart === windowStart ? charged.amount : 0
            charges.set(bucket, { windowStart, amount: before + amount })
          }),
        setLimits: (patch) =>
          Effect.sync(() => {
            limits = {
              personal: { ...limits.personal, ...patch.personal },
              oauth: { ...limits.oauth, ...patch.oauth }
            }
            return limits
          }),
        buckets: Effect.gen(function* () {
          const now = yield* clock.now
          return [...buckets.entries()].map(([key, bucket]) => {
            const open = now < bucket.windowStart + options.windowMs
            const spent = open ? foreign(key, bucket.windowStart, now) : 0
            return {
              key,
              limit: limitOf(key),
              used: (open ? bucket.count : 0) + spent,
              foreign: spent,
              window_started_at: iso(bucket.windowStart),
              resets_at: iso(bucket.windowStart + options.windowMs)
            }
          })
        }),
        reset: Effect.sync(() => {
          buckets.clear()
          cotenants.clear()
          charges.clear()
          limits = options.limits
        })
      })
    })
  )
}
