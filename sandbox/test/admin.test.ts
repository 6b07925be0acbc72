/**
 * The `/_sandbox` admin API over HTTP (what a person with curl or another process uses), its
 * optional admin token, the request log as the admin API shows it, and the CLI command's wiring.
 */
import { assert, describe, it, layer } from "@effect/vitest"
import { Effect, Option } from "effect"
import { Sandbox } from "../src/Sandbox.ts"
import { makeSandboxCommand } from "../src/cli.ts"
import { toSandboxOptions } from "../src/SandboxCommand.ts"
import { countRequests, requestsByPath } from "../src/testing.ts"
import { api, sandboxLayer } from "./fixtures.ts"

const adminCall = (
  path: string,
  options: { method?: "GET" | "POST" | "PUT" | "PATCH" | "DELETE"; json?: unknown } = {}
) => api(path, { ...options, token: undefined })

layer(sandboxLayer(), { excludeTestServices: true })("sandbox admin API", (it) => {
  it.effect("admin: GET /_sandbox describes companies, books, users, counts and the bootstrap credentials", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      const state = (yield* adminCall("/_sandbox")).json
      assert.strictEqual(state.companies.length, 3)
      assert.isTrue(state.companies[0].partner_own)
      assert.strictEqual(state.books.length, 9)
      assert.deepStrictEqual(state.books[0].user_ids.includes("usr_00000001"), true)
      assert.strictEqual(state.credentials.personal_access_token.token, sandbox.credentials.personalAccessToken)
      assert.strictEqual(state.credentials.oauth_app.client_id, sandbox.credentials.oauthClientId)
      assert.isAbove(state.counts.financial_accounts, 0)
    })
  )

  it.effect("admin: tokens, tasks and faults over HTTP; the request log filtered by path and status", () =>
    Effect.gen(function* () {
      yield* adminCall("/_sandbox/reset", { method: "POST" })
      const token = (yield* adminCall("/_sandbox/tokens", { method: "POST", json: { user_id: "usr_00000002" } })).json
      assert.strictEqual(token.can_write, false)
      const patched = yield* adminCall(`/_sandbox/tokens/${token.id}`, { method: "PATCH", json: { can_write: true } })
      assert.strictEqual(patched.json.can_write, true)
      const task = yield* adminCall("/_sandbox/tasks", {
        method: "POST",
        json: { book_id: "bk_00000001", title: "Admin" }
      })
      assert.strictEqual(task.status, 201)
      const completed = yield* adminCall(`/_sandbox/tasks/${task.json.id}/complete`, { method: "POST" })
      assert.strictEqual(completed.json.status, "done")
      assert.strictEqual((yield* api(`/v1/tasks/${task.json.id}`, { token: token.token })).json.status, "done")
      const fault = yield* adminCall("/_sandbox/faults", {
        method: "POST",
        json: { kind: "status", status: 500, path: "/v1/me", times: 1 }
      })
      assert.strictEqual(fault.status, 201)
      assert.strictEqual((yield* api("/v1/me")).status, 500)
      const log = yield* adminCall("/_sandbox/requests?path=/v1/me&status=500")
      assert.strictEqual(log.json.length, 1)
      assert.strictEqual(log.json[0].route, "/v1/me")
      assert.match(log.json[0].headers.authorization, /^Bearer crm_pat_.+…/)
      const sandbox = yield* Sandbox
      assert.strictEqual(yield* countRequests(sandbox.admin, { route: "/v1/tasks/:id" }), 1)
      const byPath = yield* requestsByPath(sandbox.admin)
      assert.deepStrictEqual(byPath, { [`/v1/tasks/${task.json.id}`]: 1, "/v1/me": 1 })
    })
  )

  it.effect("admin: invalid bodies are 422 with the schema's message; unknown routes 404", () =>
    Effect.gen(function* () {
      const bad = yield* adminCall("/_sandbox/faults", { method: "POST", json: { kind: "explode" } })
      assert.strictEqual(bad.status, 422)
      assert.strictEqual(bad.json.error, "validation_failed")
      assert.strictEqual((yield* adminCall("/_sandbox/nothing")).status, 404)
      assert.strictEqual((yield* adminCall("/_sandbox/records/unicorns")).status, 404)
      const notJson = yield* api("/_sandbox/tokens", {
        token: undefined,
        method: "POST",
        body: "{",
        headers: { "content-type": "application/json" }
      })
      assert.strictEqual(notJson.status, 400)
    })
  )

  it.effect("admin: book access, the clock and records over HTTP", () =>
    Effect.gen(function* () {
      yield* adminCall("/_sandbox/reset", { method: "POST" })
      assert.strictEqual(
        (yield* adminCall("/_sandbox/books/bk_00000002/users/usr_00000001", { method: "DELETE" })).status,
        204
      )
      const books = (yield* api("/v1/books")).json.data.map((b: any) => b.id)
      assert.deepStrictEqual(books, ["bk_00000001", "bk_00000003"])
      yield* adminCall("/_sandbox/books/bk_00000002/users/usr_00000001", { method: "PUT" })
      assert.strictEqual((yield* api("/v1/books")).json.pagination.total_count, 3)
      const clock = yield* adminCall("/_sandbox/clock/advance", { method: "POST", json: { by: "90m" } })
      assert.strictEqual(clock.json.offset_ms, 5_400_000)
      const records = yield* adminCall("/_sandbox/records/meetings?book_id=bk_00000001&limit=2")
      assert.strictEqual(records.json.length, 2)
      assert.strictEqual(records.json[0].book_id, "bk_00000001")
      yield* adminCall("/_sandbox/reset", { method: "POST" })
    })
  )
})

layer(sandboxLayer({ adminToken: "let-me-in" }), { excludeTestServices: true })("sandbox admin token", (it) => {
  it.effect("admin: with an admin token configured, the admin API needs it", () =>
    Effect.gen(function* () {
      assert.strictEqual((yield* adminCall("/_sandbox")).status, 401)
      assert.strictEqual((yield* api("/_sandbox", { token: "let-me-in" })).status, 200)
    })
  )
})

describe("sandbox command", () => {
  it("cli: flags become layer options", () => {
    assert.deepStrictEqual(
      toSandboxOptions({
        port: 0,
        host: "127.0.0.1",
        records: 100000,
        seed: 3,
        window: "10s",
        debounce: "60s",
        webhookHeaderPrefix: "svix",
        adminToken: Option.none()
      }),
      {
        port: 0,
        host: "127.0.0.1",
        records: 100000,
        seed: 3,
        window: "10s",
        debounce: "60s",
        webhookHeaderPrefix: "svix"
      }
    )
    assert.strictEqual(makeSandboxCommand().name, "sandbox")
  })
})
