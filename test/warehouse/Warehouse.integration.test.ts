/**
 * The Warehouse against a real PostgreSQL: the forward-only guard, child tables replaced with their
 * parent (and rolled back with it), `raw` kept whole, undecodable records kept with their error,
 * soft deletes and tombstones that late snapshots cannot revive, and reference-table merges.
 */
import { assert, layer } from "@effect/vitest"
import { DateTime, Effect, Layer, Option } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { Warehouse } from "../../src/warehouse/Warehouse.ts"
import { type JsonObject, resourceFixture } from "../fixtures/Fixtures.ts"
import { TestDatabase } from "../support/TestDatabase.ts"

const TestWarehouse = Warehouse.layer.pipe(Layer.provideMerge(TestDatabase))

const business = (id: string, updatedAt: string, overrides: JsonObject = {}): JsonObject => ({
  ...resourceFixture("business"),
  id,
  updated_at: updatedAt,
  ...overrides
})

const task = (id: string, updatedAt: string, overrides: JsonObject = {}): JsonObject => ({
  ...resourceFixture("task"),
  id,
  updated_at: updatedAt,
  ...overrides
})

const account = (id: string, updatedAt: string, name: string): JsonObject => ({
  ...resourceFixture("financial_account"),
  id,
  updated_at: updatedAt,
  name
})

const at = (iso: string) => DateTime.makeUnsafe(iso)

const childRows = (table: string, parentColumn: string, parentId: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient
    return yield* sql.unsafe<JsonObject>(`SELECT * FROM crm.${table} WHERE ${parentColumn} = $1 ORDER BY ordinal`, [
      parentId
    ])
  })

const stored = (resource: "businesses" | "tasks" | "users" | "books", id: string) =>
  Effect.flatMap(
    Warehouse.use((w) => w.row(resource, id)),
    (row) => Option.match(row, { onNone: () => Effect.die(`no ${resource} row ${id}`), onSome: Effect.succeed })
  )

layer(TestWarehouse)("Warehouse", (it) => {
  it.effect("never lets an older snapshot overwrite a newer one, and an equal one changes nothing", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      const v2 = business("bus_fwd", "2025-03-10T12:00:00Z", { name: "Version 2" })
      assert.deepStrictEqual(yield* warehouse.upsert("businesses", [v2], { source: "poll" }), {
        inserted: 1,
        updated: 0,
        unchanged: 0,
        skipped: 0,
        rejected: 0
      })
      const first = yield* stored("businesses", "bus_fwd")

      const v1 = business("bus_fwd", "2025-03-09T12:00:00Z", { name: "Version 1" })
      const older = yield* warehouse.upsert("businesses", [v1], { source: "crawl" })
      assert.strictEqual(older.skipped, 1)
      const afterOlder = yield* stored("businesses", "bus_fwd")
      assert.strictEqual(afterOlder.name, "Version 2")
      assert.strictEqual(afterOlder.source, "poll")

      const same = yield* warehouse.upsert("businesses", [v2], { source: "reconcile" })
      assert.strictEqual(same.unchanged, 1)
      const afterSame = yield* stored("businesses", "bus_fwd")
      assert.deepStrictEqual(
        afterSame.synced_at,
        first.synced_at,
        "an identical snapshot does not even touch synced_at"
      )
      assert.strictEqual(afterSame.source, "poll")

      // Same updated_at but a different body (a field added without a timestamp bump): written.
      const sameTimeOtherBody = { ...v2, industry: "Hospitality" }
      assert.strictEqual((yield* warehouse.upsert("businesses", [sameTimeOtherBody], { source: "crawl" })).updated, 1)
      assert.strictEqual((yield* stored("businesses", "bus_fwd")).industry, "Hospitality")

      const v3 = business("bus_fwd", "2025-03-11T08:00:00.5+01:00", { name: "Version 3" })
      assert.strictEqual((yield* warehouse.upsert("businesses", [v3], { source: "webhook" })).updated, 1)
      const afterNewer = yield* stored("businesses", "bus_fwd")
      assert.strictEqual(afterNewer.name, "Version 3")
      assert.deepStrictEqual(afterNewer.updated_at, new Date("2025-03-11T07:00:00.500Z"))
      assert.strictEqual(afterNewer.source, "webhook")
    })
  )

  it.effect("counts a batch without child lists the same way: new, newer, identical and older copies", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      const first = yield* warehouse.upsert(
        "financial_accounts",
        [account("fa_c1", "2025-03-10T12:00:00Z", "One"), account("fa_c2", "2025-03-10T12:00:00Z", "Two")],
        { source: "crawl" }
      )
      assert.deepStrictEqual(first, { inserted: 2, updated: 0, unchanged: 0, skipped: 0, rejected: 0 })
      const second = yield* warehouse.upsert(
        "financial_accounts",
        [
          account("fa_c1", "2025-03-09T12:00:00Z", "One, older"),
          account("fa_c2", "2025-03-10T12:00:00Z", "Two"),
          account("fa_c3", "2025-03-10T12:00:00Z", "Three")
        ],
        { source: "crawl" }
      )
      assert.deepStrictEqual(second, { inserted: 1, updated: 0, unchanged: 1, skipped: 1, rejected: 0 })
      const third = yield* warehouse.upsert(
        "financial_accounts",
        [account("fa_c1", "2025-03-11T12:00:00Z", "One, newer")],
        {
          source: "crawl"
        }
      )
      assert.deepStrictEqual(third, { inserted: 0, updated: 1, unchanged: 0, skipped: 0, rejected: 0 })
      const row = yield* Warehouse.use((w) => w.row("financial_accounts", "fa_c1"))
      assert.strictEqual(Option.getOrThrow(row).name, "One, newer")
      // Prospects carry no updated_at: the same snapshot again is unchanged, never skipped.
      const prospect = { ...resourceFixture("prospect"), id: "pro_c1" }
      yield* warehouse.upsert("prospects", [prospect], { source: "webhook" })
      assert.deepStrictEqual(yield* warehouse.upsert("prospects", [prospect], { source: "webhook" }), {
        inserted: 0,
        updated: 0,
        unchanged: 1,
        skipped: 0,
        rejected: 0
      })
    })
  )

  it.effect("keeps the newest copy of an id given twice in one batch; the counts add up", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      const result = yield* warehouse.upsert(
        "businesses",
        [
          business("bus_dup", "2025-03-10T12:00:00Z", { name: "newest" }),
          business("bus_dup", "2025-03-09T12:00:00Z", { name: "older" }),
          business("bus_other", "2025-03-09T12:00:00Z")
        ],
        { source: "crawl" }
      )
      assert.deepStrictEqual(result, { inserted: 2, updated: 0, unchanged: 0, skipped: 1, rejected: 0 })
      assert.strictEqual((yield* stored("businesses", "bus_dup")).name, "newest")
    })
  )

  it.effect("replaces child rows with the parent, and leaves them when the snapshot is older or the list absent", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      yield* warehouse.upsert("businesses", [business("bus_kids", "2025-03-01T00:00:00Z")], { source: "poll" })
      assert.deepStrictEqual(
        (yield* childRows("business_tags", "business_id", "bus_kids")).map((r) => r.tag_id),
        ["tag_A1", "tag_B7"]
      )
      const phones = yield* childRows("business_phone_numbers", "business_id", "bus_kids")
      assert.strictEqual(phones[0]!.extension, "204")
      assert.strictEqual(phones[0]!.is_e164, true)

      const newer = business("bus_kids", "2025-03-02T00:00:00Z", {
        tags: [{ id: "tag_Q", name: "Priority" }],
        phone_numbers: [{ phone_number: "415-555-0100", phone_type: "fax", is_primary: false, extension: null }],
        email_addresses: []
      })
      yield* warehouse.upsert("businesses", [newer], { source: "poll" })
      assert.deepStrictEqual(
        (yield* childRows("business_tags", "business_id", "bus_kids")).map((r) => [r.ordinal, r.tag_id, r.name]),
        [[0, "tag_Q", "Priority"]]
      )
      const replacedPhones = yield* childRows("business_phone_numbers", "business_id", "bus_kids")
      assert.deepStrictEqual(
        replacedPhones.map((r) => [r.phone_number, r.is_e164]),
        [["415-555-0100", false]]
      )
      assert.lengthOf(yield* childRows("business_email_addresses", "business_id", "bus_kids"), 0)

      // A newer snapshot with the same lists leaves their rows as they are (not even rewritten).
      const sql = yield* SqlClient
      const xmins = () =>
        sql<{ xmin: string }>`SELECT xmin::text AS xmin FROM crm.business_tags WHERE business_id = 'bus_kids'`
      const before = yield* xmins()
      yield* warehouse.upsert("businesses", [{ ...newer, updated_at: "2025-03-02T06:00:00Z", name: "Renamed" }], {
        source: "poll"
      })
      assert.strictEqual((yield* stored("businesses", "bus_kids")).name, "Renamed")
      assert.deepStrictEqual(yield* xmins(), before)

      // An older snapshot is skipped, and so are its children.
      yield* warehouse.upsert(
        "businesses",
        [business("bus_kids", "2025-03-01T12:00:00Z", { tags: [{ id: "tag_OLD", name: "Old" }] })],
        { source: "crawl" }
      )
      assert.deepStrictEqual(
        (yield* childRows("business_tags", "business_id", "bus_kids")).map((r) => r.tag_id),
        ["tag_Q"]
      )

      // A newer snapshot without the `tags` key leaves the stored tags alone.
      const { tags: _, ...withoutTags } = business("bus_kids", "2025-03-03T00:00:00Z", { name: "No tags key" })
      yield* warehouse.upsert("businesses", [withoutTags], { source: "poll" })
      assert.strictEqual((yield* stored("businesses", "bus_kids")).name, "No tags key")
      assert.deepStrictEqual(
        (yield* childRows("business_tags", "business_id", "bus_kids")).map((r) => r.tag_id),
        ["tag_Q"]
      )
    })
  )

  it.effect("keeps a snapshot's webhook-only lists when a read omits them; a null transcript clears its segments", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      yield* warehouse.upsert("meetings", [resourceFixture("meeting")], { source: "webhook" })
      // GET /v1/meetings/{id} has no contacts or businesses (spec §2.6).
      const { contacts: _c, businesses: _b, ...read } = resourceFixture("meeting")
      yield* warehouse.upsert("meetings", [{ ...read, updated_at: "2025-03-13T00:00:00Z", households: [] }], {
        source: "webhook"
      })
      assert.deepStrictEqual(
        (yield* childRows("meeting_contacts", "meeting_id", "mtg_4410")).map((r) => r.contact_id),
        ["con_5TQ81"]
      )
      assert.lengthOf(yield* childRows("meeting_households", "meeting_id", "mtg_4410"), 0)

      yield* warehouse.upsert("meeting_transcripts", [resourceFixture("meeting_transcript")], { source: "webhook" })
      assert.lengthOf(yield* childRows("meeting_transcript_segments", "meeting_id", "mtg_4410"), 2)
      yield* warehouse.upsert("meeting_transcripts", [{ meeting_id: "mtg_4410", transcript: null }], {
        source: "webhook"
      })
      const transcript = Option.getOrThrow(yield* warehouse.row("meeting_transcripts", "mtg_4410"))
      assert.strictEqual(transcript.has_transcript, false)
      assert.lengthOf(yield* childRows("meeting_transcript_segments", "meeting_id", "mtg_4410"), 0)
    })
  )

  it.effect("rolls the parent back with a failing child insert, keeps the record with the error, writes the rest", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      const sql = yield* SqlClient
      yield* warehouse.upsert("businesses", [business("bus_atomic", "2025-03-01T00:00:00Z", { name: "Before" })], {
        source: "poll"
      })
      // A trigger stands in for any failure while the children are written.
      yield* sql.unsafe(`CREATE FUNCTION crm.refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.name = 'boom' THEN RAISE EXCEPTION 'tag boom refused'; END IF;
          RETURN NEW;
        END $$`)
      yield* sql.unsafe(
        `CREATE TRIGGER refuse_boom BEFORE INSERT ON crm.business_tags FOR EACH ROW EXECUTE FUNCTION crm.refuse_boom()`
      )
      const result = yield* warehouse
        .upsert(
          "businesses",
          [
            business("bus_atomic", "2025-03-05T00:00:00Z", { name: "After", tags: [{ id: "tag_X", name: "boom" }] }),
            business("bus_fine", "2025-03-05T00:00:00Z", { tags: [{ id: "tag_Y", name: "fine" }] })
          ],
          { source: "poll" }
        )
        .pipe(
          Effect.ensuring(
            Effect.andThen(
              sql.unsafe(`DROP TRIGGER refuse_boom ON crm.business_tags`),
              sql.unsafe(`DROP FUNCTION crm.refuse_boom()`)
            ).pipe(Effect.orDie)
          )
        )
      assert.deepStrictEqual(result, { inserted: 1, updated: 0, unchanged: 0, skipped: 0, rejected: 1 })

      const parent = yield* stored("businesses", "bus_atomic")
      assert.strictEqual(parent.name, "Before", "the parent's update was rolled back with its children")
      assert.deepStrictEqual(parent.updated_at, new Date("2025-03-01T00:00:00Z"))
      assert.deepStrictEqual(
        (yield* childRows("business_tags", "business_id", "bus_atomic")).map((r) => r.tag_id),
        ["tag_A1", "tag_B7"]
      )
      assert.deepStrictEqual(
        (yield* childRows("business_tags", "business_id", "bus_fine")).map((r) => r.name),
        ["fine"]
      )
      const [refused] = yield* warehouse.undecodable("businesses")
      assert.strictEqual(refused!.recordId, "bus_atomic")
      assert.include(refused!.error, "P0001")
      assert.include(refused!.error, "tag boom refused")
      assert.strictEqual((refused!.raw as JsonObject).name, "After")
    })
  )

  it.effect("keeps unknown fields in raw, nested ones included", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      const received = business("bus_raw", "2025-03-01T00:00:00Z", {
        loyalty_score: 7,
        email_addresses: [{ email: "a@b.example", email_type: "work", is_primary: true, verified: true }]
      })
      yield* warehouse.upsert("businesses", [received], { source: "crawl" })
      const found = yield* warehouse.findById("businesses", "bus_raw")
      assert.isTrue(Option.isSome(found))
      const record = Option.getOrThrow(found)
      assert.deepStrictEqual(record.raw, received)
      assert.strictEqual((record.raw as JsonObject).loyalty_score, 7)
      assert.strictEqual(record.record?.email_addresses[0]?.email, "a@b.example")
    })
  )

  it.effect("stores undecodable records with their error, once per distinct record, and writes the good ones", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      const tasksBefore = yield* warehouse.count("tasks")
      const batch: ReadonlyArray<unknown> = [
        task("tsk_good", "2025-03-01T00:00:00Z"),
        task("tsk_bad_time", "last Tuesday"),
        { title: "no id at all", updated_at: "2025-03-01T00:00:00Z" },
        "not an object",
        task("tsk_nul", "2025-03-01T00:00:00Z", { description: "a\u0000b" }),
        task("tsk_bad_cents", "2025-03-01T00:00:00Z", { deadline_at: 1741000000 }),
        task("tsk_lone", "2025-03-01T00:00:00Z", { title: "half \ud800 a pair", extra: { "k\u0000": 1 } }),
        task("tsk_both", "yesterday", { description: "\u0000" }),
        task("tsk_escaped", "2025-03-01T00:00:00Z", { description: "a control \u001b and a backslash-u \\u0000" })
      ]
      const result = yield* warehouse.upsert("tasks", batch, { source: "webhook" })
      assert.deepStrictEqual(result, { inserted: 2, updated: 0, unchanged: 0, skipped: 0, rejected: 7 })
      assert.strictEqual(yield* warehouse.count("tasks"), tasksBefore + 2)

      const kept = yield* warehouse.undecodable("tasks")
      assert.lengthOf(kept, 7)
      const byId = new Map(kept.map((r) => [r.recordId, r]))
      assert.include(byId.get("tsk_bad_time")!.error, "updated_at")
      assert.include(byId.get("tsk_bad_cents")!.error, "deadline_at")
      assert.include(byId.get(null)!.error, "id")
      assert.include(byId.get("tsk_nul")!.error, "U+0000")
      assert.strictEqual((byId.get("tsk_nul")!.raw as JsonObject).description, "a\uFFFDb")
      assert.include(byId.get("tsk_lone")!.error, "unpaired surrogate")
      assert.strictEqual((byId.get("tsk_lone")!.raw as JsonObject).title, "half \uFFFD a pair")
      assert.include(byId.get("tsk_both")!.error, "U+0000")
      assert.strictEqual((byId.get("tsk_bad_time")!.raw as JsonObject).title, "Send RMD worksheet")
      assert.isTrue(kept.every((r) => r.source === "webhook" && r.occurrences === 1))

      // Seen again (the next poll): counted, not duplicated.
      yield* warehouse.upsert("tasks", batch, { source: "poll" })
      const again = yield* warehouse.undecodable("tasks")
      assert.lengthOf(again, 7)
      assert.isTrue(again.every((r) => r.occurrences === 2))
    })
  )

  it.effect("soft-deletes, never resurrects with a late snapshot, and undeletes with a newer one", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      yield* warehouse.upsert("tasks", [task("tsk_del", "2025-03-01T00:00:00Z")], { source: "webhook" })
      const live = yield* warehouse.count("tasks")
      const deletedAt = at("2025-03-05T00:00:00Z")
      assert.deepStrictEqual(yield* warehouse.markDeleted("tasks", ["tsk_del"], deletedAt, { source: "webhook" }), {
        deleted: 1,
        tombstoned: 0
      })
      assert.strictEqual(yield* warehouse.count("tasks"), live - 1)
      assert.strictEqual(yield* warehouse.count("tasks", { includeDeleted: true }), live)
      // A repeated delete changes nothing; the first deletion time stays.
      assert.deepStrictEqual(
        yield* warehouse.markDeleted("tasks", ["tsk_del"], at("2025-03-06T00:00:00Z"), { source: "webhook" }),
        { deleted: 0, tombstoned: 0 }
      )

      // A snapshot prepared before the deletion arrives late: its data is newer, but it stays deleted.
      const late = task("tsk_del", "2025-03-04T00:00:00Z", { title: "edited before deletion" })
      assert.strictEqual((yield* warehouse.upsert("tasks", [late], { source: "webhook" })).updated, 1)
      const afterLate = yield* stored("tasks", "tsk_del")
      assert.strictEqual(afterLate.title, "edited before deletion")
      assert.deepStrictEqual(afterLate.deleted_at, new Date("2025-03-05T00:00:00Z"))

      // A snapshot from after the deletion means the record is back.
      const back = task("tsk_del", "2025-03-07T00:00:00Z", { title: "restored" })
      yield* warehouse.upsert("tasks", [back], { source: "poll" })
      assert.strictEqual((yield* stored("tasks", "tsk_del")).deleted_at, null)
    })
  )

  it.effect("records a delete for an id never seen as a tombstone that a late snapshot cannot revive", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      const result = yield* warehouse.markDeleted("tasks", ["tsk_ghost", "tsk_ghost"], at("2025-03-05T00:00:00Z"), {
        source: "webhook"
      })
      assert.deepStrictEqual(result, { deleted: 0, tombstoned: 1 })
      const tombstone = yield* warehouse.findById("tasks", "tsk_ghost")
      assert.strictEqual(Option.getOrThrow(tombstone).record, null)
      assert.strictEqual(Option.getOrThrow(tombstone).raw, null)

      const created = task("tsk_ghost", "2025-03-04T00:00:00Z")
      assert.strictEqual((yield* warehouse.upsert("tasks", [created], { source: "webhook" })).updated, 1)
      const filled = Option.getOrThrow(yield* warehouse.findById("tasks", "tsk_ghost"))
      assert.strictEqual(filled.record?.title, "Send RMD worksheet")
      assert.isNotNull(filled.deletedAt, "still deleted")

      // A crawl sees it again: the crawler undeletes it explicitly.
      assert.strictEqual(yield* warehouse.undelete("tasks", ["tsk_ghost", "tsk_unknown"], { source: "crawl" }), 1)
      const undeleted = Option.getOrThrow(yield* warehouse.findById("tasks", "tsk_ghost"))
      assert.strictEqual(undeleted.deletedAt, null)
      assert.strictEqual(undeleted.source, "crawl")
    })
  )

  it.effect("fills users, teams and households from the records that mention them, merging what each adds", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      yield* warehouse.upsert("books", [resourceFixture("book")], { source: "poll" })
      assert.deepStrictEqual(
        (yield* childRows("book_users", "book_id", "book_3F9A")).map((r) => r.user_id),
        ["usr_7Q2M", "usr_8R3N"]
      )
      assert.strictEqual((yield* stored("users", "usr_7Q2M")).name, "Jordan Lee")
      assert.strictEqual(yield* warehouse.count("teams"), 1)

      // The meeting knows the user's email but not their name: the name stays.
      yield* warehouse.upsert("meetings", [resourceFixture("meeting")], { source: "webhook" })
      const user = yield* stored("users", "usr_7Q2M")
      assert.strictEqual(user.name, "Jordan Lee")
      assert.strictEqual(user.email, "jordan.lee@advisors.example")
      assert.deepStrictEqual(user.raw, {
        id: "usr_7Q2M",
        name: "Jordan Lee",
        email: "jordan.lee@advisors.example",
        first_name: "Jordan",
        last_name: "Lee"
      })
      const household = yield* warehouse.findById("households", "hh_204")
      assert.strictEqual(Option.getOrThrow(household).record?.name, "Okafor Household")

      // The same sightings again add nothing.
      const again = yield* warehouse.upsert("users", [{ id: "usr_7Q2M", name: "Jordan Lee" }], { source: "poll" })
      assert.strictEqual(again.unchanged, 1)

      // Notes and accounts mention households by id only.
      yield* warehouse.upsert("notes", [{ ...resourceFixture("note"), household_id: "hh_note_only" }], {
        source: "webhook"
      })
      assert.isTrue(Option.isSome(yield* warehouse.row("households", "hh_note_only")))
    })
  )

  it.effect("records client.updated changed_fields once per delivery", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      const sql = yield* SqlClient
      const change = {
        hookId: "msg_2b7",
        clientId: "cli_3001",
        changedFields: ["tier", "aum"],
        receivedAt: at("2025-03-12T18:00:00Z"),
        subscriptionId: "whsub_01HZX4K2M9",
        bookId: "book_3F9A"
      }
      assert.isTrue(yield* warehouse.recordClientChange(change))
      assert.isFalse(yield* warehouse.recordClientChange(change))
      const rows = yield* sql<{ changed_fields: Array<string> }>`
        SELECT changed_fields FROM crm.client_changes WHERE client_id = 'cli_3001'`
      assert.deepStrictEqual(
        rows.map((r) => r.changed_fields),
        [["tier", "aum"]]
      )
    })
  )
})
