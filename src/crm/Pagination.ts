/**
 * List pages as crm-sync receives them (spec §2.1: `{data, pagination}`), and the crawl over them.
 *
 * A page keeps its records as the raw JSON received: the warehouse stores every record in `raw`,
 * and one record that does not decode must be stored with its error, not fail its page
 * (docs/architecture.md, rule 6: bad input changes nothing). `decodeItems` decodes each record on
 * its own against the resource's schema from `Models.ts`.
 *
 * `crawl` asks for `per_page=100` (spec §4 rule 1: the maximum) and follows `total_pages` as each
 * page reports it, not as the first page did: records created or removed mid-crawl change the
 * totals, and an empty page ends the crawl whatever the totals say.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SchemaIssue from "effect/SchemaIssue"
import * as Stream from "effect/Stream"
import { Pagination } from "./Models.ts"

/** spec §4 rule 1: `per_page` ranges 1..100. */
export const MAX_PER_PAGE = 100

/** The envelope, with records left undecoded (`unknown`: even a non-object must not fail the page). */
export const PageEnvelope = Schema.Struct({ data: Schema.Array(Schema.Unknown), pagination: Pagination })

export interface PageQuery {
  readonly page?: number | undefined
  readonly per_page?: number | undefined
}

/** One page of a list endpoint. `A` is what each record decodes to with `schema`. */
export interface ListPage<A> {
  /** The endpoint's resource, e.g. `businesses`. */
  readonly resource: string
  /** The page asked for. */
  readonly page: number
  readonly pagination: Pagination
  /** Records exactly as received, in order. */
  readonly data: ReadonlyArray<unknown>
  readonly schema: Schema.Decoder<A>
}

/** A record as received and what became of decoding it. */
export interface DecodedItem<A> {
  readonly raw: unknown
  readonly record: Result.Result<A, string>
}

const formatter = SchemaIssue.makeFormatterStandardSchemaV1()

const formatPath = (path: ReadonlyArray<unknown>) =>
  path
    .map((segment) =>
      typeof segment === "object" && segment !== null && "key" in segment ? String(segment.key) : String(segment)
    )
    .join(".")

/**
 * A decoding failure in one line: where, and what was expected. With `values: false`, whatever the
 * formatter quotes of the received value is cut, so the line is safe for errors and logs. `root`
 * names what was decoded (`payload` gives `payload.book_id: ...`, or `payload: ...`).
 */
export const describeIssue = (
  issue: SchemaIssue.Issue,
  options: { readonly values: boolean; readonly root?: string }
): string => {
  const first = formatter(issue).issues[0]
  if (first === undefined)
    return `${options.root === undefined ? "" : `${options.root}: `}does not match the documented shape`
  const message = options.values ? first.message : first.message.replace(/,?\s*(got|actual|received)\b.*$/is, "")
  const path = [options.root, formatPath(first.path ?? [])]
    .filter((part) => part !== undefined && part !== "")
    .join(".")
  return `${path === "" ? "" : `${path}: `}${message.replace(/\s+/g, " ")}`.slice(0, 300)
}

/** Decodes one record; the failure is a one-line description (it is stored beside the raw record). */
export const decodeRecord = <A>(schema: Schema.Decoder<A>, raw: unknown): Result.Result<A, string> =>
  Result.mapError(Schema.decodeUnknownResult(schema)(raw), (error) => describeIssue(error.issue, { values: true }))

/** Every record of a page, each decoded on its own. */
export const decodeItems = <A>(page: ListPage<A>): ReadonlyArray<DecodedItem<A>> =>
  page.data.map((raw) => ({ raw, record: decodeRecord(page.schema, raw) }))

/** The records of a page that decode (failures dropped: for callers that only read). */
export const decodedRecords = <A>(page: ListPage<A>): ReadonlyArray<A> =>
  decodeItems(page).flatMap((item) => (Result.isSuccess(item.record) ? [item.record.success] : []))

/**
 * Whether to ask for the page after `page`: the page was not empty and, by the totals it reported,
 * is not the last. Re-read on every page, so a crawl follows totals that change under it.
 */
export const hasNextPage = (page: ListPage<unknown>): boolean =>
  page.data.length > 0 && page.page < page.pagination.total_pages

/**
 * Every page of a list from `startPage` (default 1; a resumed crawl passes its next page) to the
 * end, `per_page=100`, one request at a time: the crawl's pace is the budget's, not its own.
 */
export const crawl = <A, E, R>(
  list: (query: { readonly page: number; readonly per_page: number }) => Effect.Effect<ListPage<A>, E, R>,
  options?: { readonly startPage?: number }
): Stream.Stream<ListPage<A>, E, R> =>
  Stream.paginate(Math.max(1, options?.startPage ?? 1), (page: number) =>
    Effect.map(list({ page, per_page: MAX_PER_PAGE }), (result) => {
      const next = hasNextPage(result) ? Option.some(page + 1) : Option.none<number>()
      // Every page read is emitted, an empty last one too: its totals are the list's final word.
      return [[result], next] as const
    })
  )
