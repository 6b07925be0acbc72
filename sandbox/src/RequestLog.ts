/**
 * Every request the sandbox served on `/v1` and `/oauth` (the admin API is not logged): method,
 * path, matched route, query, headers (the bearer token shortened), `Idempotency-Key`, request
 * body, status (null when the connection was reset before an answer), time, duration, the caller
 * and the faults applied. A ring of `logSize` entries; tests assert on it through `testing.ts`.
 */
import { Context, Effect, Layer } from "effect"
import { SandboxConfig } from "./Options.ts"

export interface RequestLogEntry {
  readonly seq: number
  readonly at: string
  readonly method: string
  readonly path: string
  /** The route pattern that matched, e.g. `/v1/meetings/:id`; null when none did. */
  readonly route: string | null
  readonly query: Readonly<Record<string, string>>
  readonly headers: Readonly<Record<string, string>>
  readonly idempotency_key: string | null
  readonly body: string | null
  readonly ip: string
  readonly status: number | null
  readonly duration_ms: number
  readonly credential: {
    readonly kind: "personal" | "oauth"
    readonly user_id: string
    readonly company_id: string
    readonly client_id: string | null
  } | null
  readonly faults: ReadonlyArray<string>
  readonly rate_limited: string | null
  readonly idempotent_replay: boolean
}

export interface RequestFilter {
  readonly method?: string | undefined
  /** Exact path, or a pattern with `*` wildcards (`/v1/businesses*`). */
  readonly path?: string | undefined
  readonly route?: string | undefined
  readonly status?: number | undefined
  /** Only entries with `seq` greater than this. */
  readonly since?: number | undefined
}

/** `*` matches any run of characters; everything else is literal. */
export const globMatches = (pattern: string, value: string): boolean => {
  if (!pattern.includes("*")) return pattern === value
  const source = pattern
    .split("*")
    .map((part) => part.replace(/[.+?^${}()|[\]\\]/g, "\\$&"))
    .join(".*")
  return new RegExp(`^${source}$`).test(value)
}

export const matchesFilter = (entry: RequestLogEntry, filter: RequestFilter): boolean =>
  (filter.method === undefined || entry.method === filter.method.toUpperCase()) &&
  (filter.path === undefined || globMatches(filter.path, entry.path)) &&
  (filter.route === undefined || entry.route === filter.route) &&
  (filter.status === undefined || entry.status === filter.status) &&
  (filter.since === undefined || entry.seq > filter.since)

export class SandboxRequestLog extends Context.Service<
  SandboxRequestLog,
  {
    append(entry: Omit<RequestLogEntry, "seq">): Effect.Effect<void>
    entries(filter?: RequestFilter): Effect.Effect<ReadonlyArray<RequestLogEntry>>
    /** The `seq` of the latest entry (0 when empty): a cursor for "requests after this point". */
    readonly lastSeq: Effect.Effect<number>
    readonly clear: Effect.Effect<void>
  }
>()("crm-sync/sandbox/SandboxRequestLog") {
  static readonly layer = Layer.effect(
    SandboxRequestLog,
    Effect.gen(function* () {
      const { logSize } = yield* SandboxConfig
      let entries: Array<RequestLogEntry> = []
      let seq = 0
      return SandboxRequestLog.of({
        append: (entry) =>
          Effect.sync(() => {
            entries.push({ seq: ++seq, ...entry })
            if (entries.length > logSize * 1.25) entries = entries.slice(entries.length - logSize)
          }),
        entries: (filter = {}) =>
          Effect.sync(() => entries.slice(-logSize).filter((entry) => matchesFilter(entry, filter))),
        lastSeq: Effect.sync(() => seq),
        clear: Effect.sync(() => {
          entries = []
        })
      })
    })
  )
}
