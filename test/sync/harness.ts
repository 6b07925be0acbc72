/**
 * Shared pieces of the read-sync tests: an in-process sandbox, a config with one connection to it,
 * the real client stack (credentials, shared budget, HTTP), the warehouse and the sync services on
 * a fresh migrated database; plus readers of the sandbox's own listings (the truth the warehouse
 * is compared with) and of its request log.
 */
import { Effect, Layer } from "effect"
import { FetchHttpClient } from "effect/http"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { RateBudget } from "../../src/budget/RateBudget.ts"
import { CrmClient } from "../../src/crm/CrmClient.ts"
import { Credentials } from "../../src/crm/Credentials.ts"
import type { RequestLogEntry } from "@crm-sync/sandbox"
import { Sandbox } from "@crm-sync/sandbox"
import type { SandboxOptions } from "@crm-sync/sandbox"
import { SyncServicesLive } from "../../src/sync/SyncJobs.ts"
import { Warehouse } from "../../src/warehouse/Warehouse.ts"
import { TestDatabase } from "../support/TestDatabase.ts"

/** Limits high enough that no test waits on the budget (the tests count requests, not pace). */
export const unthrottled = { token: 1_000_000, company: 1_000_000, ip: 1_000_000 }

export interface HarnessOptions {
  readonly sandbox?: SandboxOptions
  /** Extra AppConfig keys (e.g. `sync`, `schedules`). */
  readonly config?: Record<string, unknown>
  /** The connection's `limits` (default: unthrottled). */
  readonly limits?: Record<string, unknown>
  /** More connections to the same sandbox and token, by name (two connections to one company). */
  readonly alsoConnections?: ReadonlyArray<string>
}

/** The config of a connection `default` to the sandbox (and of `alsoConnections`, if any). */
export const sandboxConfig = (options: HarnessOptions = {}) =>
  Layer.unwrap(
    Effect.map(Sandbox, (sandbox) =>
      AppConfig.layerFrom({
        connections: ["default", ...(options.alsoConnections ?? [])].map((name) => ({
          name,
          base_url: sandbox.baseUrl,
          credential: "personal",
          token: sandbox.credentials.personalAccessToken,
          limits: options.limits ?? unthrottled
        })),
        ...options.config
      })
    )
  )

/** Sandbox, database, config, client stack, warehouse and sync services: what a sync test needs. */
export const harness = (options: HarnessOptions = {}) => {
  const sandbox = Sandbox.layer({
    seed: 11,
    records: 1000,
    limits: { personal: unthrottled, oauth: { user: 1_000_000, app: 1_000_000, ip: 1_000_000 } },
    ...options.sandbox
  })
  const config = sandboxConfig(options).pipe(Layer.provideMerge(sandbox))
  const clientStack = Layer.mergeAll(RateBudget.layer, Credentials.layer).pipe(
    Layer.provideMerge(FetchHttpClient.layer)
  )
  return SyncServicesLive.pipe(
    Layer.provideMerge(Warehouse.layer),
    Layer.provideMerge(clientStack),
    Layer.provideMerge(config),
    Layer.provideMerge(TestDatabase)
  )
}

/** The client of the `default` connection. */
export const client = CrmClient.make("default").pipe(Effect.orDie)

/** Every record of a list endpoint, as the sandbox's API returns it (read directly, not through crm-sync). */
export const listAll = Effect.fnUntraced(function* (path: string, query: Record<string, string> = {}) {
  const sandbox = yield* Sandbox
  const records: Array<Record<string, unknown>> = []
  for (let page = 1; ; page++) {
    const url = new URL(`${sandbox.baseUrl}${path}`)
    for (const [key, value] of Object.entries({ ...query, page: String(page), per_page: "100" })) {
      url.searchParams.set(key, value)
    }
    const body = yield* Effect.promise(() =>
      fetch(url, { headers: { authorization: `Bearer ${sandbox.credentials.personalAccessToken}` } }).then(
        (response) =>
          response.json() as Promise<{ data: Array<Record<string, unknown>>; pagination: { total_pages: number } }>
      )
    )
    records.push(...body.data)
    if (body.data.length === 0 || page >= body.pagination.total_pages) return records
  }
})

/** `GET /v1/me` straight from the sandbox. */
export const sandboxMe = Effect.gen(function* () {
  const sandbox = yield* Sandbox
  return yield* Effect.promise(() =>
    fetch(`${sandbox.baseUrl}/v1/me`, {
      headers: { authorization: `Bearer ${sandbox.credentials.personalAccessToken}` }
    }).then((response) => response.json() as Promise<Record<string, unknown>>)
  )
})

/** The sandbox's `/v1` requests after `since` (a `lastRequestSeq`), optionally of one path. */
export const requestsSince = Effect.fnUntraced(function* (since: number, path?: string) {
  const sandbox = yield* Sandbox
  const entries = yield* sandbox.admin.requests({ since, ...(path === undefined ? {} : { path }) })
  return entries.filter((entry: RequestLogEntry) => entry.path.startsWith("/v1/"))
})

export const lastSeq = Effect.flatMap(Sandbox, (sandbox) => sandbox.admin.lastRequestSeq)

/**
 * The pages of a path the sandbox served, ascending (a crawl keeps a few requests in flight, and
 * the log is in order of completion); a page asked twice appears twice.
 */
export const pagesAsked = (entries: ReadonlyArray<RequestLogEntry>, path: string) =>
  entries
    .filter((entry) => entry.path === path)
    .map((entry) => Number(entry.query.page ?? "1"))
    .toSorted((a, b) => a - b)
