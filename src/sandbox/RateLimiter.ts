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
import { type ApiError, rateLimited } from "./errors.ts"
import { SandboxConfig } from "./Options.ts"
import { iso, SandboxClock } from "./SandboxClock.ts"

export type LimitName = "token" | "company" | "ip"

interface Bucket {
  windowStart: number
  count: number
}

export interface BucketState {
  readonly key: string
  readonly limit: number
  readonly used: number
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
  }
>()("crm-sync/sandbox/SandboxRateLimiter") {
  static readonly layer = Layer.effect(
    SandboxRateLimiter,
    Effect.gen(function* () {
      const options = yield* SandboxConfig
      const clock = yield* SandboxClock
      const buckets = new Map<string, Bucket>()
      const limits = options.limits

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
          .filter((state) => state.count >= state.check.limit)
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

      return SandboxRateLimiter.of({
        admit,
        buckets: Effect.sync(() =>
          [...buckets.entries()].map(([key, bucket]) => {
            const limit = key.startsWith("token:")
              ? limits.personal.token
              : key.startsWith("company:")
                ? limits.personal.company
                : key.startsWith("user:")
                  ? limits.oauth.user
                  : key.startsWith("app:")
                    ? limits.oauth.app
                    : limits.personal.ip
            return {
              key,
              limit,
              used: bucket.count,
              window_started_at: iso(bucket.windowStart),
              resets_at: iso(bucket.windowStart + options.windowMs)
            }
          })
        ),
        reset: Effect.sync(() => buckets.clear())
      })
    })
  )
}
