/**
 * A lazily generated, indexed record collection. Record `i` of a kind is generated on demand from
 * `(seed, kind, i)`; only records that were created, changed or deleted are kept (the overlay), so
 * a million base records cost a few typed arrays, not a million objects. List queries are answered
 * from per-book sorted index lists (by id, by `updated_at`, by lower-cased name), merged across
 * the books a credential can see, never by scanning every record. The `updated_at` and name lists
 * are built on first use.
 */

/** Comparator over record indexes. */
export type IndexOrder = (a: number, b: number) => number

/** A growable list of record indexes kept sorted by an `IndexOrder`; copy-on-write over its seed. */
export class SortedIndex {
  private items: Int32Array
  private shared: boolean
  private size: number
  readonly order: IndexOrder

  constructor(order: IndexOrder, items: Int32Array = new Int32Array(0), shared = false) {
    this.order = order
    this.items = items
    this.shared = shared
    this.size = items.length
  }

  get length(): number {
    return this.size
  }

  at(position: number): number {
    return this.items[position]!
  }

  /** First position in [from, to) whose element fails `isBefore` (which must be monotone). */
  lowerBound(isBefore: (index: number) => boolean, from = 0, to = this.size): number {
    let lo = from
    let hi = to
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (isBefore(this.items[mid]!)) lo = mid + 1
      else hi = mid
    }
    return lo
  }

  /** Number of elements in [from, to) ordered before `index`. */
  countBefore(index: number, from = 0, to = this.size): number {
    return this.lowerBound((e) => this.order(e, index) < 0, from, to) - from
  }

  insert(index: number): void {
    const position = this.lowerBound((e) => this.order(e, index) < 0)
    this.ensureCapacity(this.size + 1)
    this.items.copyWithin(position + 1, position, this.size)
    this.items[position] = index
    this.size++
  }

  /** Removes `index`, located with the order as it stands (call before changing its key). */
  remove(index: number): boolean {
    const position = this.lowerBound((e) => this.order(e, index) < 0)
    if (position >= this.size || this.items[position] !== index) return false
    this.ensureCapacity(this.size)
    this.items.copyWithin(position, position + 1, this.size)
    this.size--
    return true
  }

  private ensureCapacity(wanted: number): void {
    if (!this.shared && wanted <= this.items.length) return
    const next = new Int32Array(Math.max(wanted, Math.ceil(this.items.length * 1.5), 16))
    next.set(this.items.subarray(0, this.size))
    this.items = next
    this.shared = false
  }
}

/** A slice [from, to) of a sorted list. */
export interface Range {
  readonly list: SortedIndex
  readonly from: number
  readonly to: number
}

/**
 * The page [offset, offset + limit) of the merge of disjoint sorted ranges, in O(k² log² n + limit·k)
 * for k ranges: the element of global rank `offset` is located by binary search in each range,
 * then the ranges are merged from there.
 */
export const pageOfUnion = (ranges: ReadonlyArray<Range>, order: IndexOrder, offset: number, limit: number) => {
  const total = ranges.reduce((sum, r) => sum + (r.to - r.from), 0)
  const out: Array<number> = []
  if (offset >= total || limit <= 0) return { total, indexes: out }
  const rankOf = (index: number) => ranges.reduce((sum, r) => sum + r.list.countBefore(index, r.from, r.to), 0)
  let pivot: number | undefined
  for (const r of ranges) {
    // largest position whose element has rank <= offset
    const position = r.list.lowerBound((e) => rankOf(e) <= offset, r.from, r.to) - 1
    if (position >= r.from && rankOf(r.list.at(position)) === offset) {
      pivot = r.list.at(position)
      break
    }
  }
  if (pivot === undefined) return { total, indexes: out }
  const cursors = ranges.map((r) => r.from + r.list.countBefore(pivot, r.from, r.to))
  while (out.length < limit) {
    let best = -1
    for (let i = 0; i < ranges.length; i++) {
      if (cursors[i]! >= ranges[i]!.to) continue
      if (best === -1 || order(ranges[i]!.list.at(cursors[i]!), ranges[best]!.list.at(cursors[best]!)) < 0) best = i
    }
    if (best === -1) break
    out.push(ranges[best]!.list.at(cursors[best]!))
    cursors[best]!++
  }
  return { total, indexes: out }
}

/** How a kind's records are generated and keyed. The `*Of(index)` functions describe base records. */
export interface KindSpec<Row extends { readonly id: string }> {
  readonly kind: string
  readonly prefix: string
  readonly baseCount: number
  readonly bookCount: number
  bookOf(index: number): number
  updatedAtOf(index: number): number
  nameOf?(index: number): string
  generate(index: number): Row
  /** A fresh record for a new index in a chosen book, timestamped `now` (admin inserts, drift). */
  generateIn(index: number, book: number, now: number): Row
  bookOfRow(row: Row): number
  updatedAtOfRow(row: Row): number
  nameOfRow?(row: Row): string
}

export interface ListQuery {
  /** Book ordinals to include. */
  readonly books: ReadonlyArray<number>
  /** Only records with `updated_at >= updatedSince` (epoch ms), ordered by (updated_at, id). */
  readonly updatedSince?: number | undefined
  /** Case-insensitive prefix of the name, ordered by (name, id). */
  readonly namePrefix?: string | undefined
  readonly offset: number
  readonly limit: number
}

const ID_DIGITS = 8

export class Collection<Row extends { readonly id: string }> {
  readonly spec: KindSpec<Row>
  private size: number
  private readonly overlay = new Map<number, Row>()
  private readonly overlayUpdated = new Map<number, number>()
  private readonly overlayName = new Map<number, string>()
  private readonly deleted = new Set<number>()
  private readonly byId: Array<SortedIndex>
  private byUpdated: Array<SortedIndex> | undefined
  private byName: Array<SortedIndex> | undefined
  /** Base records per book, ascending; never changes, so generators can pick related records from it. */
  readonly baseByBook: ReadonlyArray<Int32Array>

  constructor(spec: KindSpec<Row>) {
    this.spec = spec
    this.size = spec.baseCount
    const counts = new Int32Array(spec.bookCount)
    const books = new Uint16Array(spec.baseCount)
    for (let i = 0; i < spec.baseCount; i++) {
      const book = spec.bookOf(i)
      books[i] = book
      counts[book]!++
    }
    const lists = Array.from(counts, (count) => new Int32Array(count))
    const fill = new Int32Array(spec.bookCount)
    for (let i = 0; i < spec.baseCount; i++) {
      const book = books[i]!
      lists[book]![fill[book]!++] = i
    }
    this.baseByBook = lists
    this.byId = lists.map((list) => new SortedIndex((a, b) => a - b, list, true))
  }

  get kind(): string {
    return this.spec.kind
  }

  idOf(index: number): string {
    return `${this.spec.prefix}_${String(index + 1).padStart(ID_DIGITS, "0")}`
  }

  indexOf(id: string): number | undefined {
    const prefix = `${this.spec.prefix}_`
    if (!id.startsWith(prefix) || id.length !== prefix.length + ID_DIGITS) return undefined
    const digits = id.slice(prefix.length)
    if (!/^\d+$/.test(digits)) return undefined
    const index = Number(digits) - 1
    return index >= 0 && index < this.size ? index : undefined
  }

  /** The live record, or undefined when unknown or deleted. */
  get(index: number): Row | undefined {
    if (index < 0 || index >= this.size || this.deleted.has(index)) return undefined
    return this.overlay.get(index) ?? this.spec.generate(index)
  }

  getById(id: string): Row | undefined {
    const index = this.indexOf(id)
    return index === undefined ? undefined : this.get(index)
  }

  /** The last state of a record, deleted or not (webhook snapshots of deleted records). */
  lastKnown(index: number): Row | undefined {
    if (index < 0 || index >= this.size) return undefined
    return this.overlay.get(index) ?? this.spec.generate(index)
  }

  isDeleted(index: number): boolean {
    return this.deleted.has(index)
  }

  bookOf(index: number): number {
    const row = this.overlay.get(index)
    return row === undefined ? this.spec.bookOf(index) : this.spec.bookOfRow(row)
  }

  /** Number of live records in the given books. */
  count(books: ReadonlyArray<number>): number {
    return books.reduce((sum, book) => sum + this.byId[book]!.length, 0)
  }

  get totalCount(): number {
    return this.size - this.deleted.size
  }

  /** The n-th live record of a book in id order (used to pick drift targets). */
  nthInBook(book: number, n: number): number | undefined {
    const list = this.byId[book]!
    return list.length === 0 ? undefined : list.at(((n % list.length) + list.length) % list.length)
  }

  insert(build: (index: number, id: string) => Row): Row {
    const index = this.size++
    const row = build(index, this.idOf(index))
    this.write(index, row)
    const book = this.spec.bookOfRow(row)
    this.byId[book]!.insert(index)
    this.byUpdated?.[book]!.insert(index)
    this.byName?.[book]!.insert(index)
    return row
  }

  /** Replaces a live record; its book must not change. */
  update(index: number, change: (row: Row) => Row): Row | undefined {
    const row = this.get(index)
    if (row === undefined) return undefined
    const next = change(row)
    const book = this.spec.bookOfRow(row)
    // leave the keyed lists with the old keys before the keys change
    this.byUpdated?.[book]!.remove(index)
    this.byName?.[book]!.remove(index)
    this.write(index, next)
    this.byUpdated?.[book]!.insert(index)
    this.byName?.[book]!.insert(index)
    return next
  }

  remove(index: number): Row | undefined {
    const row = this.get(index)
    if (row === undefined) return undefined
    const book = this.spec.bookOfRow(row)
    this.byId[book]!.remove(index)
    this.byUpdated?.[book]!.remove(index)
    this.byName?.[book]!.remove(index)
    this.deleted.add(index)
    this.write(index, row)
    return row
  }

  list(query: ListQuery): { readonly total: number; readonly indexes: ReadonlyArray<number> } {
    if (query.namePrefix !== undefined && query.namePrefix !== "") {
      const prefix = query.namePrefix.toLowerCase()
      const names = this.nameLists()
      const ranges = query.books.map((book) => {
        const list = names[book]!
        return {
          list,
          from: list.lowerBound((e) => this.nameKey(e) < prefix),
          to: list.lowerBound((e) => {
            const key = this.nameKey(e)
            return key < prefix || key.startsWith(prefix)
          })
        }
      })
      if (query.updatedSince === undefined) return pageOfUnion(ranges, this.nameOrder, query.offset, query.limit)
      // both filters: walk the (narrow) name range and keep the recently updated ones
      const since = query.updatedSince
      const all = pageOfUnion(ranges, this.nameOrder, 0, Number.MAX_SAFE_INTEGER).indexes.filter(
        (index) => this.updatedKey(index) >= since
      )
      return { total: all.length, indexes: all.slice(query.offset, query.offset + query.limit) }
    }
    if (query.updatedSince !== undefined) {
      const since = query.updatedSince
      const updated = this.updatedLists()
      const ranges = query.books.map((book) => {
        const list = updated[book]!
        return { list, from: list.lowerBound((e) => this.updatedKey(e) < since), to: list.length }
      })
      return pageOfUnion(ranges, this.updatedOrder, query.offset, query.limit)
    }
    const ranges = query.books.map((book) => ({ list: this.byId[book]!, from: 0, to: this.byId[book]!.length }))
    return pageOfUnion(ranges, (a, b) => a - b, query.offset, query.limit)
  }

  private write(index: number, row: Row): void {
    this.overlay.set(index, row)
    this.overlayUpdated.set(index, this.spec.updatedAtOfRow(row))
    if (this.spec.nameOfRow !== undefined) this.overlayName.set(index, this.spec.nameOfRow(row).toLowerCase())
  }

  private updatedKey(index: number): number {
    return this.overlayUpdated.get(index) ?? this.spec.updatedAtOf(index)
  }

  private nameKey(index: number): string {
    const cached = this.overlayName.get(index)
    if (cached !== undefined) return cached
    if (this.spec.nameOf === undefined) return ""
    return this.spec.nameOf(index).toLowerCase()
  }

  private readonly updatedOrder: IndexOrder = (a, b) => this.updatedKey(a) - this.updatedKey(b) || a - b

  private readonly nameOrder: IndexOrder = (a, b) => {
    const ka = this.nameKey(a)
    const kb = this.nameKey(b)
    return ka < kb ? -1 : ka > kb ? 1 : a - b
  }

  private updatedLists(): ReadonlyArray<SortedIndex> {
    if (this.byUpdated === undefined) {
      this.byUpdated = this.byId.map((ids) => this.sortedBy(ids, (index) => this.updatedKey(index), this.updatedOrder))
    }
    return this.byUpdated
  }

  private nameLists(): ReadonlyArray<SortedIndex> {
    if (this.byName === undefined) {
      this.byName = this.byId.map((ids) => this.sortedBy(ids, (index) => this.nameKey(index), this.nameOrder))
    }
    return this.byName
  }

  private sortedBy<K extends number | string>(ids: SortedIndex, key: (index: number) => K, order: IndexOrder) {
    const indexes = Array.from({ length: ids.length }, (_, position) => ids.at(position))
    const keys = new Map<number, K>()
    for (const index of indexes) keys.set(index, key(index))
    indexes.sort((a, b) => {
      const ka = keys.get(a)!
      const kb = keys.get(b)!
      return ka < kb ? -1 : ka > kb ? 1 : a - b
    })
    return new SortedIndex(order, Int32Array.from(indexes))
  }
}
