/**
 * What the rate budget answers besides a permit: a bucket's state as `status` reports it, the
 * answer of `tryAcquire`, and which buckets a 429 names. Types only; RateBudget re-exports them.
 */
import type * as DateTime from "effect/DateTime"
import type * as Duration from "effect/Duration"
import type { BucketScope, WaitReason } from "./Windows.ts"

/** A bucket as `status` reports it (and `crm-sync status --json` prints it). */
export interface BucketStatus {
  readonly bucket: string
  readonly scope: BucketScope
  readonly limit: number
  /** Requests counted in the current window (0 once it has ended). */
  readonly used: number
  readonly window: Duration.Duration
  /** Start of the current window, if one is running. */
  readonly windowStart: DateTime.Utc | undefined
  /** When the current window ends and a fresh one may begin (plus the safety margin). */
  readonly resetsAt: DateTime.Utc | undefined
  /** Set by a 429: no request is sent on this bucket before then. */
  readonly blockedUntil: DateTime.Utc | undefined
  /** The ceiling learned from 429s below `limit` (other consumers' use), while it holds. */
  readonly learnedLimit: number | undefined
}

/** The answer of `tryAcquire`. */
export type TryAcquire =
  | { readonly granted: true }
  | {
      readonly granted: false
      readonly retryIn: Duration.Duration
      readonly bucket: string
      readonly reason: WaitReason
    }

/** Which of a request's buckets a 429 names; `unknown` blocks all of them (the safe reading). */
export type ExhaustedLimit = BucketScope | "unknown"
