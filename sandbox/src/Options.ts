/**
 * The sandbox's options: what `Sandbox.layer(options)` and `crm-sync sandbox` accept, their
 * defaults (the spec's values where it gives them, documented choices where it is silent), and
 * their resolution into plain milliseconds, exposed to the other sandbox services as the
 * `SandboxConfig` service.
 */
import { Context, Duration, Effect, Option, Schema } from "effect"
import { type DurationInput, parseDuration } from "./Durations.ts"

export type WebhookHeaderPrefix = "hook" | "webhook" | "svix"

/** Requests per window for each bucket of spec §8, by credential kind. */
export interface RateLimits {
  readonly personal: { readonly token: number; readonly company: number; readonly ip: number }
  readonly oauth: { readonly user: number; readonly app: number; readonly ip: number }
}

export interface RateLimitsInput {
  readonly personal?: Partial<RateLimits["personal"]>
  readonly oauth?: Partial<RateLimits["oauth"]>
}

/** A duration: Effect's `Duration.Input`, or a short form such as `500ms`, `10s`, `5m`, `1h`, `2d`. */

export interface SandboxOptions {
  /** TCP port; 0 (default) picks a free port. */
  readonly port?: number
  /** Interface to listen on (default 127.0.0.1). */
  readonly host?: string
  /** Approximate number of generated CRM records across all kinds (default 1000). */
  readonly records?: number
  /** PRNG seed: the same seed gives the same data and the same fault decisions (default 1). */
  readonly seed?: number
  /** Length of every rate-limit window (spec §8: one hour). */
  readonly window?: DurationInput
  /** Per-window request limits (spec §8 defaults). */
  readonly limits?: RateLimitsInput
  /** Whether a request rejected with 429 still counts against its buckets (default false). */
  readonly countRejected?: boolean
  /** Header prefix of webhook deliveries: `hook-id`, `webhook-id` or `svix-id` (default "hook"). */
  readonly webhookHeaderPrefix?: WebhookHeaderPrefix
  /** Debounce window of `client.updated` (spec §8: 60 seconds). */
  readonly debounce?: DurationInput
  /** Lifetime of an Idempotency-Key (spec §4 rule 6: 1 hour). */
  readonly idempotencyTtl?: DurationInput
  /** OAuth access-token lifetime (default 2 hours). */
  readonly accessTokenTtl?: DurationInput
  /** OAuth refresh-token lifetime (default 30 days). */
  readonly refreshTokenTtl?: DurationInput
  /** OAuth authorization-code lifetime (default 10 minutes). */
  readonly authorizationCodeTtl?: DurationInput
  /** Revoke the whole token family when a rotated refresh token is reused (default false). */
  readonly revokeRefreshFamilyOnReuse?: boolean
  /** Delays between delivery attempts after a failed one; its length + 1 is the attempt count. */
  readonly webhookRetrySchedule?: ReadonlyArray<DurationInput>
  /** Timeout of one delivery attempt (default 15 seconds). */
  readonly webhookTimeout?: DurationInput
  /** Delay between an event's submission and the preparation of its snapshot (default 0). */
  readonly webhookPrepareDelay?: DurationInput
  /** How long a reordered delivery waits for the next one before going anyway (default 2 seconds). */
  readonly webhookReorderHold?: DurationInput
  /** When set, the admin API requires `Authorization: Bearer <adminToken>`. */
  readonly adminToken?: string
  /**
   * How far the CRM's own clock runs ahead of the machine's (default 0): every timestamp the
   * sandbox writes and the time it signs deliveries with. A leading `-` puts it behind (`-90s`);
   * a number is milliseconds.
   */
  readonly clockSkew?: DurationInput
  /** Entries kept in the request log and in the delivery log (default 10000 each). */
  readonly logSize?: number
  /** Header that overrides the client IP for the IP bucket; `false` disables it. */
  readonly clientIpHeader?: string | false
  /** Number of companies (default 3; the first is the partner's own company). */
  readonly companies?: number
  /** Books per company (default 3). */
  readonly booksPerCompany?: number
  /** Users per company (default 4). */
  readonly usersPerCompany?: number
  /**
   * Records per company (a partner's firms): when set, `records` is `companies × recordsPerCompany`
   * spread evenly over every company instead of 90% in the first, with at least one record of
   * each kind in every book (instead of four on average).
   */
  readonly recordsPerCompany?: number
  /**
   * Share of its company's books each user is a member of, from 0 to 1: user `u` of a company
   * sees `max(1, round(overlap × booksPerCompany))` consecutive books from book `u mod
   * booksPerCompany` (wrapping). 1: every user sees every book; 0: one book each. Unset: the
   * default world's layout (the first user in every book, the others in one or two).
   */
  readonly overlap?: number
  /**
   * One read-only personal access token per user and company, derived from the seed (the same on
   * every start and after a reset), labelled `user token` (default false).
   */
  readonly userTokens?: boolean
  /**
   * Record in each request-log entry which records a 2xx listing of businesses, annuity contracts
   * or financial accounts served, each as its id and a content number (`servedContents` holds
   * each distinct content once; default false).
   */
  readonly recordServed?: boolean
}

export interface ResolvedOptions {
  readonly port: number
  readonly host: string
  readonly records: number
  readonly seed: number
  readonly windowMs: number
  readonly limits: RateLimits
  readonly countRejected: boolean
  readonly webhookHeaderPrefix: WebhookHeaderPrefix
  readonly debounceMs: number
  readonly idempotencyTtlMs: number
  readonly accessTokenTtlMs: number
  readonly refreshTokenTtlMs: number
  readonly authorizationCodeTtlMs: number
  readonly revokeRefreshFamilyOnReuse: boolean
  readonly webhookRetryScheduleMs: ReadonlyArray<number>
  readonly webhookTimeoutMs: number
  readonly webhookPrepareDelayMs: number
  readonly webhookReorderHoldMs: number
  readonly adminToken: string | undefined
  readonly clockSkewMs: number
  readonly logSize: number
  readonly clientIpHeader: string | undefined
  readonly companies: number
  readonly booksPerCompany: number
  readonly usersPerCompany: number
  /** Set when records are spread evenly over the companies (`records` is then their total). */
  readonly recordsPerCompany: number | undefined
  readonly overlap: number | undefined
  readonly userTokens: boolean
  readonly recordServed: boolean
}

export const defaultLimits: RateLimits = {
  personal: { token: 1000, company: 10000, ip: 10000 },
  oauth: { user: 500, app: 1000, ip: 10000 }
}

/** Svix's published schedule, minus the immediate first attempt. */
export const defaultRetrySchedule: ReadonlyArray<DurationInput> = [
  "5 seconds",
  "5 minutes",
  "30 minutes",
  "2 hours",
  "5 hours",
  "10 hours",
  "10 hours"
]

/** An invalid sandbox option: programmer input, reported once when the layer is built. */
export class SandboxOptionsError extends Schema.TaggedError<SandboxOptionsError>()("SandboxOptionsError", {
  option: Schema.String,
  message: Schema.String
}) {}

const millisOf = Effect.fnUntraced(function* (
  input: DurationInput | undefined,
  fallback: DurationInput,
  option: string
): Effect.fn.Return<number, SandboxOptionsError> {
  const parsed = parseDuration(input ?? fallback)
  if (Option.isNone(parsed)) {
    return yield* new SandboxOptionsError({ option, message: `invalid duration ${String(input)}` })
  }
  return Duration.toMillis(parsed.value)
})

const integerOf = Effect.fnUntraced(function* (
  value: number | undefined,
  fallback: number,
  option: string,
  min = 1
): Effect.fn.Return<number, SandboxOptionsError> {
  const result = value ?? fallback
  if (!Number.isInteger(result) || result < min) {
    return yield* new SandboxOptionsError({ option, message: `expected an integer >= ${min}, got ${String(value)}` })
  }
  return result
})

/** A signed duration: `-90s` is 90 seconds behind; a number is milliseconds, negative or not. */
const signedMillisOf = Effect.fnUntraced(function* (input: DurationInput | undefined, option: string) {
  if (typeof input === "number") {
    if (!Number.isFinite(input)) {
      return yield* new SandboxOptionsError({ option, message: `invalid duration ${String(input)}` })
    }
    return Math.trunc(input)
  }
  if (typeof input === "string" && input.trim().startsWith("-")) {
    return -(yield* millisOf(input.trim().slice(1), 0, option))
  }
  return yield* millisOf(input, 0, option)
})

const overlapOf = Effect.fnUntraced(function* (value: number | undefined) {
  if (value !== undefined && !(value >= 0 && value <= 1)) {
    return yield* new SandboxOptionsError({ option: "overlap", message: `expected 0 to 1, got ${String(value)}` })
  }
  return value
})

/** Applies the defaults and checks every option. */
export const resolveOptions = Effect.fn("SandboxOptions.resolve")(function* (options: SandboxOptions = {}) {
  const retrySchedule: Array<number> = []
  for (const [i, delay] of (options.webhookRetrySchedule ?? defaultRetrySchedule).entries()) {
    retrySchedule.push(yield* millisOf(delay, delay, `webhookRetrySchedule[${i}]`))
  }
  const companies = yield* integerOf(options.companies, 3, "companies")
  const recordsPerCompany =
    options.recordsPerCompany === undefined
      ? undefined
      : yield* integerOf(options.recordsPerCompany, 0, "recordsPerCompany")
  const resolved: ResolvedOptions = {
    port: yield* integerOf(options.port, 0, "port", 0),
    host: options.host ?? "127.0.0.1",
    records:
      recordsPerCompany === undefined
        ? yield* integerOf(options.records, 1000, "records")
        : companies * recordsPerCompany,
    seed: yield* integerOf(options.seed, 1, "seed", 0),
    windowMs: yield* millisOf(options.window, "1 hour", "window"),
    limits: {
      personal: { ...defaultLimits.personal, ...options.limits?.personal },
      oauth: { ...defaultLimits.oauth, ...options.limits?.oauth }
    },
    countRejected: options.countRejected ?? false,
    webhookHeaderPrefix: options.webhookHeaderPrefix ?? "hook",
    debounceMs: yield* millisOf(options.debounce, "60 seconds", "debounce"),
    idempotencyTtlMs: yield* millisOf(options.idempotencyTtl, "1 hour", "idempotencyTtl"),
    accessTokenTtlMs: yield* millisOf(options.accessTokenTtl, "2 hours", "accessTokenTtl"),
    refreshTokenTtlMs: yield* millisOf(options.refreshTokenTtl, "30 days", "refreshTokenTtl"),
    authorizationCodeTtlMs: yield* millisOf(options.authorizationCodeTtl, "10 minutes", "authorizationCodeTtl"),
    revokeRefreshFamilyOnReuse: options.revokeRefreshFamilyOnReuse ?? false,
    webhookRetryScheduleMs: retrySchedule,
    webhookTimeoutMs: yield* millisOf(options.webhookTimeout, "15 seconds", "webhookTimeout"),
    webhookPrepareDelayMs: yield* millisOf(options.webhookPrepareDelay, 0, "webhookPrepareDelay"),
    webhookReorderHoldMs: yield* millisOf(options.webhookReorderHold, "2 seconds", "webhookReorderHold"),
    adminToken: options.adminToken,
    clockSkewMs: yield* signedMillisOf(options.clockSkew, "clockSkew"),
    logSize: yield* integerOf(options.logSize, 10_000, "logSize"),
    clientIpHeader:
      options.clientIpHeader === false ? undefined : (options.clientIpHeader ?? "x-sandbox-client-ip").toLowerCase(),
    companies,
    booksPerCompany: yield* integerOf(options.booksPerCompany, 3, "booksPerCompany"),
    usersPerCompany: yield* integerOf(options.usersPerCompany, 4, "usersPerCompany", 2),
    recordsPerCompany,
    overlap: yield* overlapOf(options.overlap),
    userTokens: options.userTokens ?? false,
    recordServed: options.recordServed ?? false
  }
  return resolved
})

/** The resolved options, as a service for the sandbox's internals. */
export class SandboxConfig extends Context.Service<SandboxConfig, ResolvedOptions>()(
  "crm-sync/sandbox/SandboxConfig"
) {}
