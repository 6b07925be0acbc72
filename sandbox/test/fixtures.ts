/**
 * Glue for the sandbox conformance tests: an in-process sandbox plus an HTTP client as one layer,
 * and short forms of the helpers of `src/testing.ts` bound to that sandbox.
 */
import { Effect, Layer } from "effect"
import { FetchHttpClient } from "effect/http"
import type { SandboxOptions } from "../src/Options.ts"
import { Sandbox } from "../src/Sandbox.ts"
import { call, type CallOptions } from "../src/testing.ts"

/** A sandbox on a free port with small data, plus `HttpClient`. */
export const sandboxLayer = (options: SandboxOptions = {}) =>
  Layer.mergeAll(Sandbox.layer({ records: 400, ...options }), FetchHttpClient.layer)

/** `call` against the sandbox in context, with the bootstrap token unless another is given. */
export const api = Effect.fnUntraced(function* (path: string, options: CallOptions = {}) {
  const sandbox = yield* Sandbox
  return yield* call(sandbox.baseUrl, path, {
    ...options,
    token: "token" in options ? options.token : sandbox.credentials.personalAccessToken
  })
})

export const admin = Effect.map(Sandbox, (sandbox) => sandbox.admin)

/** A fresh sandbox state for a test that must not see earlier tests' changes. */
export const resetSandbox = Effect.flatMap(admin, (a) => a.reset)
