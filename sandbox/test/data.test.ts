/**
 * The generated data (spec §2) and the indexes that serve it: determinism per seed, lazy
 * generation, and list queries over mutated collections checked against a brute-force answer.
 */
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Option } from "effect"
import { Collection, type KindSpec, pageOfUnion, SortedIndex } from "../src/Collection.ts"
import { buildWorld } from "../src/Generator.ts"
import { parseDuration } from "../src/Durations.ts"
import { resolveOptions } from "../src/Options.ts"
import { Rng } from "../src/Prng.ts"

const world = (seed: number, records = 500) =>
  Effect.map(resolveOptions({ seed, records }), (options) => buildWorld(options))

const sample = (w: ReturnType<typeof buildWorld>) => ({
  users: w.users,
  books: w.books.map((book) => ({ ...book, members: [...book.members] })),
  templates: w.templates,
  records: [
    w.households,
    w.contacts,
    w.prospects,
    w.clients,
    w.businesses,
    w.annuityContracts,
    w.financialAccounts,
    w.meetings,
    w.tasks,
    w.notes
  ].map((collection) => [0, 7, 42, collection.spec.baseCount - 1].map((i) => collection.get(i)))
})

interface Row {
  readonly id: string
  readonly book: number
  readonly name: string
  readonly updated: number
}

/** A small collection with explicit keys, to compare list queries against brute force. */
const testCollection = (count: number, books: number, seed: number): Collection<Row> => {
  const base = (index: number): Row => {
    const rng = new Rng(seed * 7919 + index)
    return {
      id: "",
      book: rng.int(0, books - 1),
      name: ["alpha", "Alder", "beta", "bravo", "Charlie", "alpine"][rng.int(0, 5)]! + index,
      updated: rng.int(0, 1000)
    }
  }
  const spec: KindSpec<Row> = {
    kind: "row",
    prefix: "row",
    baseCount: count,
    bookCount: books,
    bookOf: (index) => base(index).book,
    updatedAtOf: (index) => base(index).updated,
    nameOf: (index) => base(index).name,
    generate: (index) => ({ ...base(index), id: collection.idOf(index) }),
    generateIn: (index, book, now) => ({ ...base(index), id: collection.idOf(index), book, updated: now }),
    bookOfRow: (row) => row.book,
    updatedAtOfRow: (row) => row.updated,
    nameOfRow: (row) => row.name
  }
  const collection: Collection<Row> = new Collection(spec)
  return collection
}

const millis = (input: string) => Option.map(parseDuration(input), Duration.toMillis)

describe("sandbox data", () => {
  it.effect("§2: the same seed generates the same data; another seed other data", () =>
    Effect.gen(function* () {
      const a = sample(yield* world(7))
      const b = sample(yield* world(7))
      const c = sample(yield* world(8))
      assert.deepStrictEqual(a, b)
      assert.notDeepEqual(a, c)
    })
  )

  it.effect("§2: a record is generated the same whether it is read first or after others (lazy)", () =>
    Effect.gen(function* () {
      const first = yield* world(3)
      const direct = first.financialAccounts.get(250)
      const second = yield* world(3)
      for (let i = 0; i < 250; i++) second.financialAccounts.get(i)
      assert.deepStrictEqual(second.financialAccounts.get(250), direct)
    })
  )

  it.effect("§2: related records stay inside their book", () =>
    Effect.gen(function* () {
      const w = yield* world(5, 2000)
      for (let i = 0; i < 200; i++) {
        const account = w.financialAccounts.get(i)!
        if (account.household_id !== null)
          assert.strictEqual(w.households.getById(account.household_id)!.book_id, account.book_id)
        for (const owner of account.owner_ids) assert.strictEqual(w.contacts.getById(owner)!.book_id, account.book_id)
        const note = w.notes.get(i % w.notes.spec.baseCount)!
        const parent =
          note.notable_type === "Household"
            ? w.households.getById(note.notable_id)
            : note.notable_type === "Contact"
              ? w.contacts.getById(note.notable_id)
              : w.businesses.getById(note.notable_id)
        assert.strictEqual(parent!.book_id, note.book_id)
      }
    })
  )

  it.effect("§2: every kind is present in every book, company-wide templates exist, meetings vary", () =>
    Effect.gen(function* () {
      const w = yield* world(1, 100)
      for (const collection of [w.households, w.contacts, w.businesses, w.meetings, w.tasks, w.notes]) {
        for (const list of collection.baseByBook) assert.isAbove(list.length, 0, collection.kind)
      }
      assert.isTrue(w.templates.some((t) => t.book_id === null))
      assert.isTrue(w.templates.some((t) => t.book_id !== null))
      const meetings = Array.from({ length: w.meetings.spec.baseCount }, (_, i) => w.meetings.get(i)!)
      assert.isTrue(meetings.some((m) => m.transcript !== null && m.transcript_visible))
      assert.isTrue(meetings.some((m) => m.transcript === null))
    })
  )

  it("SortedIndex keeps its order through inserts and removals without touching its seed array", () => {
    const seed = Int32Array.from([1, 3, 5, 7])
    const index = new SortedIndex((a, b) => a - b, seed, true)
    index.insert(4)
    index.insert(0)
    index.insert(9)
    assert.isTrue(index.remove(5))
    assert.isFalse(index.remove(6))
    assert.deepStrictEqual(
      Array.from({ length: index.length }, (_, i) => index.at(i)),
      [0, 1, 3, 4, 7, 9]
    )
    assert.deepStrictEqual([...seed], [1, 3, 5, 7])
  })

  it("pageOfUnion pages the merge of sorted ranges exactly like a sorted concatenation", () => {
    const rng = new Rng(99)
    for (let round = 0; round < 50; round++) {
      const all = [...new Set(Array.from({ length: rng.int(0, 80) }, () => rng.int(0, 500)))]
      const lists = [0, 1, 2].map(() => new SortedIndex((a, b) => a - b))
      for (const value of all) lists[rng.int(0, 2)]!.insert(value)
      const ranges = lists.map((list) => {
        const from = rng.int(0, list.length)
        return { list, from, to: rng.int(from, list.length) }
      })
      const expected = ranges
        .flatMap((r) => Array.from({ length: r.to - r.from }, (_, i) => r.list.at(r.from + i)))
        .toSorted((a, b) => a - b)
      const offset = rng.int(0, expected.length + 2)
      const limit = rng.int(1, 20)
      const page = pageOfUnion(ranges, (a, b) => a - b, offset, limit)
      assert.strictEqual(page.total, expected.length)
      assert.deepStrictEqual(page.indexes, expected.slice(offset, offset + limit))
    }
  })

  it("Collection lists by id, updated_at and name prefix agree with brute force after mutations", () => {
    const collection = testCollection(400, 3, 11)
    const rng = new Rng(5)
    for (let i = 0; i < 60; i++) {
      const index = rng.int(0, collection.totalCount - 1)
      const roll = rng.float()
      if (roll < 0.3) collection.remove(index)
      else if (roll < 0.7) collection.update(index, (row) => ({ ...row, updated: rng.int(0, 1500), name: `alps${i}` }))
      else
        collection.insert((i, id) => ({ id, book: rng.int(0, 2), name: `Alder new ${i}`, updated: rng.int(0, 1500) }))
    }
    // the lazy indexes are built now, after the mutations; mutate again once they exist
    collection.list({ books: [0], updatedSince: 0, offset: 0, limit: 1 })
    collection.list({ books: [0], namePrefix: "a", offset: 0, limit: 1 })
    for (let i = 0; i < 40; i++) {
      const index = rng.int(0, 420)
      if (rng.bool()) collection.update(index, (row) => ({ ...row, updated: rng.int(0, 1500), name: `beta${i}` }))
      else collection.remove(index)
    }
    const live: Array<[number, Row]> = []
    for (let i = 0; i < 500; i++) {
      const row = collection.get(i)
      if (row !== undefined) live.push([i, row])
    }
    const books = [0, 2]
    const inBooks = live.filter(([, row]) => books.includes(row.book))
    const check = (
      query: { readonly updatedSince?: number; readonly namePrefix?: string },
      expected: Array<[number, Row]>
    ) => {
      for (const [offset, limit] of [
        [0, 7],
        [13, 50],
        [expected.length - 3, 10]
      ] as const) {
        const page = collection.list({ books, offset: Math.max(0, offset), limit, ...query })
        assert.strictEqual(page.total, expected.length, JSON.stringify(query))
        assert.deepStrictEqual(
          page.indexes,
          expected.slice(Math.max(0, offset), Math.max(0, offset) + limit).map(([i]) => i),
          JSON.stringify(query)
        )
      }
    }
    check(
      {},
      [...inBooks].toSorted((a, b) => a[0] - b[0])
    )
    check(
      { updatedSince: 700 },
      inBooks.filter(([, r]) => r.updated >= 700).toSorted((a, b) => a[1].updated - b[1].updated || a[0] - b[0])
    )
    const byName = (a: [number, Row], b: [number, Row]) => {
      const ka = a[1].name.toLowerCase()
      const kb = b[1].name.toLowerCase()
      return ka < kb ? -1 : ka > kb ? 1 : a[0] - b[0]
    }
    check({ namePrefix: "AL" }, inBooks.filter(([, r]) => r.name.toLowerCase().startsWith("al")).toSorted(byName))
    check(
      { namePrefix: "al", updatedSince: 500 },
      inBooks.filter(([, r]) => r.name.toLowerCase().startsWith("al") && r.updated >= 500).toSorted(byName)
    )
  })

  it("options: durations accept 500ms, 10s, 5m, 1h, 2d and Effect's own forms", () => {
    assert.deepStrictEqual(millis("500ms"), Option.some(500))
    assert.deepStrictEqual(millis("10s"), Option.some(10_000))
    assert.deepStrictEqual(millis("5m"), Option.some(300_000))
    assert.deepStrictEqual(millis("1h"), Option.some(3_600_000))
    assert.deepStrictEqual(millis("2d"), Option.some(172_800_000))
    assert.deepStrictEqual(millis("90 seconds"), Option.some(90_000))
    assert.isTrue(Option.isNone(parseDuration("soon")))
  })

  it.effect("options: defaults follow the spec; invalid values are refused", () =>
    Effect.gen(function* () {
      const defaults = yield* resolveOptions()
      assert.strictEqual(defaults.windowMs, 3_600_000)
      assert.strictEqual(defaults.debounceMs, 60_000)
      assert.strictEqual(defaults.idempotencyTtlMs, 3_600_000)
      assert.deepStrictEqual(defaults.limits, {
        personal: { token: 1000, company: 10000, ip: 10000 },
        oauth: { user: 500, app: 1000, ip: 10000 }
      })
      assert.strictEqual(defaults.webhookHeaderPrefix, "hook")
      const bad = yield* Effect.flip(resolveOptions({ window: "whenever" }))
      assert.strictEqual(bad.option, "window")
      const negative = yield* Effect.flip(resolveOptions({ records: -1 }))
      assert.strictEqual(negative.option, "records")
    })
  )
})
