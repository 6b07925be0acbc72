/**
 * Conformance of the `/v1` endpoints: spec §2 shapes, every row and numbered rule of §4, and the
 * error rules of §7, checked over HTTP against an in-process sandbox.
 */
import { assert, describe, layer } from "@effect/vitest"
import { Effect } from "effect"
import { expectRequests } from "../src/testing.ts"
import { admin, api, sandboxLayer } from "./fixtures.ts"

const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/
const DATE = /^\d{4}-\d{2}-\d{2}$/
const E164 = /^\+[1-9]\d{1,14}$/
const OWN_BOOKS = ["bk_00000001", "bk_00000002", "bk_00000003"]

/** Every page of a list, following `total_pages`. */
const crawl = (path: string, perPage: number) =>
  Effect.gen(function* () {
    const first = yield* api(`${path}${path.includes("?") ? "&" : "?"}per_page=${perPage}&page=1`)
    const items: Array<any> = [...first.json.data]
    for (let page = 2; page <= first.json.pagination.total_pages; page++) {
      const next = yield* api(`${path}${path.includes("?") ? "&" : "?"}per_page=${perPage}&page=${page}`)
      items.push(...next.json.data)
    }
    return { items, pagination: first.json.pagination }
  })

layer(sandboxLayer({ records: 3000 }), { excludeTestServices: true })("sandbox /v1 endpoints", (it) => {
  describe("§2 resources", () => {
    it.effect("§2.1: every list answers {data, pagination} with four integer pagination members", () =>
      Effect.gen(function* () {
        for (const path of [
          "/v1/books",
          "/v1/businesses",
          "/v1/project_templates",
          "/v1/annuity_contracts",
          "/v1/financial_accounts"
        ]) {
          const response = yield* api(path)
          assert.strictEqual(response.status, 200, path)
          assert.deepStrictEqual(Object.keys(response.json).toSorted(), ["data", "pagination"])
          const pagination = response.json.pagination
          assert.deepStrictEqual(Object.keys(pagination).toSorted(), [
            "current_page",
            "per_page",
            "total_count",
            "total_pages"
          ])
          for (const value of Object.values(pagination)) assert.isTrue(Number.isInteger(value), `${path} ${value}`)
          assert.isArray(response.json.data)
        }
      })
    )

    it.effect("§2.1: timestamps are ISO 8601 UTC date-times, dates are YYYY-MM-DD", () =>
      Effect.gen(function* () {
        const contracts = (yield* api("/v1/annuity_contracts?per_page=20")).json.data
        for (const contract of contracts) {
          assert.match(contract.created_at, ISO_MS)
          assert.match(contract.updated_at, ISO_MS)
          assert.match(contract.issued_on, DATE)
          assert.match(contract.established_on, DATE)
          for (const value of contract.values) assert.match(value.as_of_date, DATE)
        }
      })
    )

    it.effect("§2.1: phone numbers are E.164 strings", () =>
      Effect.gen(function* () {
        const businesses = (yield* api("/v1/businesses?per_page=100")).json.data
        const phones = businesses.flatMap((business: any) => business.phone_numbers)
        assert.isAbove(phones.length, 0)
        for (const phone of phones) assert.match(phone.phone_number, E164)
      })
    )

    it.effect("§2.3: businesses carry tags, emails, phones with extensions and addresses", () =>
      Effect.gen(function* () {
        const businesses = (yield* api("/v1/businesses?per_page=100")).json.data
        const business = businesses[0]
        for (const field of ["id", "book_id", "name", "created_at", "updated_at"]) assert.isString(business[field])
        for (const field of ["industry", "website_url", "tax_id", "additional_info"]) assert.property(business, field)
        const phones = businesses.flatMap((b: any) => b.phone_numbers)
        assert.isTrue(phones.some((phone: any) => typeof phone.extension === "string"))
        assert.isTrue(phones.every((phone: any) => "extension" in phone && typeof phone.is_primary === "boolean"))
        const tags = businesses.flatMap((b: any) => b.tags)
        assert.isAbove(tags.length, 0)
        for (const tag of tags) assert.deepStrictEqual(Object.keys(tag).toSorted(), ["id", "name"])
        for (const address of businesses.flatMap((b: any) => b.addresses)) {
          for (const field of ["address_type", "line1", "line2", "city", "state", "zip", "country_code"]) {
            assert.property(address, field)
          }
        }
      })
    )

    it.effect("§2.4: project templates carry milestones with outcomes and form fields", () =>
      Effect.gen(function* () {
        const templates = (yield* api("/v1/project_templates?per_page=100")).json.data
        const template = templates[0]
        assert.match(template.guid, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-a[0-9a-f]{3}-[0-9a-f]{12}$/)
        assert.include(["household", "contact", "business"], template.projectable_kind)
        assert.isBoolean(template.enable_kanban_view)
        assert.isTrue(Number.isInteger(template.order_index))
        assert.notProperty(template, "company")
        const milestone = template.project_milestones[0]
        assert.strictEqual(milestone.project_template_id, template.id)
        assert.isTrue(Number.isInteger(milestone.sort_order))
        assert.isString(milestone.auto_advance_trigger)
        assert.isAbove(milestone.project_milestone_outcomes.length, 0)
        const fields = templates.flatMap((t: any) =>
          t.project_milestones.flatMap((m: any) => m.project_milestone_form_fields)
        )
        assert.isAbove(fields.length, 0)
        for (const field of fields) {
          assert.isBoolean(field.required)
          assert.isArray(field.select_options)
        }
        const attachments = templates.flatMap((t: any) => t.attachments)
        for (const attachment of attachments) assert.isTrue(Number.isInteger(attachment.file_size))
      })
    )

    it.effect("§2.5: annuity contracts are masked, valued in dollar strings, without custodian data", () =>
      Effect.gen(function* () {
        const contracts = (yield* api("/v1/annuity_contracts?per_page=100")).json.data
        for (const contract of contracts) {
          assert.match(contract.contract_number, /^\*{4}\d{4}$/)
          for (const value of contract.values) {
            assert.match(value.amount, /^\d+\.\d{2}$/)
            assert.strictEqual(value.annuity_contract_id, contract.id)
          }
          for (const party of contract.parties) assert.strictEqual(party.participant_type, "Person")
          assert.include(OWN_BOOKS, contract.placements[0].book_id)
          assert.isObject(contract.current_values)
          assert.notProperty(contract, "custodian")
          assert.notProperty(contract, "attachments")
        }
      })
    )

    it.effect("§2.5a: financial accounts are masked, balances are integer cents", () =>
      Effect.gen(function* () {
        const accounts = (yield* api("/v1/financial_accounts?per_page=100")).json.data
        for (const account of accounts) {
          assert.match(account.account_number, /^\*{4}\d{4}$/)
          assert.isTrue(Number.isInteger(account.balance_in_cents))
          assert.match(account.balance_as_of, ISO_MS)
          assert.isArray(account.owner_ids)
          assert.isObject(account.custom_fields)
        }
      })
    )

    it.effect("§2.11 / §4 GET /v1/me: the user and api_access {auth_type, scope, can_write}", () =>
      Effect.gen(function* () {
        const me = (yield* api("/v1/me")).json
        assert.deepStrictEqual(Object.keys(me).toSorted(), ["api_access", "email", "first_name", "id", "last_name"])
        assert.strictEqual(me.id, "usr_00000001")
        assert.deepStrictEqual(me.api_access, {
          auth_type: "personal_access_token",
          scope: "read write",
          can_write: true
        })
      })
    )
  })

  describe("§4 endpoints", () => {
    it.effect("§4 GET /v1/books: books visible to the token, each with users[].id and teams[].id", () =>
      Effect.gen(function* () {
        const response = yield* api("/v1/books")
        assert.deepStrictEqual(
          response.json.data.map((book: any) => book.id),
          OWN_BOOKS
        )
        for (const book of response.json.data) {
          assert.isAbove(book.users.length, 0)
          assert.isAbove(book.teams.length, 0)
          for (const user of book.users) assert.isString(user.id)
          for (const team of book.teams) assert.isString(team.id)
        }
        const paged = yield* api("/v1/books?per_page=2&page=2")
        assert.deepStrictEqual(
          paged.json.data.map((book: any) => book.id),
          ["bk_00000003"]
        )
        assert.deepStrictEqual(paged.json.pagination, { current_page: 2, total_pages: 2, total_count: 3, per_page: 2 })
      })
    )

    it.effect("§4 GET /v1/books: a user in several companies sees only the token's company's books", () =>
      Effect.gen(function* () {
        const a = yield* admin
        const token = yield* a.createToken({ userId: "usr_00000001", companyId: "cmp_00000002" })
        const books = (yield* api("/v1/books", { token: token.token })).json.data
        // usr_00000001 belongs to cmp_00000002 but can only access its first book
        assert.deepStrictEqual(
          books.map((book: any) => book.id),
          ["bk_00000004"]
        )
      })
    )

    it.effect("§4 GET /v1/annuity_contracts and /v1/financial_accounts: page crawls see each record once", () =>
      Effect.gen(function* () {
        for (const path of ["/v1/annuity_contracts", "/v1/financial_accounts"]) {
          const { items, pagination } = yield* crawl(path, 37)
          const ids = items.map((item) => item.id)
          assert.strictEqual(ids.length, pagination.total_count)
          assert.strictEqual(new Set(ids).size, ids.length)
          assert.deepStrictEqual([...ids].toSorted(), ids, "ordered by id")
        }
      })
    )

    it.effect("§4 GET /v1/meetings/{id}: the meeting with transcript and event_participants", () =>
      Effect.gen(function* () {
        const a = yield* admin
        const meetings = (yield* a.records("meetings", { limit: 500 })) as ReadonlyArray<any>
        const withTranscript = meetings.find(
          (m) => OWN_BOOKS.includes(m.book_id) && m.transcript !== null && m.transcript_visible
        )
        const response = yield* api(`/v1/meetings/${withTranscript.id}`)
        assert.strictEqual(response.status, 200)
        const meeting = response.json
        assert.strictEqual(meeting.has_transcript, true)
        assert.isAbove(meeting.transcript.length, 0)
        assert.isArray(meeting.event_participants)
        assert.include(["instant", "calendar_event", "imported", "logged"], meeting.meeting_source)
        assert.isTrue(Number.isInteger(meeting.duration_seconds))
        for (const user of meeting.users)
          assert.deepStrictEqual(Object.keys(user).toSorted(), ["email", "first_name", "id", "last_name"])
        for (const household of meeting.households)
          assert.deepStrictEqual(Object.keys(household).toSorted(), ["id", "name"])
        assert.notProperty(meeting, "transcript_visible")
      })
    )

    it.effect("§4 GET /v1/meetings/{meeting_id}/transcript: segments, or null without a transcript", () =>
      Effect.gen(function* () {
        const a = yield* admin
        const meetings = ((yield* a.records("meetings", { limit: 500 })) as ReadonlyArray<any>).filter((m) =>
          OWN_BOOKS.includes(m.book_id)
        )
        const withTranscript = meetings.find((m) => m.transcript !== null && m.transcript_visible)
        const without = meetings.find((m) => m.transcript === null)
        const some = (yield* api(`/v1/meetings/${withTranscript.id}/transcript`)).json
        assert.strictEqual(some.meeting_id, withTranscript.id)
        const segment = some.transcript[0]
        assert.isString(segment.text)
        assert.isString(segment.participant.name)
        assert.match(segment.start_timestamp, ISO_MS)
        const none = (yield* api(`/v1/meetings/${without.id}/transcript`)).json
        assert.deepStrictEqual(none, { meeting_id: without.id, transcript: null })
      })
    )

    it.effect("§4 GET /v1/tasks/{id}: the task of §2.7", () =>
      Effect.gen(function* () {
        const response = yield* api("/v1/tasks/task_00000001")
        assert.strictEqual(response.status, 200)
        const task = response.json
        assert.include(["todo", "done"], task.status)
        assert.match(task.priority, /^[a-z]+_priority$/)
        assert.include(["household", "contact", "business"], task.record.type)
        assert.isString(task.record.name)
        if (task.assigned_to !== null)
          assert.deepStrictEqual(Object.keys(task.assigned_to).toSorted(), ["email", "id", "name"])
        assert.isFalse(task.assigned_to !== null && task.assigned_team !== null)
        assert.notProperty(task, "scheduled")
        assert.notProperty(task, "approved")
      })
    )

    it.effect("§4 GET notes under /v1/households, /v1/contacts and /v1/businesses parents", () =>
      Effect.gen(function* () {
        const a = yield* admin
        const notes = (yield* a.records("notes", { limit: 500 })) as ReadonlyArray<any>
        const visible = notes.filter((note) => OWN_BOOKS.includes(note.book_id))
        for (const [type, segment] of [
          ["Household", "households"],
          ["Contact", "contacts"],
          ["Business", "businesses"]
        ] as const) {
          const note = visible.find((n) => n.notable_type === type)
          assert.isDefined(note, `a note under a ${type}`)
          const response = yield* api(`/v1/${segment}/${note.notable_id}/notes/${note.id}`)
          assert.strictEqual(response.status, 200, `${type} note`)
          assert.strictEqual(response.json.id, note.id)
          assert.strictEqual(response.json.notable_id, note.notable_id)
          for (const field of ["pinned", "hidden"]) assert.isBoolean(response.json[field])
          assert.isArray(response.json.tag_ids)
        }
      })
    )

    it.effect("§4 POST /v1/contacts: creates the contact of §2.2 and answers 201", () =>
      Effect.gen(function* () {
        const response = yield* api("/v1/contacts", {
          method: "POST",
          json: {
            book_id: "bk_00000002",
            first_name: "Ada",
            last_name: "Lovelace",
            gender: "female",
            email_addresses: [{ email: "ada@example.com", email_type: "work", is_primary: true }],
            phone_numbers: [{ phone_number: "+15035550100", phone_type: "mobile", is_primary: true }],
            addresses: [{ line1: "1 Main St", city: "Portland", state: "OR", zip: "97201", country_code: "US" }],
            custom_fields: { risk_tolerance: "moderate" }
          }
        })
        assert.strictEqual(response.status, 201)
        assert.match(response.json.id, /^con_/)
        assert.strictEqual(response.json.book_id, "bk_00000002")
        assert.match(response.json.created_at, ISO_MS)
        assert.deepStrictEqual(response.json.custom_fields, { risk_tolerance: "moderate" })
        assert.strictEqual(response.json.email_addresses[0].email, "ada@example.com")
        assert.strictEqual(response.json.phone_numbers[0].phone_number, "+15035550100")
        yield* expectRequests(yield* admin, { method: "POST", path: "/v1/contacts", status: 201 }, 1)
      })
    )

    it.effect("§4 POST /v1/contacts: validation of book, names, enums, E.164 and custom field keys", () =>
      Effect.gen(function* () {
        const cases: ReadonlyArray<[unknown, RegExp]> = [
          [{ first_name: "No Book" }, /book_id/],
          [{ book_id: "bk_00000002" }, /first_name or a last_name/],
          [{ book_id: "bk_00000005", first_name: "Other company" }, /not a book this token can access/],
          [{ book_id: "bk_00000002", first_name: "X", gender: "robot" }, /gender/],
          [{ book_id: "bk_00000002", first_name: "X", phone_numbers: [{ phone_number: "503-555-0100" }] }, /E\.164/],
          [{ book_id: "bk_00000002", first_name: "X", custom_fields: { shoe_size: 44 } }, /shoe_size/]
        ]
        for (const [body, detail] of cases) {
          const response = yield* api("/v1/contacts", { method: "POST", json: body })
          assert.strictEqual(response.status, 422, JSON.stringify(body))
          assert.strictEqual(response.json.error, "validation_failed")
          assert.match(response.json.detail, detail)
        }
      })
    )

    it.effect("§4 POST /v1/prospects: book_id, first_name and last_name are required", () =>
      Effect.gen(function* () {
        const missing = yield* api("/v1/prospects", {
          method: "POST",
          json: { book_id: "bk_00000001", first_name: "Only" }
        })
        assert.strictEqual(missing.status, 422)
        assert.match(missing.json.detail, /last_name/)
        const created = yield* api("/v1/prospects", {
          method: "POST",
          json: { book_id: "bk_00000001", first_name: "Grace", last_name: "Hopper" }
        })
        assert.strictEqual(created.status, 201)
        assert.match(created.json.id, /^pro_/)
        assert.strictEqual(created.json.type, "prospect")
        assert.strictEqual(created.json.last_name, "Hopper")
      })
    )

    it.effect("§4 GET /v1/businesses: book_id, name, updated_since, page and per_page together", () =>
      Effect.gen(function* () {
        const all = (yield* crawl("/v1/businesses?book_id=bk_00000002", 100)).items
        const pick = all[Math.floor(all.length / 2)]
        const prefix = pick.name.slice(0, 4)
        const since = "2023-06-01T00:00:00Z"
        const expected = all
          .filter(
            (b: any) =>
              b.name.toLowerCase().startsWith(prefix.toLowerCase()) && b.updated_at >= "2023-06-01T00:00:00.000Z"
          )
          .map((b: any) => b.id)
          .toSorted()
        const response = yield* api(
          `/v1/businesses?book_id=bk_00000002&name=${encodeURIComponent(prefix)}&updated_since=${since}&page=1&per_page=100`
        )
        assert.strictEqual(response.status, 200)
        assert.deepStrictEqual(response.json.data.map((b: any) => b.id).toSorted(), expected)
        assert.strictEqual(response.json.pagination.total_count, expected.length)
      })
    )
  })

  describe("§4 rules", () => {
    it.effect("§4 rule 1: page defaults to 1 and per_page to 25", () =>
      Effect.gen(function* () {
        const response = yield* api("/v1/financial_accounts")
        assert.strictEqual(response.json.pagination.current_page, 1)
        assert.strictEqual(response.json.pagination.per_page, 25)
        assert.strictEqual(response.json.data.length, 25)
      })
    )

    it.effect("§4 rule 1: per_page over 100 is clamped to 100", () =>
      Effect.gen(function* () {
        for (const path of ["/v1/businesses", "/v1/financial_accounts", "/v1/annuity_contracts"]) {
          const response = yield* api(`${path}?per_page=500`)
          assert.strictEqual(response.status, 200)
          assert.strictEqual(response.json.pagination.per_page, 100)
          assert.strictEqual(response.json.data.length, Math.min(100, response.json.pagination.total_count))
        }
      })
    )

    it.effect("§4 rule 1: per_page below 1, page below 1 and non-integers are rejected with 400", () =>
      Effect.gen(function* () {
        for (const query of ["per_page=0", "per_page=-5", "page=0", "per_page=ten", "page=1.5"]) {
          const response = yield* api(`/v1/businesses?${query}`)
          assert.strictEqual(response.status, 400, query)
          assert.strictEqual(response.json.error, "invalid_parameter")
          assert.isString(response.json.detail)
        }
      })
    )

    it.effect("§4 rule 1: total_pages follows total_count; a page past the end is empty", () =>
      Effect.gen(function* () {
        const first = (yield* api("/v1/financial_accounts?per_page=7")).json.pagination
        assert.strictEqual(first.total_pages, Math.ceil(first.total_count / 7))
        const past = (yield* api(`/v1/financial_accounts?per_page=7&page=${first.total_pages + 1}`)).json
        assert.deepStrictEqual(past.data, [])
        assert.strictEqual(past.pagination.total_count, first.total_count)
      })
    )

    it.effect("§4 rule 2: book_id filters lists to that book", () =>
      Effect.gen(function* () {
        for (const path of ["/v1/businesses", "/v1/financial_accounts"]) {
          const { items } = yield* crawl(`${path}?book_id=bk_00000003`, 100)
          assert.isAbove(items.length, 0)
          for (const item of items) assert.strictEqual(item.book_id, "bk_00000003")
        }
        const contracts = (yield* crawl("/v1/annuity_contracts?book_id=bk_00000003", 100)).items
        for (const contract of contracts) assert.strictEqual(contract.placements[0].book_id, "bk_00000003")
        const unknown = yield* api("/v1/businesses?book_id=bk_00000009")
        assert.strictEqual(unknown.status, 404)
      })
    )

    it.effect("§4 rule 2: project templates with book_id include the company-wide templates", () =>
      Effect.gen(function* () {
        const all = (yield* api("/v1/project_templates?per_page=100")).json.data
        const filtered = (yield* api("/v1/project_templates?book_id=bk_00000002&per_page=100")).json.data
        const companyWide = all.filter((t: any) => t.book_id === null)
        assert.isAbove(companyWide.length, 0)
        assert.deepStrictEqual(
          filtered.map((t: any) => t.id),
          all.filter((t: any) => t.book_id === null || t.book_id === "bk_00000002").map((t: any) => t.id)
        )
        assert.isTrue(filtered.some((t: any) => t.book_id === "bk_00000002"))
        for (const template of filtered.filter((t: any) => t.book_id === null)) {
          assert.isNull(template.book_name)
          assert.isNull(template.book_initials)
        }
      })
    )

    it.effect("§4 GET /v1/project_templates: projectable_kind filters; other values are rejected", () =>
      Effect.gen(function* () {
        for (const kind of ["household", "contact", "business"]) {
          const templates = (yield* api(`/v1/project_templates?projectable_kind=${kind}&per_page=100`)).json.data
          for (const template of templates) assert.strictEqual(template.projectable_kind, kind)
        }
        const bad = yield* api("/v1/project_templates?projectable_kind=trust")
        assert.strictEqual(bad.status, 400)
      })
    )

    it.effect("§4 rule 3: name filters match a prefix, not an arbitrary substring", () =>
      Effect.gen(function* () {
        const all = (yield* crawl("/v1/businesses", 100)).items
        const name: string = all[0].name
        const byPrefix = (yield* crawl(
          `/v1/businesses?name=${encodeURIComponent(name.slice(0, 3).toLowerCase())}`,
          100
        )).items
        assert.isTrue(byPrefix.some((b: any) => b.id === all[0].id))
        for (const business of byPrefix) {
          assert.isTrue(business.name.toLowerCase().startsWith(name.slice(0, 3).toLowerCase()))
        }
        // the middle word of a generated name ("Dental", "Logistics") never starts a name
        const middle = name.split(" ")[1]!
        const bySubstring = yield* api(`/v1/businesses?name=${encodeURIComponent(middle)}`)
        assert.strictEqual(bySubstring.json.pagination.total_count, 0)
      })
    )

    it.effect("§4 rule 4: updated_since takes an ISO 8601 date-time; Unix seconds are rejected", () =>
      Effect.gen(function* () {
        const since = "2024-03-01T00:00:00Z"
        const { items } = yield* crawl(`/v1/businesses?updated_since=${since}`, 50)
        assert.isAbove(items.length, 0)
        for (const business of items) assert.isTrue(business.updated_at >= "2024-03-01T00:00:00.000Z")
        const updated = items.map((b: any) => b.updated_at)
        assert.deepStrictEqual([...updated].toSorted(), updated, "ordered by updated_at")
        const offset = yield* api(
          `/v1/businesses?updated_since=${encodeURIComponent("2024-03-01T02:00:00+02:00")}&per_page=1`
        )
        assert.strictEqual(offset.json.pagination.total_count, items.length)
        for (const bad of ["1709251200", "1709251200.5", "yesterday", "2024-03-01"]) {
          const response = yield* api(`/v1/businesses?updated_since=${bad}`)
          assert.strictEqual(response.status, 400, bad)
          assert.strictEqual(response.json.error, "invalid_parameter")
        }
      })
    )

    it.effect("§4 rule 5: no top-level note endpoint; a note is read only under its own parent", () =>
      Effect.gen(function* () {
        const a = yield* admin
        const notes = ((yield* a.records("notes", { limit: 500 })) as ReadonlyArray<any>).filter((n) =>
          OWN_BOOKS.includes(n.book_id)
        )
        const note = notes.find((n) => n.notable_type === "Household")
        assert.strictEqual((yield* api(`/v1/notes/${note.id}`)).status, 404)
        assert.strictEqual((yield* api(`/v1/notes`)).status, 404)
        const other = notes.find((n) => n.notable_type === "Household" && n.notable_id !== note.notable_id)
        assert.strictEqual((yield* api(`/v1/households/${other.notable_id}/notes/${note.id}`)).status, 404)
        assert.strictEqual((yield* api(`/v1/contacts/${note.notable_id}/notes/${note.id}`)).status, 404)
        assert.strictEqual((yield* api(`/v1/households/${note.notable_id}/notes/${note.id}`)).status, 200)
      })
    )

    it.effect("§4 rule 9: PATCH is accepted only where documented (no v1 PATCH endpoint: 405)", () =>
      Effect.gen(function* () {
        const response = yield* api("/v1/contacts", { method: "PATCH", json: { first_name: "x" } })
        assert.strictEqual(response.status, 405)
        assert.strictEqual(response.json.error, "method_not_allowed")
      })
    )

    it.effect("§4: without Content-Type: application/json the body is ignored and the fields arrive empty", () =>
      Effect.gen(function* () {
        const body = JSON.stringify({ book_id: "bk_00000001", first_name: "Ignored", last_name: "Body" })
        const plain = yield* api("/v1/prospects", { method: "POST", body, headers: { "content-type": "text/plain" } })
        assert.strictEqual(plain.status, 422)
        assert.match(plain.json.detail, /book_id/)
        const json = yield* api("/v1/prospects", {
          method: "POST",
          body,
          headers: { "content-type": "application/json; charset=utf-8" }
        })
        assert.strictEqual(json.status, 201)
      })
    )
  })

  describe("§7 errors", () => {
    it.effect("§7: errors have the body {error, detail}; unknown ids are 404", () =>
      Effect.gen(function* () {
        for (const path of [
          "/v1/meetings/mtg_99999999",
          "/v1/meetings/nonsense/transcript",
          "/v1/tasks/task_99999999",
          "/v1/households/hh_00000001/notes/note_99999999"
        ]) {
          const response = yield* api(path)
          assert.strictEqual(response.status, 404, path)
          assert.deepStrictEqual(Object.keys(response.json).toSorted(), ["detail", "error"])
          assert.strictEqual(response.json.error, "not_found")
          assert.strictEqual(response.headers["content-type"], "application/json")
        }
      })
    )

    it.effect("§7: records of books the token cannot access answer 404 like unknown ids", () =>
      Effect.gen(function* () {
        const a = yield* admin
        const foreign = ((yield* a.records("tasks", { bookId: "bk_00000007" })) as ReadonlyArray<any>)[0]
        assert.strictEqual((yield* api(`/v1/tasks/${foreign.id}`)).status, 404)
      })
    )

    it.effect("§7: a malformed JSON body is 400 invalid_json", () =>
      Effect.gen(function* () {
        for (const body of ['{"book_id": ', "[1,2]", ""]) {
          const response = yield* api("/v1/contacts", {
            method: "POST",
            body,
            headers: { "content-type": "application/json" }
          })
          assert.strictEqual(response.status, 400, body)
          assert.strictEqual(response.json.error, "invalid_json")
        }
      })
    )

    it.effect("§9: the API version is the path prefix /v1; other versions do not exist", () =>
      Effect.gen(function* () {
        assert.strictEqual((yield* api("/v1/me")).status, 200)
        const v2 = yield* api("/v2/me")
        assert.strictEqual(v2.status, 404)
        assert.strictEqual(v2.json.error, "not_found")
      })
    )

    it.effect("§7: an unknown path is 404 with the error body", () =>
      Effect.gen(function* () {
        const response = yield* api("/v1/households")
        assert.strictEqual(response.status, 404)
        assert.strictEqual(response.json.error, "not_found")
      })
    )
  })
})
