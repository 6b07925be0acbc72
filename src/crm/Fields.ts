/**
 * The field types of the CRM API (spec §2.1): ids, timestamps, dates, E.164 phone numbers, masked
 * numbers, dollars as decimal strings, cents as integers, open enumerations, and the two tolerant
 * wrappers every resource model is built from (`Nullable`, `List`).
 *
 * Every value that lands in a typed warehouse column is checked here, so that a decoded record can
 * always be written: PostgreSQL never gets the chance to reject a batch over a malformed date or
 * an out-of-range integer. What cannot be checked is kept as received in `raw`.
 */
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SchemaAST from "effect/SchemaAST"
import * as SchemaGetter from "effect/SchemaGetter"

/** Ids are opaque strings used as given (spec §2.1); an empty one cannot identify a record. */
export const Id = Schema.NonEmptyString.annotate({ description: "an opaque CRM id" })

const TIMESTAMP =
  /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(\.\d+)?)?(?:([Zz])|([+-])(\d{2})(?::?(\d{2}))?)$/

const isLeapYear = (year: number) => (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0

const daysInMonth = (year: number, month: number) =>
  month === 2 ? (isLeapYear(year) ? 29 : 28) : month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31

/** A date that exists, and a time of day PostgreSQL reads (24:00:00 and a leap second included). */
const validDateTime = (year: number, month: number, day: number, hour: number, minute: number, second: number) =>
  month >= 1 &&
  month <= 12 &&
  day >= 1 &&
  day <= daysInMonth(year, month) &&
  (hour < 24 || (hour === 24 && minute === 0 && second === 0)) &&
  minute < 60 &&
  second <= 60

/** Two decimal digits at `index`, or -1. */
const twoDigits = (value: string, index: number): number => {
  const tens = value.charCodeAt(index) - 48
  const units = value.charCodeAt(index + 1) - 48
  return tens >= 0 && tens <= 9 && units >= 0 && units <= 9 ? tens * 10 + units : -1
}

const FRACTION = /^\.\d+$/

/**
 * `timestampMillis` of the shape the CRM sends (`2024-05-01T12:00:00Z`, `…:00.123Z`) read without a
 * regular expression or a Date: a crawl checks three of these per record. Undefined when the value
 * has another shape (an offset, no seconds, a year before 100): the general reading decides.
 */
const canonicalUtcMillis = (value: string): number | undefined => {
  const length = value.length
  if (
    length < 20 ||
    value.charCodeAt(4) !== 45 || // -
    value.charCodeAt(7) !== 45 ||
    value.charCodeAt(10) !== 84 || // T
    value.charCodeAt(13) !== 58 || // :
    value.charCodeAt(16) !== 58 ||
    value.charCodeAt(length - 1) !== 90 // Z
  ) {
    return undefined
  }
  const century = twoDigits(value, 0)
  const yearOfCentury = twoDigits(value, 2)
  const month = twoDigits(value, 5)
  const day = twoDigits(value, 8)
  const hour = twoDigits(value, 11)
  const minute = twoDigits(value, 14)
  const second = twoDigits(value, 17)
  const year = century * 100 + yearOfCentury
  if (century < 1 || yearOfCentury < 0 || month < 0 || day < 0 || hour < 0 || minute < 0 || second < 0) {
    return undefined
  }
  let fraction = 0
  if (length > 20) {
    const digits = value.slice(19, length - 1)
    if (!FRACTION.test(digits)) return undefined
    fraction = Number(digits) * 1000
  }
  return validDateTime(year, month, day, hour, minute, second)
    ? Date.UTC(year, month - 1, day, hour, minute, second) + fraction
    : Number.NaN
}

/**
 * The instant an ISO 8601 date-time denotes, in epoch milliseconds, or undefined when it is not
 * one PostgreSQL would read the same way (a 13th month, a 31st of April, an offset past ±15:59).
 */
export const timestampMillis = (value: string): number | undefined => {
  const canonical = canonicalUtcMillis(value)
  if (canonical !== undefined) return Number.isNaN(canonical) ? undefined : canonical
  const m = TIMESTAMP.exec(value)
  if (m === null) return undefined
  const part = (index: number) => (m[index] === undefined ? 0 : Number(m[index]))
  const [year, month, day, hour, minute, second, offsetHours, offsetMinutes] = [1, 2, 3, 4, 5, 6, 10, 11].map(part)
  const valid =
    year >= 1 && validDateTime(year, month, day, hour, minute, second) && offsetHours <= 15 && offsetMinutes < 60
  if (!valid) return undefined
  const fraction = m[7] === undefined ? 0 : Number(m[7]) * 1000
  const offset = (m[9] === "-" ? -1 : 1) * (offsetHours * 60 + offsetMinutes) * 60_000
  // setUTCFullYear, not Date.UTC, which reads years 0-99 as 1900-1999.
  const utc = new Date(0)
  utc.setUTCFullYear(year, month - 1, day)
  utc.setUTCHours(hour, minute, second)
  return utc.getTime() + fraction - offset
}

/**
 * An ISO 8601 date-time with a zone designator (spec §2.1: "Timestamps are ISO 8601 date-times in
 * UTC"). Kept as the string received: PostgreSQL parses it into `timestamptz` without loss
 * (microseconds included), which a JavaScript `Date` would not.
 */
export const Timestamp = Schema.String.check(
  Schema.makeFilter((s: string) => timestampMillis(s) !== undefined, {
    expected: "an ISO 8601 date-time with a zone, e.g. 2024-05-01T12:00:00Z"
  })
)

const DATE = /^(\d{4})-(\d{2})-(\d{2})$/

/** A calendar date, `YYYY-MM-DD` (spec §2.1), that exists (no 2024-02-30: the `date` column would refuse it). */
export const CalendarDate = Schema.String.check(
  Schema.makeFilter(
    (s: string) => {
      const match = DATE.exec(s)
      if (match === null) return false
      const [year, month, day] = [Number(match[1]), Number(match[2]), Number(match[3])]
      return year >= 1 && month >= 1 && month <= 12 && day >= 1 && day <= daysInMonth(year, month)
    },
    { expected: "a calendar date YYYY-MM-DD" }
  )
)

const E164_PATTERN = /^\+[1-9]\d{1,14}$/

/** Whether a phone number is in E.164 form (`+` then up to 15 digits, no leading zero). */
export const isE164 = (value: string): boolean => E164_PATTERN.test(value)

/**
 * A phone number in E.164 form, checked strictly: used for what crm-sync sends (request bodies),
 * where a malformed number must be refused before it reaches the CRM.
 */
export const E164 = Schema.String.check(Schema.isPattern(E164_PATTERN, { expected: "an E.164 phone number" }))

/**
 * A phone number as the CRM returns it. Spec §2.1 says these are E.164, but a record is not refused
 * over one malformed phone number: the value is stored as received and the child tables expose
 * `is_e164` so the exceptions can be found.
 */
export const PhoneNumber = Schema.String.annotate({ description: "a phone number, E.164 per spec §2.1, not enforced" })

/** Account and contract numbers arrive masked (spec §2.5, §2.5a): an opaque string, never a number. */
export const MaskedNumber = Schema.String.annotate({ description: "a masked account or contract number" })

const DECIMAL = /^-?\d+(\.\d+)?$/

/** A dollar amount as an exact decimal string (spec §2.5: "Values are in dollars", `amount (string)`). */
export const Dollars = Schema.String.check(Schema.isPattern(DECIMAL, { expected: "a decimal amount, e.g. 1234.56" }))

/**
 * A decimal amount whose JSON type the spec does not state (a client's `aum`, §2.9): a decimal
 * string, or a finite number converted to its shortest decimal string.
 */
export const DecimalAmount = Schema.Union([
  Dollars,
  Schema.Finite.pipe(
    Schema.decodeTo(Dollars, {
      decode: SchemaGetter.transform((n: number) => String(n)),
      encode: SchemaGetter.transform((s: string) => Number(s))
    })
  )
])

/** An amount in cents (spec §2.5: "balances are in cents"): a safe integer, stored as `bigint`. */
export const Cents = Schema.Int

/** An integer that fits PostgreSQL's `integer` column (positions, sizes of pages, durations). */
export const Int32 = Schema.Int.check(Schema.isInt32())

/** A count of bytes or similar that may exceed 2^31 (stored as `bigint`). */
export const Int64 = Schema.Int

/**
 * An open enumeration: the known values are typed (and autocompleted), any other string is
 * accepted. Spec §2.1 says most allowed values are "not shown", and §9 gives no compatibility
 * guarantee, so a new value must never make a record undecodable.
 */
export const OpenEnum = <const L extends ReadonlyArray<string>>(known: L) =>
  Schema.Union([Schema.Literals(known), Schema.StringForLiteralAutocomplete])

/** A free-form JSON object (`custom_fields`, `current_values`). */
export const JsonObject = Schema.Record(Schema.String, Schema.Unknown)

/**
 * A field that may be absent or null, decoded as `T | null` (absent becomes null).
 *
 * The spec gives each field's type but not which are always present (§4 "Gaps": "Which contact
 * fields are required: not shown"), so the models read tolerantly: a missing or null value is
 * stored as NULL rather than losing the record, while a value of the wrong type still fails, since
 * it means the contract changed.
 */
export const Nullable = <S extends Schema.Top>(schema: S) =>
  tolerant(
    Schema.optionalKey(Schema.NullOr(schema)).pipe(
      Schema.decodeTo(Schema.NullOr(Schema.toType(schema)), {
        decode: SchemaGetter.transformOptional((value) => Option.some(Option.getOrNull(value))),
        encode: SchemaGetter.transformOptional((value) => value)
      })
    ),
    { kind: "nullable", inner: schema }
  )

/**
 * A nested list that may be absent or null, decoded as an array (absent and null become `[]`).
 * Whether the key was present at all still matters to the warehouse (an absent list leaves the
 * stored child rows alone), and it reads that from `raw`.
 */
export const List = <S extends Schema.Top>(schema: S) =>
  tolerant(
    Schema.optionalKey(Schema.NullOr(Schema.Array(schema))).pipe(
      Schema.decodeTo(Schema.Array(Schema.toType(schema)), {
        decode: SchemaGetter.transformOptional((value) =>
          Option.some(Option.getOrElse(Option.flatMap(value, Option.fromNullishOr), () => []))
        ),
        encode: SchemaGetter.transformOptional((value) => value)
      })
    ),
    { kind: "list", inner: schema }
  )

// ---------------------------------------------------------------------------------------------
// The fast decoder of a model (the warehouse's bulk path)
// ---------------------------------------------------------------------------------------------

/** What a `Nullable` or `List` field wraps: how `fastDecoder` reads it without its transformation. */
interface TolerantForm {
  readonly kind: "nullable" | "list"
  readonly inner: Schema.Top
}

const tolerantForms = new WeakMap<Schema.Top, TolerantForm>()

const tolerant = <S extends Schema.Top>(schema: S, form: TolerantForm): S => {
  tolerantForms.set(schema, form)
  return schema
}

/**
 * A schema that validates what `schema` validates, without the per-field transformations of
 * `Nullable` and `List`, and `fill`, which turns its output into what `schema` decodes to. `fill`
 * is undefined when `schema` is used as it is (no tolerant field, or a shape not taken apart).
 */
interface Plain {
  readonly schema: Schema.Top
  readonly fill: ((value: unknown) => unknown) | undefined
}

const isPlainStruct = (schema: Schema.Top): schema is Schema.Top & { readonly fields: Schema.Struct.Fields } => {
  const ast = schema.ast
  return (
    SchemaAST.isObjects(ast) &&
    ast.indexSignatures.length === 0 &&
    ast.checks === undefined &&
    ast.encoding === undefined &&
    ast.context === undefined &&
    "fields" in schema
  )
}

const plainOf = (schema: Schema.Top): Plain => {
  const form = tolerantForms.get(schema)
  if (form !== undefined) {
    const inner = plainOf(form.inner)
    const fillInner = inner.fill
    if (form.kind === "nullable") {
      return {
        schema: Schema.optionalKey(Schema.NullOr(inner.schema)),
        fill: (value) =>
          value === undefined || value === null ? null : fillInner === undefined ? value : fillInner(value)
      }
    }
    return {
      schema: Schema.optionalKey(Schema.NullOr(Schema.Array(inner.schema))),
      fill: (value) =>
        value === undefined || value === null
          ? []
          : fillInner === undefined
            ? value
            : (value as ReadonlyArray<unknown>).map(fillInner)
    }
  }
  if (!isPlainStruct(schema)) return { schema, fill: undefined }
  const fields = Object.entries(schema.fields).map(([name, field]) => ({ name, plain: plainOf(field as Schema.Top) }))
  if (fields.every(({ plain }) => plain.fill === undefined)) return { schema, fill: undefined }
  const names = fields.map(({ name }) => name)
  const fills = fields.map(({ plain }) => plain.fill)
  return {
    schema: Schema.Struct(Object.fromEntries(fields.map(({ name, plain }) => [name, plain.schema]))),
    // A new object, keys in the model's order and present exactly when the model's output has them.
    fill: (value) => {
      const input = value as Record<string, unknown>
      const out: Record<string, unknown> = {}
      for (let i = 0; i < names.length; i++) {
        const name = names[i]!
        const fill = fills[i]
        if (fill !== undefined) out[name] = fill(input[name])
        else if (Object.hasOwn(input, name)) out[name] = input[name]
      }
      return out
    }
  }
}

/**
 * Decodes with `model` the way `Schema.decodeUnknownResult(model)` does, stopping at the first
 * issue, in about two thirds of the time (4.4 µs instead of 6.7 for a financial account): every `Nullable` and `List` field is a transformation, and a
 * record of a dozen of them spent most of its decoding in the machinery (an `Option` each way,
 * the decoded side checked again). Here the record is validated once against the same schemas
 * without those transformations, and one pass fills in the nulls and empty lists. The result is
 * the same value, keys in the same order; the test holds the two to that on every resource. A
 * failure's message may be shorter than the model's: decode with the model to report it.
 */
export const fastDecoder = <S extends Schema.Top>(
  model: S
): ((input: unknown) => Result.Result<S["Type"], Schema.SchemaError>) => {
  const plain = plainOf(model)
  const run = Schema.decodeUnknownResult(plain.schema as Schema.Decoder<unknown>)
  const fill = plain.fill
  return (input) => {
    const result = run(input, { errors: "first" })
    return fill === undefined || Result.isFailure(result) ? result : Result.succeed(fill(result.success))
  }
}
