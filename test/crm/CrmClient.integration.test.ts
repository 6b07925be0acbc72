/**
 * CrmClient against the in-process sandbox and a real PostgreSQL (for the rate budget): every
 * endpoint of spec §4 decodes every generated record, unknown fields and enum values survive in
 * `raw`, errors map to their reasons (spec §7), retries are bounded and keep the idempotency key,
 * a 429 blocks its bucket in the shared budget, and nothing is sent outside the base URL.
 */
import { CrmHttpClient } from "../../src/cli/ApiStack.ts"
import { assert, layer } from "@effect/vitest"
import { Duration, Effect, Fiber, Layer, Result, Schedule, Schema, Stream } from "effect"
import { HttpClient, HttpClientResponse } from "effect/http"
import { RateBudget } from "../../src/budget/RateBudget.ts"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { CrmClient, type CrmClientShape } from "../../src/crm/CrmClient.ts"
import type { CrmError } from "../../src/crm/CrmError.ts"
import { Credentials } from "../../src/crm/Credentials.ts"
import { decodeItems, type ListPage } from "../../src/crm/Pagination.ts"
import { Sandbox } from "@crm-sync/sandbox"
import { TestDatabase } from "../support/TestDatabase.ts"

const HIGH = { token: 100_000, company: 100_000, ip: 100_000 }

const SandboxLayer = Sandbox.layer({ records: 1500, seed: 11, limits: { personal: HIGH } })

/** Connections: a write-enabled token, a read-only one, and a token the CRM does not know. */
const Config = Layer.unwrap(
  Effect.gen(function* () {
    const sandbox = yield* Sandbox
    const readOnly = yield* sandbox.admin.createToken({ userId: sandbox.credentials.userId, canWrite: false })
    const connection = (name: string, token: string) => ({
      name,
      base_url: sandbox.baseUrl,
      credential: "personal",
      token,
      limits: HIGH,
      request_timeout: "1 second"
    })
    return AppConfig.layerFrom({
      connections: [
        connection("pat", sandbox.credentials.personalAccessToken),
        connection("readonly", readOnly.token),
        connection("bogus", "crm_pat_not-a-real-token"),
        // Its own token and company buckets, so the 429 test's block holds up no other test.
        connection("throttled", sandbox.credentials.personalAccessToken),
        // Port 1 on the loopback: nothing listens, the connection is refused.
        { ...connection("refused", sandbox.credentials.personalAccessToken), base_url: "http://127.0.0.1:1" }
      ],
      budget: { safety_margin: "50 millis" }
    })
  })
)

const Stack = CrmClient.layer.pipe(
  Layer.provideMerge(Layer.mergeAll(RateBudget.layer, Credentials.layer)),
  Layer.provideMerge(Config),
  Layer.provideMerge(CrmHttpClient),
  Layer.provideMerge(TestDatabase),
  Layer.provideMerge(SandboxLayer)
)

const allPages = <A>(
  client: CrmClientShape,
  list: (page: { page: number; per_page: number }) => Effect.Effect<ListPage<A>, CrmError>
) => Stream.runCollect(client.paginate(list))

/** Every record of the pages decodes; returns how many there were. */
const assertAllDecode = <A>(pages: ReadonlyArray<ListPage<A>>) => {
  const items = pages.flatMap(decodeItems)
  const failures = items.filter((item) => Result.isFailure(item.record))
  assert.deepStrictEqual(
    failures.map((item) => (Result.isFailure(item.record) ? item.record.failure : "")),
    [],
    "every record decodes"
  )
  return items.length
}

/** A single read decoded. */
const decoded = (received: { readonly record: Result.Result<unknown, string> }) =>
  assert.isTrue(Result.isSuccess(received.record), Result.isFailure(received.record) ? received.record.failure : "")

const clientFor = (name: string) => CrmClient.make(name).pipe(Effect.orDie)

/** An HttpClient that rewrites the JSON of answers on paths matching `path` (the CRM of tomorrow). */
const rewriting = (path: RegExp, rewrite: (json: Record<string, unknown>) => Record<string, unknown>) =>
  Effect.gen(function* () {
    const http = yield* HttpClient.HttpClient
    return HttpClient.transform(http, (effect, request) =>
      Effect.flatMap(effect, (response) =>
        path.test(new URL(request.url).pathname)
          ? Effect.map(response.json, (json) =>
              HttpClientResponse.fromWeb(
                request,
                new Response(JSON.stringify(rewrite(json as Record<string, unknown>)), {
                  status: response.status,
                  headers: { "content-type": "application/json" }
                })
              )
            )
          : Effect.succeed(response)
      )
    )
  })

layer(Stack, { excludeTestServices: true })("CrmClient", (it) => {
  it.effect("GET /v1/me reports the auth type and write access (spec §2.11)", () =>
    Effect.gen(function* () {
      const client = yield* CrmClient
      const access = yield* client.access()
      assert.strictEqual(access.canWrite, true)
      assert.match(access.authType, /personal/)
      const readOnly = yield* (yield* clientFor("readonly")).access()
      assert.strictEqual(readOnly.canWrite, false)
    })
  )

  it.effect("every list endpoint decodes every generated record, 100 per page (spec §4 rule 1)", () =>
    Effect.gen(function* () {
      const client = yield* CrmClient
      const sandbox = yield* Sandbox
      const since = yield* sandbox.admin.lastRequestSeq

      const books = yield* allPages(client, (page) => client.listBooks(page))
      assert.isTrue(assertAllDecode(books) > 0)
      const businesses = yield* allPages(client, (page) => client.listBusinesses(page))
      assert.strictEqual(assertAllDecode(businesses), businesses[0]!.pagination.total_count)
      const templates = yield* allPages(client, (page) => client.listProjectTemplates(page))
      assertAllDecode(templates)
      const bookId = String((books[0]!.data[0] as { id: string }).id)
      const templatesForBook = yield* allPages(client, (page) =>
        client.listProjectTemplates({ ...page, book_id: bookId, projectable_kind: "household" })
      )
      assertAllDecode(templatesForBook)
      const annuities = yield* allPages(client, (page) => client.listAnnuityContracts(page))
      assert.strictEqual(assertAllDecode(annuities), annuities[0]!.pagination.total_count)
      const accounts = yield* allPages(client, (page) => client.listFinancialAccounts(page))
      assert.isTrue(accounts.length >= 3, "financial accounts span several pages")
      assert.strictEqual(assertAllDecode(accounts), accounts[0]!.pagination.total_count)

      const requests = yield* sandbox.admin.requests({ since })
      assert.isTrue(requests.length > 0)
      for (const request of requests) {
        assert.strictEqual(request.query.per_page, "100", `${request.path} asks for 100 per page`)
        assert.strictEqual(request.status, 200)
      }
    })
  )

  it.effect("filters businesses by book, name prefix and updated_since as ISO 8601 (spec §4 rules 3, 4)", () =>
    Effect.gen(function* () {
      const client = yield* CrmClient
      const sandbox = yield* Sandbox
      const all = yield* allPages(client, (page) => client.listBusinesses(page))
      const first = decodeItems(all[0]!)[0]!.record
      assert.isTrue(Result.isSuccess(first))
      if (!Result.isSuccess(first)) return
      const since = yield* sandbox.admin.lastRequestSeq
      const page = yield* client.listBusinesses({
        book_id: first.success.book_id ?? undefined,
        name: (first.success.name ?? "").slice(0, 3),
        updated_since: yield* Schema.decodeUnknownEffect(Schema.DateTimeUtcFromString)("2000-01-01T00:00:00Z")
      })
      assert.isTrue(page.data.some((record) => (record as { id: string }).id === first.success.id))
      const [request] = yield* sandbox.admin.requests({ since })
      assert.strictEqual(request!.query.updated_since, "2000-01-01T00:00:00.000Z")
      assert.strictEqual(request!.query.book_id, first.success.book_id)
    })
  )

  it.effect("every single-record endpoint decodes every generated record", () =>
    Effect.gen(function* () {
      const client = yield* CrmClient
      const sandbox = yield* Sandbox
      const books = (yield* sandbox.admin.state).books.filter(
        (book) => book.company_id === sandbox.credentials.companyId
      )
      const ofBooks = (kind: "meetings" | "tasks" | "notes") =>
        Effect.map(
          Effect.forEach(books, (book) => sandbox.admin.records(kind, { bookId: book.id })),
          (lists) => lists.flat() as ReadonlyArray<Record<string, unknown>>
        )
      const meetings = yield* ofBooks("meetings")
      assert.isTrue(meetings.length > 0)
      for (const meeting of meetings) {
        decoded(yield* client.getMeeting(String(meeting.id)))
        decoded(yield* client.getTranscript(String(meeting.id)))
      }
      const tasks = yield* ofBooks("tasks")
      assert.isTrue(tasks.length > 0)
      for (const task of tasks) decoded(yield* client.getTask(String(task.id)))

      const notes = yield* ofBooks("notes")
      const parents = new Set<string>()
      for (const note of notes) {
        // The sandbox stores the parent kind capitalized, as the CRM's own notable_type.
        const parent = String(note.notable_type).toLowerCase() as "household" | "contact" | "business"
        parents.add(parent)
        const read =
          parent === "household"
            ? client.getHouseholdNote(String(note.notable_id), String(note.id))
            : parent === "contact"
              ? client.getContactNote(String(note.notable_id), String(note.id))
              : client.getBusinessNote(String(note.notable_id), String(note.id))
        decoded(yield* read)
      }
      assert.isTrue(parents.size >= 2, `notes under several parent kinds: ${[...parents].join(", ")}`)
    })
  )

  it.effect("an unknown field and a new enum value survive into raw without error", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      // The books listing carries fields the spec does not show (initials, company_id...).
      const client = yield* CrmClient
      const books = yield* client.listBooks()
      const book = decodeItems(books)[0]!
      assert.isTrue(Result.isSuccess(book.record))
      assert.property(book.raw as object, "initials")

      // Tomorrow's CRM: a field nobody has heard of and a meeting source the spec does not list.
      const meeting = (yield* sandbox.admin.records("meetings", { limit: 1 }))[0] as { id: string }
      const http = yield* rewriting(/^\/v1\/meetings\/[^/]+$/, (json) => ({
        ...json,
        x_future_field: { nested: [1, 2] },
        meeting_source: "holographic"
      }))
      const future = yield* clientFor("pat").pipe(Effect.provideService(HttpClient.HttpClient, http))
      const received = yield* future.getMeeting(meeting.id)
      assert.isTrue(Result.isSuccess(received.record))
      if (Result.isSuccess(received.record)) assert.strictEqual(received.record.success.meeting_source, "holographic")
      assert.deepStrictEqual((received.raw as Record<string, unknown>).x_future_field, { nested: [1, 2] })
    })
  )

  it.effect("a record that does not decode stays raw and does not fail its page", () =>
    Effect.gen(function* () {
      const http = yield* rewriting(/^\/v1\/financial_accounts$/, (json) => ({
        ...json,
        data: [
          ...(json.data as ReadonlyArray<unknown>).slice(1),
          { id: "fa_broken", balance_in_cents: "lots", updated_at: "yesterday" },
          null
        ]
      }))
      const client = yield* clientFor("pat").pipe(Effect.provideService(HttpClient.HttpClient, http))
      const page = yield* client.listFinancialAccounts()
      const items = decodeItems(page)
      const failed = items.filter((item) => Result.isFailure(item.record))
      assert.strictEqual(failed.length, 2)
      assert.strictEqual((failed[0]!.raw as { id: string }).id, "fa_broken")
      assert.strictEqual(items.length - failed.length, 99)
    })
  )

  it.effect("a write sends Content-Type: application/json and one Idempotency-Key (spec §4)", () =>
    Effect.gen(function* () {
      const client = yield* CrmClient
      const sandbox = yield* Sandbox
      const since = yield* sandbox.admin.lastRequestSeq
      const created = yield* client.createContact({
        book_id: "bk_00000001",
        first_name: "Ada",
        last_name: "Lovelace",
        phone_numbers: [{ phone_number: "+14155550100", phone_type: "mobile", is_primary: true }]
      })
      assert.isTrue(Result.isSuccess(created.record))
      if (Result.isSuccess(created.record)) assert.strictEqual(created.record.success.first_name, "Ada")
      const prospect = yield* client.createProspect(
        { book_id: "bk_00000001", first_name: "Grace", last_name: "Hopper" },
        { idempotencyKey: "outbox-row-42" }
      )
      assert.isTrue(Result.isSuccess(prospect.record))
      const [contact, prospectRequest] = yield* sandbox.admin.requests({ since, method: "POST" })
      assert.match(contact!.headers["content-type"] ?? "", /^application\/json/)
      assert.match(contact!.idempotency_key ?? "", /^[0-9a-f-]{36}$/)
      assert.strictEqual(prospectRequest!.idempotency_key, "outbox-row-42")
    })
  )

  it.effect("a write body that breaks the schema is refused before anything is sent", () =>
    Effect.gen(function* () {
      const client = yield* CrmClient
      const sandbox = yield* Sandbox
      const since = yield* sandbox.admin.lastRequestSeq
      const error = yield* Effect.flip(
        client.createContact({
          book_id: "bk_00000001",
          phone_numbers: [{ phone_number: "555-0100", phone_type: "mobile", is_primary: true }]
        })
      )
      assert.strictEqual(error.reason._tag, "Invalid")
      assert.strictEqual(error.attempts, 0)
      assert.notInclude(error.message, "555-0100")
      assert.lengthOf(yield* sandbox.admin.requests({ since }), 0)
    })
  )

  it.effect("retries 5xx with backoff, then succeeds", () =>
    Effect.gen(function* () {
      const client = yield* CrmClient
      const sandbox = yield* Sandbox
      const task = (yield* sandbox.admin.records("tasks", { bookId: "bk_00000001", limit: 1 }))[0] as { id: string }
      const fault = yield* sandbox.admin.addFault({ kind: "status", status: 503, path: "/v1/tasks/*", times: 2 })
      const since = yield* sandbox.admin.lastRequestSeq
      const received = yield* client.getTask(task.id)
      assert.isTrue(Result.isSuccess(received.record))
      const statuses = (yield* sandbox.admin.requests({ since })).map((request) => request.status)
      assert.deepStrictEqual(statuses, [503, 503, 200])
      yield* sandbox.admin.removeFault(fault.id).pipe(Effect.ignore)
    })
  )

  it.effect("gives up after a bounded number of retries and names the operation and record", () =>
    Effect.gen(function* () {
      const client = yield* CrmClient
      const sandbox = yield* Sandbox
      const task = (yield* sandbox.admin.records("tasks", { bookId: "bk_00000001", limit: 1 }))[0] as { id: string }
      const fault = yield* sandbox.admin.addFault({ kind: "status", status: 502, path: "/v1/tasks/*" })
      const error = yield* Effect.flip(client.getTask(task.id))
      yield* sandbox.admin.removeFault(fault.id)
      assert.strictEqual(error.reason._tag, "Server")
      assert.strictEqual(error.attempts, 5)
      assert.isTrue(error.retryable)
      assert.strictEqual(error.recordId, task.id)
      assert.include(error.message, "CrmClient.getTask")
    })
  )

  it.effect("keeps the Idempotency-Key across retries: a reset after the write creates one record", () =>
    Effect.gen(function* () {
      const client = yield* CrmClient
      const sandbox = yield* Sandbox
      yield* sandbox.admin.addFault({ kind: "reset", when: "after", method: "POST", path: "/v1/contacts", times: 1 })
      const since = yield* sandbox.admin.lastRequestSeq
      const before = (yield* sandbox.admin.state).counts.contacts
      const created = yield* client.createContact({ book_id: "bk_00000001", first_name: "Once", last_name: "Only" })
      assert.isTrue(Result.isSuccess(created.record))
      const posts = yield* sandbox.admin.requests({ since, method: "POST" })
      assert.strictEqual(posts.length, 2)
      assert.strictEqual(posts[0]!.idempotency_key, posts[1]!.idempotency_key)
      assert.isTrue(posts[1]!.idempotent_replay)
      assert.strictEqual((yield* sandbox.admin.state).counts.contacts, before + 1)
    })
  )

  it.effect("a create that must not run twice is not resent once its answer is lost (a 5xx it hid is not cached)", () =>
    Effect.gen(function* () {
      const client = yield* CrmClient
      const sandbox = yield* Sandbox
      // The chaos suite's seed 20261202: the contact committed, the CRM answered 503, the connection reset.
      yield* sandbox.admin.addFault({
        kind: "status",
        status: 503,
        when: "after",
        method: "POST",
        path: "/v1/contacts",
        times: 1
      })
      yield* sandbox.admin.addFault({ kind: "reset", when: "after", method: "POST", path: "/v1/contacts", times: 1 })
      const since = yield* sandbox.admin.lastRequestSeq
      const before = (yield* sandbox.admin.state).counts.contacts
      const failed = yield* Effect.flip(
        client.createContact(
          { book_id: "bk_00000001", first_name: "Lost", last_name: "Answer" },
          { retryServerErrors: false }
        )
      )
      assert.strictEqual(failed.reason._tag, "Transport")
      assert.isTrue(failed.reason._tag === "Transport" && failed.reason.mayHaveRun)
      assert.lengthOf(yield* sandbox.admin.requests({ since, method: "POST" }), 1, "sent once")
      assert.strictEqual((yield* sandbox.admin.state).counts.contacts, before + 1)
    })
  )

  it.effect("a refused connection did not run: mayHaveRun is false", () =>
    Effect.gen(function* () {
      const client = yield* Effect.orDie(CrmClient.make("refused"))
      const failed = yield* Effect.flip(client.listBooks())
      assert.isTrue(failed.reason._tag === "Transport" && failed.reason.mayHaveRun === false, failed.message)
    })
  )

  it.effect("retries a cut-off body and a timeout", () =>
    Effect.gen(function* () {
      const client = yield* CrmClient
      const sandbox = yield* Sandbox
      yield* sandbox.admin.addFault({ kind: "truncate", path: "/v1/books", times: 1 })
      const truncated = yield* sandbox.admin.lastRequestSeq
      assert.isTrue((yield* client.listBooks()).data.length > 0)
      const cut = yield* sandbox.admin.requests({ since: truncated, path: "/v1/books" })
      assert.deepStrictEqual(
        cut.map((request) => request.faults),
        [["truncate"], []]
      )

      // The connection's request_timeout is 1 second.
      yield* sandbox.admin.addFault({ kind: "latency", ms: 2_500, path: "/v1/books", times: 1 })
      const slow = yield* sandbox.admin.lastRequestSeq
      assert.isTrue((yield* client.listBooks()).data.length > 0)
      // The slow request is logged when the sandbox finishes it, after our retry has already succeeded.
      const timedOut = yield* sandbox.admin
        .requests({ since: slow, path: "/v1/books" })
        .pipe(Effect.repeat({ until: (requests) => requests.length >= 2, schedule: Schedule.spaced("100 millis") }))
      assert.deepStrictEqual(
        timedOut.map((request) => request.faults).toSorted((a, b) => a.length - b.length),
        [[], ["latency:2500"]]
      )
    })
  )

  it.effect("maps 401, 403 and 404 to their reasons without retrying (spec §7)", () =>
    Effect.gen(function* () {
      const sandbox = yield* Sandbox
      const bogus = yield* clientFor("bogus")
      const unauthorized = yield* Effect.flip(bogus.listBooks())
      assert.strictEqual(unauthorized.reason._tag, "Unauthorized")
      assert.strictEqual(unauthorized.attempts, 1)
      assert.isFalse(unauthorized.retryable)
      assert.notInclude(unauthorized.message, "not-a-real-token")

      const readOnly = yield* clientFor("readonly")
      const forbidden = yield* Effect.flip(
        readOnly.createProspect({ book_id: "bk_00000001", first_name: "No", last_name: "Write" })
      )
      assert.strictEqual(forbidden.reason._tag, "Forbidden")
      if (forbidden.reason._tag === "Forbidden") assert.isTrue(forbidden.reason.write)
      assert.include(forbidden.message, "write access")

      const client = yield* CrmClient
      const since = yield* sandbox.admin.lastRequestSeq
      const missing = yield* Effect.flip(client.getMeeting("mtg_does_not_exist"))
      assert.strictEqual(missing.reason._tag, "NotFound")
      assert.strictEqual(missing.recordId, "mtg_does_not_exist")
      assert.lengthOf(yield* sandbox.admin.requests({ since }), 1)
    })
  )

  it.effect("a 429 marks the named bucket exhausted in the shared budget and stops requests until Retry-After", () =>
    Effect.gen(function* () {
      const client = yield* clientFor("throttled")
      const sandbox = yield* Sandbox
      const budget = yield* RateBudget
      yield* sandbox.admin.addFault({
        kind: "rate_limit",
        limit: "company",
        retry_after: 3_000,
        path: "/v1/annuity_contracts",
        times: 1
      })
      const since = yield* sandbox.admin.lastRequestSeq
      const fiber = yield* Effect.forkChild(client.listAnnuityContracts())
      const company = client.buckets.find((bucket) => bucket.scope === "company")!
      // Wait (real time) until the client has recorded the 429 in the database.
      yield* budget.status(client.buckets).pipe(
        Effect.repeat({
          until: (status) =>
            status.some((bucket) => bucket.bucket === company.key && bucket.blockedUntil !== undefined),
          schedule: Schedule.spaced("20 millis")
        })
      )
      const status = yield* budget.status(client.buckets)
      for (const bucket of status) {
        assert.strictEqual(bucket.blockedUntil !== undefined, bucket.bucket === company.key, bucket.bucket)
      }
      // Every process on this database now waits: another budget instance refuses a permit too.
      const other = yield* Effect.gen(function* () {
        const fresh = yield* RateBudget
        return yield* fresh.tryAcquire(client.buckets, { priority: "interactive" })
      }).pipe(Effect.provide(RateBudget.layer.pipe(Layer.fresh)))
      assert.isFalse(other.granted)
      if (!other.granted) assert.isTrue(Duration.toMinutes(other.retryIn) > 45, "Retry-After of 50 minutes")
      yield* Fiber.interrupt(fiber)
      assert.lengthOf(yield* sandbox.admin.requests({ since }), 1, "no request was sent while blocked")
    })
  )

  it.effect("refuses ids that would leave their path segment, and never follows a redirect", () =>
    Effect.gen(function* () {
      const client = yield* CrmClient
      const sandbox = yield* Sandbox
      const since = yield* sandbox.admin.lastRequestSeq
      const climbing = yield* Effect.flip(client.getMeeting(".."))
      assert.strictEqual(climbing.reason._tag, "Invalid")
      assert.strictEqual(climbing.attempts, 0)
      const encoded = yield* Effect.flip(client.getTask("a/../../me"))
      assert.strictEqual(encoded.reason._tag, "NotFound")
      const [request] = yield* sandbox.admin.requests({ since })
      assert.strictEqual(request!.path, "/v1/tasks/a%2F..%2F..%2Fme")

      const redirecting = HttpClient.make((request) =>
        Effect.succeed(
          HttpClientResponse.fromWeb(
            request,
            new Response(null, { status: 302, headers: { location: "https://elsewhere.example/v1/me" } })
          )
        )
      )
      const redirected = yield* clientFor("pat").pipe(
        Effect.provideService(HttpClient.HttpClient, redirecting),
        Effect.flatMap((other) => Effect.flip(other.me()))
      )
      assert.strictEqual(redirected.reason._tag, "Transport")
      assert.strictEqual(redirected.attempts, 1)
      assert.isFalse(redirected.retryable)
    })
  )

  it.effect("crawls to the end while records are added mid-crawl (totals re-read on every page)", () =>
    Effect.gen(function* () {
      const client = yield* CrmClient
      const sandbox = yield* Sandbox
      const before = yield* client.listFinancialAccounts({ per_page: 100 })
      yield* sandbox.admin.addFault({
        kind: "page_drift",
        action: "insert",
        count: 60,
        path: "/v1/financial_accounts",
        times: 2
      })
      const pages = yield* allPages(client, (page) => client.listFinancialAccounts(page))
      const last = pages[pages.length - 1]!
      assert.isTrue(
        last.pagination.total_count > before.pagination.total_count,
        "the sandbox added records during the crawl"
      )
      assert.isTrue(pages.length >= last.pagination.total_pages, "the crawl followed the new total_pages")
      assert.strictEqual(last.page, pages.length)
    })
  )
})
