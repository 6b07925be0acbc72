/**
 * The sandbox playing a partner (issue 28, point 6): many companies (firms), each with its users,
 * books and records, a chosen overlap between the books of a firm's users, and one seeded
 * personal token per user, so a test or a benchmark can run one connection per user: a partner's
 * disjoint firms, or one firm's advisors whose books overlap. Rate limits stay per token, per
 * company and per address whatever the number of companies (spec §8).
 */
import { assert, describe, it, layer } from "@effect/vitest"
import { Effect, Option } from "effect"
import { toSandboxOptions } from "../src/SandboxCommand.ts"
import { userTokenOf } from "../src/Auth.ts"
import { resolveOptions } from "../src/Options.ts"
import { connectUsers, userTokens } from "../src/testing.ts"
import { admin, api, sandboxLayer } from "./fixtures.ts"

const FIRMS = 40

/** Every page of a list for one token: the ids, in order. */
const listAll = (path: string, token: string) =>
  Effect.gen(function* () {
    const ids: Array<string> = []
    for (let page = 1; ; page++) {
      const response = yield* api(`${path}?per_page=100&page=${page}`, { token })
      assert.strictEqual(response.status, 200, `${path} page ${page}: ${response.text}`)
      ids.push(...response.json.data.map((row: { readonly id: string }) => row.id))
      if (page >= response.json.pagination.total_pages) return ids
    }
  })

/** `n` GETs of /v1/me from one address. */
const hit = (n: number, token: string, ip: string) =>
  Effect.forEach(Array.from({ length: n }), () => api("/v1/me", { token, headers: { "x-sandbox-client-ip": ip } }))

const bookIds = (token: string, ip = "10.0.0.1") =>
  Effect.map(api("/v1/books", { token, headers: { "x-sandbox-client-ip": ip } }), (response) =>
    response.json.data.map((book: { id: string }) => book.id)
  )

layer(
  sandboxLayer({
    companies: FIRMS,
    booksPerCompany: 1,
    usersPerCompany: 2,
    recordsPerCompany: 20,
    overlap: 0,
    userTokens: true
  }),
  { excludeTestServices: true }
)("a partner's disjoint firms", (it) => {
  it.effect("every user has a seeded personal token of its company, listed by the admin API", () =>
    Effect.gen(function* () {
      const a = yield* admin
      const state = yield* a.state
      assert.strictEqual(state.companies.length, FIRMS)
      assert.strictEqual(state.users.length, FIRMS * 2)
      const tokens = yield* userTokens(a)
      // one per user and company: the first user also works for the second company
      assert.strictEqual(tokens.length, FIRMS * 2 + 1)
      assert.deepStrictEqual(
        tokens.map((token) => `${token.user_id} ${token.company_id}`),
        state.users.flatMap((user) => user.company_ids.map((company) => `${user.id} ${company}`))
      )
      const listed = new Set((yield* a.tokens).map((token) => token.token))
      for (const token of tokens) {
        assert.isTrue(listed.has(token.token))
        const me = yield* api("/v1/me", { token: token.token })
        assert.strictEqual(me.status, 200)
        assert.strictEqual(me.json.id, token.user_id)
        assert.isFalse(token.can_write)
      }
      // the same seed gives the same tokens after a reset, and the scheme is public
      yield* a.reset
      assert.deepStrictEqual(yield* userTokens(a), tokens)
      assert.strictEqual(tokens[5]!.token, userTokenOf(1, tokens[5]!.user_id, tokens[5]!.company_id))
    })
  )

  it.effect("each firm's token sees only its firm's book; the firms' accounts are disjoint and cover them all", () =>
    Effect.gen(function* () {
      const a = yield* admin
      const state = yield* a.state
      const tokens = yield* userTokens(a)
      const seen = new Set<string>()
      for (const company of state.companies) {
        const token = tokens.find((t) => t.company_id === company.id)!
        const books = yield* bookIds(token.token)
        const own = state.books.filter((book) => book.company_id === company.id).map((book) => book.id)
        assert.deepStrictEqual(books, own)
        const accounts = yield* listAll("/v1/financial_accounts", token.token)
        assert.isAbove(accounts.length, 0, `${company.id} has no accounts`)
        for (const id of accounts) {
          assert.isFalse(seen.has(id), `${id} is seen by two firms`)
          seen.add(id)
        }
      }
      assert.strictEqual(seen.size, state.counts.financial_accounts)
    })
  )

  it.effect("records are spread over the firms: about recordsPerCompany each, not 90% in the first", () =>
    Effect.gen(function* () {
      const state = yield* (yield* admin).state
      const total = Object.entries(state.counts)
        .filter(([kind]) => kind !== "project_templates")
        .reduce((sum, [, count]) => sum + count, 0)
      // 20 per firm, and at least one of each of the ten kinds in every book
      assert.isAtLeast(total, FIRMS * 20)
      assert.isAtMost(total, FIRMS * 30)
      const tokens = yield* userTokens(yield* admin)
      const first = (yield* listAll("/v1/financial_accounts", tokens[0]!.token)).length
      assert.isBelow(first, state.counts.financial_accounts / 4)
    })
  )
})

describe("one firm's advisors", () => {
  const firm = { companies: 1, booksPerCompany: 4, usersPerCompany: 4, recordsPerCompany: 200, userTokens: true }

  layer(sandboxLayer({ ...firm, overlap: 1 }), { excludeTestServices: true })("overlap 1", (it) => {
    it.effect("every advisor sees every book of the firm", () =>
      Effect.gen(function* () {
        for (const token of yield* userTokens(yield* admin)) {
          assert.deepStrictEqual(yield* bookIds(token.token), [
            "bk_00000001",
            "bk_00000002",
            "bk_00000003",
            "bk_00000004"
          ])
        }
      })
    )
  })

  layer(sandboxLayer({ ...firm, overlap: 0.5 }), { excludeTestServices: true })("overlap 0.5", (it) => {
    it.effect("every advisor sees half the books, each pair of neighbours shares one", () =>
      Effect.gen(function* () {
        const seen: Array<ReadonlyArray<string>> = []
        for (const token of yield* userTokens(yield* admin)) seen.push(yield* bookIds(token.token))
        assert.deepStrictEqual(seen, [
          ["bk_00000001", "bk_00000002"],
          ["bk_00000002", "bk_00000003"],
          ["bk_00000003", "bk_00000004"],
          ["bk_00000001", "bk_00000004"]
        ])
      })
    )
  })

  layer(sandboxLayer({ ...firm, overlap: 0 }), { excludeTestServices: true })("overlap 0", (it) => {
    it.effect("every advisor sees a book of its own: the lists of two advisors share nothing", () =>
      Effect.gen(function* () {
        const tokens = yield* userTokens(yield* admin)
        const lists = yield* Effect.forEach(tokens, (token) => listAll("/v1/financial_accounts", token.token))
        assert.deepStrictEqual(yield* Effect.forEach(tokens, (token) => bookIds(token.token)), [
          ["bk_00000001"],
          ["bk_00000002"],
          ["bk_00000003"],
          ["bk_00000004"]
        ])
        const all = lists.flat()
        assert.strictEqual(new Set(all).size, all.length)
        for (const list of lists) assert.isAbove(list.length, 0)
      })
    )
  })
})

layer(
  sandboxLayer({
    companies: FIRMS,
    booksPerCompany: 1,
    usersPerCompany: 2,
    recordsPerCompany: 20,
    userTokens: true,
    window: "10s",
    limits: { personal: { token: 3, company: 5, ip: 70 }, oauth: { user: 2, app: 3, ip: 70 } }
  }),
  { excludeTestServices: true }
)("§8 rate limits with many companies", (it) => {
  /** The first user token of every firm, in firm order. */
  const firstTokens = Effect.gen(function* () {
    const a = yield* admin
    const tokens = yield* userTokens(a)
    return (yield* a.state).companies.map((company) => tokens.find((t) => t.company_id === company.id)!)
  })

  it.effect("personal tokens: a firm's company bucket is its own; the token bucket is per token", () =>
    Effect.gen(function* () {
      const a = yield* admin
      yield* a.reset
      const tokens = yield* userTokens(a)
      // firm 31's two users spend its company bucket (5): the second user is refused naming `company`
      const [first, second] = tokens.filter((t) => t.company_id === "cmp_00000031")
      const own = yield* hit(4, first!.token, "10.1.0.1")
      assert.deepStrictEqual(
        own.map((r) => r.status),
        [200, 200, 200, 429]
      )
      assert.strictEqual(own[3]!.json.limit, "token")
      const other = yield* hit(3, second!.token, "10.1.0.1")
      assert.deepStrictEqual(
        other.map((r) => r.status),
        [200, 200, 429]
      )
      assert.strictEqual(other[2]!.json.limit, "company")
      // every other firm still has its whole budget
      for (const [i, token] of (yield* firstTokens).entries()) {
        if (token.company_id === "cmp_00000031") continue
        assert.deepStrictEqual(
          (yield* hit(3, token.token, `10.1.1.${i}`)).map((r) => r.status),
          [200, 200, 200]
        )
      }
    })
  )

  it.effect("the address bucket is shared by every firm's tokens", () =>
    Effect.gen(function* () {
      yield* (yield* admin).reset
      const tokens = yield* firstTokens
      const statuses: Array<number> = []
      for (const token of tokens.slice(0, 35))
        statuses.push(...(yield* hit(2, token.token, "10.2.0.1")).map((r) => r.status))
      assert.deepStrictEqual(
        statuses.filter((s) => s !== 200),
        []
      )
      const refused = yield* hit(1, tokens[36]!.token, "10.2.0.1")
      assert.strictEqual(refused[0]!.status, 429)
      assert.strictEqual(refused[0]!.json.limit, "ip")
    })
  )

  it.effect("OAuth: one production app connected to every firm: each sees its firm's book, with its own buckets", () =>
    Effect.gen(function* () {
      const a = yield* admin
      yield* a.reset
      const app = yield* a.registerApp({ mode: "production" })
      const state = yield* a.state
      const tokens = yield* firstTokens
      const connections = (yield* connectUsers(a, app.client_id, (pair) =>
        tokens.some((t) => t.user_id === pair.user_id && t.company_id === pair.company_id)
      )).map((connection) => connection.tokens)
      assert.strictEqual(connections.length, FIRMS)
      for (const [i, connection] of connections.entries()) {
        assert.strictEqual(connection.company_id, state.companies[i]!.id)
        const books = yield* bookIds(tokens[i]!.token, `10.4.0.${i}`)
        assert.strictEqual(books.length, 1)
        assert.deepStrictEqual(yield* bookIds(connection.access_token, `10.4.1.${i}`), books)
      }
      // (app, user) then (app, company) of firm 13: its second user is refused naming `company`
      const second = state.users.find(
        (user) => user.company_ids[0] === "cmp_00000013" && user.id !== tokens[12]!.user_id
      )!
      const other = yield* a.connect({ clientId: app.client_id, userId: second.id, companyId: "cmp_00000013" })
      assert.deepStrictEqual(
        (yield* hit(2, connections[12]!.access_token, "10.3.0.1")).map((r) => [r.status, r.json.limit]),
        [
          [200, undefined],
          [429, "token"]
        ]
      )
      assert.deepStrictEqual(
        (yield* hit(2, other.access_token, "10.3.0.1")).map((r) => [r.status, r.json.limit]),
        [
          [200, undefined],
          [429, "company"]
        ]
      )
      assert.strictEqual((yield* hit(1, connections[13]!.access_token, "10.3.0.1"))[0]!.status, 200)
    })
  )
})

describe("partner options", () => {
  it.effect("an overlap outside 0 to 1 is refused, naming the option; recordsPerCompany sets the total", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(resolveOptions({ overlap: 1.5 }))
      assert.strictEqual(error.option, "overlap")
      const resolved = yield* resolveOptions({ companies: 500, recordsPerCompany: 20, records: 7 })
      assert.strictEqual(resolved.records, 10_000)
    })
  )
})

describe("sandbox command, partner flags", () => {
  it("cli: --companies, --users-per-company, --books-per-company, --records-per-company, --overlap, --user-tokens", () => {
    const options = toSandboxOptions({
      port: 0,
      host: "127.0.0.1",
      records: 1000,
      seed: 1,
      window: "1h",
      debounce: "60s",
      webhookHeaderPrefix: "hook",
      adminToken: Option.none(),
      companies: Option.some(500),
      booksPerCompany: Option.some(1),
      usersPerCompany: Option.some(2),
      recordsPerCompany: Option.some(20),
      overlap: Option.some(0),
      userTokens: true
    })
    assert.deepStrictEqual(
      {
        companies: options.companies,
        booksPerCompany: options.booksPerCompany,
        usersPerCompany: options.usersPerCompany,
        recordsPerCompany: options.recordsPerCompany,
        overlap: options.overlap,
        userTokens: options.userTokens
      },
      { companies: 500, booksPerCompany: 1, usersPerCompany: 2, recordsPerCompany: 20, overlap: 0, userTokens: true }
    )
  })
})
