/**
 * The migration against the table descriptors: every contract table and descriptor column exists
 * with its type, and every resource fixture lands in every typed column and child table.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer, Result, Schema } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { splitStatements } from "../../src/warehouse/Migrations.ts"
import { type PgType, type Resource, type TableDescriptor, Tables } from "../../src/warehouse/Tables.ts"
import { Warehouse } from "../../src/warehouse/Warehouse.ts"
import { type JsonObject, type ResourceFixture, resourceFixture } from "../fixtures/Fixtures.ts"
import { TestDatabase } from "../support/TestDatabase.ts"
import { readFileSync } from "node:fs"

const TestWarehouse = Warehouse.layer.pipe(Layer.provideMerge(TestDatabase))

/** information_schema's name for each column type. */
const informationSchemaType: Record<PgType, string> = {
  text: "text",
  "text[]": "ARRAY",
  integer: "integer",
  bigint: "bigint",
  numeric: "numeric",
  boolean: "boolean",
  date: "date",
  timestamptz: "timestamp with time zone",
  jsonb: "jsonb"
}

const commonColumns: ReadonlyArray<readonly [string, string]> = [
  ["id", "text"],
  ["updated_at", "timestamp with time zone"],
  ["deleted_at", "timestamp with time zone"],
  ["synced_at", "timestamp with time zone"],
  ["source", "text"],
  ["raw", "jsonb"]
]

const fixtureOf: Record<Resource, ResourceFixture> = {
  books: "book",
  users: "user",
  teams: "team",
  households: "household",
  businesses: "business",
  contacts: "contact",
  prospects: "prospect",
  clients: "client",
  meetings: "meeting",
  meeting_transcripts: "meeting_transcript",
  tasks: "task",
  notes: "note",
  project_templates: "project_template",
  annuity_contracts: "annuity_contract",
  financial_accounts: "financial_account"
}

const decoded = (table: TableDescriptor<any>, input: unknown) => {
  const result = Schema.decodeUnknownResult(table.schema)(input)
  if (Result.isFailure(result)) return assert.fail(result.failure.message)
  return result.success
}

/** A stored value as comparable with the decoded record's value for a column of this type. */
const comparable = (type: PgType, value: unknown): unknown => {
  if (value === null || value === undefined) return null
  if (type === "timestamptz") return value instanceof Date ? value.getTime() : Date.parse(String(value))
  if (type === "bigint") return BigInt(value as number | bigint)
  return value
}

const allTables = Object.values(Tables) as ReadonlyArray<TableDescriptor<any>>

layer(TestWarehouse)("warehouse schema", (it) => {
  it.effect("has every table of the contract, every descriptor column with its type, and nothing unplanned", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const rows = yield* sql<{ table_name: string; column_name: string; data_type: string; is_nullable: string }>`
        SELECT table_name, column_name, data_type, is_nullable FROM information_schema.columns
        WHERE table_schema = 'crm' AND table_name IN (
          SELECT table_name FROM information_schema.tables WHERE table_schema = 'crm' AND table_type = 'BASE TABLE')`
      const columns = new Map<string, Map<string, string>>()
      for (const row of rows) {
        if (!columns.has(row.table_name)) columns.set(row.table_name, new Map())
        columns.get(row.table_name)!.set(row.column_name, row.data_type)
      }
      const contract = [
        "books",
        "users",
        "teams",
        "businesses",
        "contacts",
        "prospects",
        "clients",
        "households",
        "meetings",
        "meeting_transcripts",
        "tasks",
        "notes",
        "project_templates",
        "annuity_contracts",
        "financial_accounts"
      ]
      assert.sameMembers(
        allTables.map((t) => t.table),
        contract
      )
      const expected = new Set(["client_changes"])
      for (const table of allTables) {
        expected.add(table.table)
        const actual = columns.get(table.table)
        assert.isDefined(actual, table.table)
        for (const [name, type] of commonColumns) assert.strictEqual(actual!.get(name), type, `${table.table}.${name}`)
        for (const [name, type] of Object.entries(table.columns)) {
          assert.strictEqual(actual!.get(name), informationSchemaType[type], `${table.table}.${name}`)
        }
        for (const child of table.children) {
          expected.add(child.table)
          const parent = table.table === "businesses" ? "business" : table.table.replace(/s$/, "")
          assert.isTrue(child.table.startsWith(`${parent}_`), `${child.table} is named <parent>_<list>`)
          const childColumns = columns.get(child.table)
          assert.isDefined(childColumns, child.table)
          assert.strictEqual(childColumns!.get(child.parentColumn), "text")
          for (const [name, type] of Object.entries(child.columns)) {
            assert.strictEqual(childColumns!.get(name), informationSchemaType[type], `${child.table}.${name}`)
          }
        }
      }
      assert.sameMembers([...columns.keys()], [...expected])
    })
  )

  it.effect("writes every resource fixture into its typed columns and child tables", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      const sql = yield* SqlClient
      for (const [resource, fixture] of Object.entries(fixtureOf) as ReadonlyArray<[Resource, ResourceFixture]>) {
        const table = Tables[resource] as TableDescriptor<any>
        const raw = resourceFixture(fixture)
        const result = yield* warehouse.upsert(resource, [raw], { source: "backfill" })
        assert.strictEqual(result.rejected, 0, resource)
        // A reference table may already hold the record from a sighting (a book's team): then unchanged.
        assert.strictEqual(result.inserted + result.updated + (table.kind === "reference" ? result.unchanged : 0), 1)

        const record = decoded(table, raw)
        const id = table.id(record)
        const [row] = yield* sql.unsafe<JsonObject>(`SELECT * FROM crm.${table.table} WHERE id = $1`, [id])
        assert.deepStrictEqual(row!.raw, raw, `${resource}.raw`)
        assert.strictEqual(row!.source, "backfill")
        assert.strictEqual(
          comparable("timestamptz", row!.updated_at),
          comparable("timestamptz", table.updatedAt(record))
        )
        const expectedRow = table.row(record)
        for (const [name, type] of Object.entries(table.columns)) {
          assert.deepStrictEqual(
            comparable(type, row![name]),
            comparable(type, expectedRow[name]),
            `${resource}.${name}`
          )
        }
        for (const child of table.children) {
          const expectedRows = child.rows(record)
          const stored = yield* sql.unsafe<JsonObject>(
            `SELECT * FROM crm.${child.table} WHERE ${child.parentColumn} = $1 ORDER BY ${Object.hasOwn(child.columns, "milestone_ordinal") ? "milestone_ordinal, " : ""}ordinal`,
            [id]
          )
          assert.strictEqual(stored.length, expectedRows.length, child.table)
          assert.isAbove(stored.length, 0, `${child.table}: the fixture exercises every child table`)
          expectedRows.forEach((expectedChild, i) => {
            for (const key of Object.keys(expectedChild)) {
              assert.isTrue(Object.hasOwn(child.columns, key), `${child.table} declares ${key}`)
            }
            for (const [name, type] of Object.entries(child.columns)) {
              assert.deepStrictEqual(
                comparable(type, stored[i]![name]),
                comparable(type, expectedChild[name] ?? null),
                `${child.table}[${i}].${name}`
              )
            }
          })
        }
      }
    })
  )

  it.effect("stores exact amounts: cents beyond 2^31 in bigint, dollars as exact numeric, calendar dates", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient
      const [account] = yield* sql<{ balance_in_cents: bigint; owner_ids: Array<string> }>`
        SELECT balance_in_cents, owner_ids FROM crm.financial_accounts WHERE id = 'fa_7781'`
      assert.strictEqual(account!.balance_in_cents, 987654321012n)
      assert.deepStrictEqual(account!.owner_ids, ["per_331", "per_332"])
      const values = yield* sql<{ amount: string; as_of_date: string }>`
        SELECT amount::text AS amount, as_of_date::text AS as_of_date FROM crm.annuity_contract_values
        WHERE annuity_contract_id = 'ann_9001' ORDER BY ordinal`
      assert.deepStrictEqual(values, [
        { amount: "412345.67", as_of_date: "2025-02-28" },
        { amount: "415000.00", as_of_date: "2025-03-01" }
      ])
      const [client] = yield* sql<{ aum: string }>`SELECT aum::text AS aum FROM crm.clients WHERE id = 'cli_3001'`
      assert.strictEqual(client!.aum, "2450000.00")
      const [transcript] = yield* sql<{ meeting_id: string; has_transcript: boolean }>`
        SELECT meeting_id, has_transcript FROM crm.meeting_transcripts WHERE id = 'mtg_4410'`
      assert.deepStrictEqual(transcript, { meeting_id: "mtg_4410", has_transcript: true })
    })
  )

  it.effect("a note under a household is a sighting of it, whatever the case of its notable_type", () =>
    Effect.gen(function* () {
      const warehouse = yield* Warehouse
      const sql = yield* SqlClient
      const note = resourceFixture("note") as JsonObject
      yield* warehouse.upsert(
        "notes",
        [
          { ...note, id: "nte_case_1", notable_type: "Household", notable_id: "hh_case_upper" },
          { ...note, id: "nte_case_2", notable_type: "household", notable_id: "hh_case_lower" }
        ],
        { source: "webhook" }
      )
      const rows = yield* sql<{ id: string }>`
        SELECT id FROM crm.households WHERE id IN ('hh_case_upper', 'hh_case_lower') ORDER BY id`
      assert.deepStrictEqual(
        rows.map((row) => row.id),
        ["hh_case_lower", "hh_case_upper"]
      )
    })
  )

  it("migration 0001 splits into statements the migrator can run one by one", () => {
    const text = readFileSync(new URL("../../migrations/0001_crm_schema.sql", import.meta.url), "utf8")
    const statements = splitStatements(text)
    assert.isTrue(statements.every((s) => !/;\s*$/.test(s)))
    assert.strictEqual(statements.filter((s) => s.startsWith("CREATE TABLE")).length, 38)
  })
})
