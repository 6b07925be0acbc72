/**
 * Which three buckets of spec §8 a connection's requests draw on, and their limits.
 *
 * - token/user: a personal token's own, one per connection; an OAuth grant's user's, shared by
 *   every connection of that user through the same app (spec §8 counts an app's requests per
 *   user, and one user connects once per company, §5.4) once `connect` has recorded the user,
 *   else the connection's own;
 * - company/app: shared by every connection with the same `company_bucket` label (default: the
 *   OAuth client id, since an app's limit is the app's, else the connection name);
 * - IP: shared by every connection with the same `egress` label (connections leaving through the
 *   same address), whatever their credential kind.
 *
 * Limits come from spec §8 by credential kind, overridden per connection by `limits.*`; the window
 * is an hour unless `limits.window` shortens it (the sandbox's `--window`).
 */
import * as Duration from "effect/Duration"
import type { Connection, CredentialKind } from "../config/AppConfig.ts"
import type { BucketScope, BucketSpec } from "./Windows.ts"

/** Spec §8, requests per window. */
export const defaultLimits: Record<CredentialKind, Record<BucketScope, number>> = {
  personal: { token: 1_000, company: 10_000, ip: 10_000 },
  oauth: { token: 500, company: 1_000, ip: 10_000 }
}

/** Spec §8: "each bucket uses a fixed one-hour window". */
export const defaultWindow = Duration.hours(1)

export const bucketKey = (scope: BucketScope, label: string): string => `${scope}:${label}`

/**
 * The connection's three buckets, in key order (the order their rows are locked in). `userId` is
 * the CRM user of an OAuth grant, when known.
 */
export const bucketsFor = (
  connection: Connection,
  options?: { readonly userId?: string | undefined }
): ReadonlyArray<BucketSpec> => {
  const limits = defaultLimits[connection.credential]
  const tokenLabel =
    connection.credential === "oauth" && connection.oauth !== undefined && options?.userId !== undefined
      ? `oauth:${connection.oauth.client_id}:${options.userId}`
      : connection.name
  const windowMs = Duration.toMillis(connection.limits.window ?? defaultWindow)
  const companyLabel = connection.company_bucket ?? connection.oauth?.client_id ?? connection.name
  const buckets: Array<BucketSpec> = [
    {
      key: bucketKey("token", tokenLabel),
      scope: "token",
      limit: connection.limits.token ?? limits.token,
      windowMs
    },
    {
      key: bucketKey("company", companyLabel),
      scope: "company",
      limit: connection.limits.company ?? limits.company,
      windowMs
    },
    { key: bucketKey("ip", connection.egress), scope: "ip", limit: connection.limits.ip ?? limits.ip, windowMs }
  ]
  return buckets.toSorted((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
}

/** The strictest of a set of buckets: the one with the lowest limit (ties: the first). */
export const strictest = (buckets: ReadonlyArray<BucketSpec>): BucketSpec =>
  buckets.reduce((best, bucket) => (bucket.limit < best.limit ? bucket : best))
