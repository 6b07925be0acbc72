/**
 * `Idempotency-Key` of spec §4 rule 6. A key is scoped to the caller (company and user) and to the
 * request path, and lives `idempotencyTtl` (1 hour by default) from its first use. A repeat with
 * the same body (compared as key-sorted JSON, so key order does not matter) gets the first
 * response back, status and body, with `Idempotent-Replayed: true`; a repeat with another body is
 * refused with 422 `idempotency_key_reused`; a repeat while the first is still running gets 409
 * `idempotency_key_in_use`. Responses with a 5xx status are never cached, so a retry after a
 * server error runs again. 4xx responses produced by the handler (validation) are cached.
 */
import { Context, Effect, Exit, Layer, Result } from "effect"
import { ApiError, conflict } from "./errors.ts"
import { type ApiResponse, fromError } from "./Http.ts"
import { SandboxConfig } from "./Options.ts"
import { SandboxClock } from "./SandboxClock.ts"

interface Entry {
  readonly fingerprint: string
  readonly createdAt: number
  response: ApiResponse | undefined
}

export interface IdempotencyRequest {
  /** Who is asking: keys of different callers never collide. */
  readonly scope: string
  readonly path: string
  readonly key: string
  /** Canonical form of the request body. */
  readonly fingerprint: string
}

export class SandboxIdempotency extends Context.Service<
  SandboxIdempotency,
  {
    run<R>(
      request: IdempotencyRequest,
      handler: Effect.Effect<ApiResponse, ApiError, R>
    ): Effect.Effect<{ readonly response: ApiResponse; readonly replayed: boolean }, ApiError, R>
    readonly size: Effect.Effect<number>
    readonly reset: Effect.Effect<void>
  }
>()("crm-sync/sandbox/SandboxIdempotency") {
  static readonly layer = Layer.effect(
    SandboxIdempotency,
    Effect.gen(function* () {
      const options = yield* SandboxConfig
      const clock = yield* SandboxClock
      const entries = new Map<string, Entry>()
      let inserts = 0
      /** Drops expired keys now and then, so a long run does not keep every key ever used. */
      const sweep = (now: number) => {
        for (const [id, entry] of entries) {
          if (entry.response !== undefined && now >= entry.createdAt + options.idempotencyTtlMs) entries.delete(id)
        }
      }

      const run = <R>(request: IdempotencyRequest, handler: Effect.Effect<ApiResponse, ApiError, R>) =>
        Effect.gen(function* () {
          const now = yield* clock.now
          const id = `${request.scope}\u0000${request.path}\u0000${request.key}`
          const existing = entries.get(id)
          if (existing !== undefined && now < existing.createdAt + options.idempotencyTtlMs) {
            if (existing.fingerprint !== request.fingerprint) {
              return yield* new ApiError({
                status: 422,
                error: "idempotency_key_reused",
                detail: `Idempotency-Key "${request.key}" was already used on ${request.path} with a different body`
              })
            }
            if (existing.response === undefined) {
              return yield* conflict(
                "idempotency_key_in_use",
                `a request with Idempotency-Key "${request.key}" is still being processed`
              )
            }
            return { response: existing.response, replayed: true }
          }
          const entry: Entry = { fingerprint: request.fingerprint, createdAt: now, response: undefined }
          entries.set(id, entry)
          if (++inserts % 1000 === 0) sweep(now)
          const result = yield* handler.pipe(
            Effect.result,
            // a defect or an interruption leaves nothing to replay
            Effect.onExit((exit) => (Exit.isSuccess(exit) ? Effect.void : Effect.sync(() => entries.delete(id))))
          )
          const response = Result.isSuccess(result) ? result.success : fromError(result.failure)
          if (response.status >= 500) entries.delete(id)
          else entry.response = response
          if (Result.isFailure(result)) return yield* result.failure
          return { response, replayed: false }
        })

      return SandboxIdempotency.of({
        run,
        size: Effect.sync(() => entries.size),
        reset: Effect.sync(() => entries.clear())
      })
    })
  )
}
