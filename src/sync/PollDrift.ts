/**
 * How far a business poll's cursor may move when the listing drifted under the pass. The listing
 * is ordered by `updated_at` (the sandbox's order; the spec does not show one), so a record updated
 * while the pages are read jumps to the end — it is read again there — and every record after its
 * old place moves back one: the record at the page boundary being read at that moment is skipped.
 * Its `updated_at` is at least the latest seen on the page where the moved record was first read,
 * so when a pass sees a record twice, or the total shrink between two pages, the cursor advances
 * only to the latest `updated_at` read before that point, and the next poll reads the skipped
 * record. If a listing ever comes back out of `updated_at` order, drift holds the cursor where it was.
 */
import { idOf } from "./PageFetcher.ts"
import { type UpdatedAt, updatedAtOf } from "./UpdatedAt.ts"

/** The latest of two timestamps (undefined: none yet). */
const later = <T extends { readonly ms: number }>(a: T | undefined, b: T | undefined) =>
  a === undefined ? b : b === undefined ? a : b.ms > a.ms ? b : a

/** What one poll pass has read so far, page by page (pages numbered from 1, read in order). */
export class PollDrift {
  /** Page on which each id was first read in this pass. */
  readonly #firstSeen = new Map<string, number>()
  /** Latest updated_at read up to and including each page. */
  readonly #latestUpTo: Array<UpdatedAt | undefined> = []
  #latest: UpdatedAt | undefined
  #previousMs = Number.NEGATIVE_INFINITY
  #previousTotal: number | undefined
  #ordered = true
  /** Set when drift was seen: the furthest the cursor may go (undefined inside: not at all). */
  #heldAt: { readonly value: UpdatedAt | undefined } | undefined

  /** Notes one page: the records it listed and its `total_count`. */
  see(page: number, records: ReadonlyArray<unknown>, total: number): void {
    for (const raw of records) {
      const id = idOf(raw)
      if (id !== undefined) {
        const first = this.#firstSeen.get(id)
        // Read twice: it was updated after its first read and moved to the end, pulling the
        // records behind it back one place.
        if (first !== undefined && first < page) this.#hold(this.#ordered ? this.#latestUpTo[first] : undefined)
        else this.#firstSeen.set(id, page)
      }
      const updatedAt = updatedAtOf(raw)
      if (updatedAt !== undefined) {
        if (updatedAt.ms < this.#previousMs) this.#ordered = false
        this.#previousMs = updatedAt.ms
        this.#latest = later(this.#latest, updatedAt)
      }
    }
    // Records left the listing between two reads: those behind them moved back a place.
    if (this.#previousTotal !== undefined && total < this.#previousTotal) {
      this.#hold(this.#ordered ? this.#latestUpTo[page - 1] : undefined)
    }
    this.#latestUpTo[page] = this.#latest
    this.#previousTotal = total
  }

  #hold(value: UpdatedAt | undefined): void {
    const held = this.#heldAt
    if (held === undefined || (held.value !== undefined && (value === undefined || value.ms < held.value.ms))) {
      this.#heldAt = { value }
    }
  }

  /** Whether the listing drifted under the pass (the cursor is held back). */
  get drifted(): boolean {
    return this.#heldAt !== undefined
  }

  /** Whether every `updated_at` read so far came in order. */
  get ordered(): boolean {
    return this.#ordered
  }

  /** Where drift held the cursor, for the log. */
  get heldAt(): string {
    return this.#heldAt?.value?.iso ?? "(unchanged)"
  }

  /**
   * Where the cursor may move after the pass (undefined: it stays): the latest `updated_at` read, or
   * where drift held it. Out of `updated_at` order, the place of a drift says nothing: it stays.
   */
  get target(): UpdatedAt | undefined {
    if (this.#heldAt === undefined) return this.#latest
    return this.#ordered ? this.#heldAt.value : undefined
  }
}
