/**
 * Every request the sandbox served on `/v1` and `/oauth` (the admin API is not logged): method,
 * path, matched route, query, headers (the bearer token shortened), `Idempotency-Key`, request
 * body, status (null when the connection was reset before an answer), time, duration, the caller,
 * the faults applied, the `X-Request-Id` answered and (option `recordServed`) the records a listing
 * served. A ring of `logSize` entries; tests assert on it through `testing.ts`. Served records are
 * kept as their id and a content number: each distinct content (key-sorted JSON) is held once, so
 * a crawl that reads the same page again adds a few numbers, not the page.
 */
import { Context, Effect, Layer } from "effect"
import { canonicalJson } from "./Http.ts"
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
  /** The `X-Request-Id` of the answer (none for a reset or a non-JSON fault's answer). */
  readonly request_id: string | null
  /**
   * Option `recordServed`: the records a 2xx listing of a history resource served whole (not
   * truncated), as `[id, content]`, `content` indexing `servedContents`; null otherwise.
   */
  readonly served: { readonly resource: string; readonly records: ReadonlyArray<readonly [string, number]> } | null
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
    /** The number of a record's content (its key-sorted JSON), the same for the same content. */
    contentOf(record: unknown): number
    /** Every content numbered so far, as JSON text, by number. */
    readonly servedContents: Effect.Effect<ReadonlyArray<string>>
  }
>()("crm-sync/sandbox/SandboxRequestLog") {
  static readonly layer = Layer.effect(
    SandboxRequestLog,
    Effect.gen(function* () {
      const { logSize } = yield* SandboxConfig
      let entries: Array<RequestLogEntry> = []
      let seq = 0
      const contents: Array<string> = []
      const numbers = new Map<string, number>()
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
        }),
        contentOf: (record) => {
          const text = canonicalJson(record)
          let number = numbers.get(text)
          if (number === undefined) {
            number = contents.push(text) - 1
            numbers.set(text, number)
          }
          return number
        },
        servedContents: Effect.sync(() => contents.slice())
      })
    })
  )
}
