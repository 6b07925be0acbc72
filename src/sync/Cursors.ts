/**
 * Cursors: the poll cursors of `crm_sync.cursors`, one row per (connection, resource). A cursor is
 * the CRM timestamp below which every change is known to be in the warehouse; the next poll asks
 * for `updated_since = cursor - lookback`. It only ever moves forward (`GREATEST`), and it moves
 * in the transaction that stored the data it vouches for — callers run `advance` inside it.
 * `state` keeps what the last poll did (pages, records, whether drift held the cursor back), for
 * `status` and for whoever debugs a stuck poll.
 */
import * as Context from "effect/Context"
import * as DateTime from "effect/DateTime"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql/SqlError"

const CursorRow = Schema.Array(Schema.Struct({ cursor_ms: Schema.NullOr(Schema.Number) }))

export class Cursors extends Context.Service<
  Cursors,
  {
    /** The stored cursor, if the resource has been polled or crawled before. */
    readonly get: (connection: string, resource: string) => Effect.Effect<Option.Option<DateTime.Utc>, SqlError>
    /**
     * Moves the cursor forward to `to` (an ISO timestamp as the CRM gave it, or a DateTime) if that
     * is later than the stored one, and records `state`; call it in the transaction of the data.
     */
    readonly advance: (
      connection: string,
      resource: string,
      to: string | DateTime.DateTime | undefined,
      state: Record<string, unknown>
    ) => Effect.Effect<void, SqlError>
    /** The `state` stored for (connection, resource), if any: a position that is not a timestamp. */
    readonly state: (connection: string, resource: string) => Effect.Effect<unknown, SqlError>
    /** Replaces the `state` of (connection, resource), leaving its cursor as it is. */
    readonly saveState: (connection: string, resource: string, state: unknown) => Effect.Effect<void, SqlError>
  }
>()("crm-sync/sync/Cursors") {
  static readonly layer = Layer.effect(
    Cursors,
    Effect.gen(function* () {
      const sql = yield* SqlClient

      const get = Effect.fn("Cursors.get")(function* (connection: string, resource: string) {
        const rows = yield* sql`
          SELECT (extract(epoch FROM cursor) * 1000)::float8 AS cursor_ms FROM crm_sync.cursors
          WHERE connection = ${connection} AND resource = ${resource}`
        return Schema.decodeUnknownOption(CursorRow)(rows).pipe(
          Option.flatMap((list) => Option.fromNullishOr(list[0]?.cursor_ms)),
          Option.map((ms) => DateTime.makeUnsafe(Math.floor(ms)))
        )
      })

      const advance = Effect.fn("Cursors.advance")(function* (
        connection: string,
        resource: string,
        to: string | DateTime.DateTime | undefined,
        state: Record<string, unknown>
      ) {
        // PostgreSQL parses the CRM's own string, keeping its microseconds.
        const at = to === undefined ? null : typeof to === "string" ? to : DateTime.formatIso(DateTime.toUtc(to))
        yield* sql`
          INSERT INTO crm_sync.cursors AS c (connection, resource, cursor, state, updated_at)
          VALUES (${connection}, ${resource}, ${at}::timestamptz, ${JSON.stringify(state)}::jsonb, now())
          ON CONFLICT (connection, resource) DO UPDATE SET
            cursor = GREATEST(c.cursor, excluded.cursor),
            state = excluded.state,
            updated_at = excluded.updated_at`
      })

      const state = Effect.fn("Cursors.state")(function* (connection: string, resource: string) {
        const rows = yield* sql<{ state: unknown }>`
          SELECT state FROM crm_sync.cursors WHERE connection = ${connection} AND resource = ${resource}`
        return rows[0]?.state
      })

      const saveState = Effect.fn("Cursors.saveState")(function* (
        connection: string,
        resource: string,
        value: unknown
      ) {
        yield* sql`
          INSERT INTO crm_sync.cursors (connection, resource, state, updated_at)
          VALUES (${connection}, ${resource}, ${JSON.stringify(value ?? {})}::jsonb, now())
          ON CONFLICT (connection, resource) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at`
      })

      return Cursors.of({ get, advance, state, saveState })
    })
  )
}

/** The latest cursor of each resource, over every connection (for `status`). */
export const latestCursors = Effect.gen(function* () {
  const sql = yield* SqlClient
  return yield* sql<{ resource: string; cursor: Date | null }>`
    SELECT resource, max(cursor) AS cursor FROM crm_sync.cursors GROUP BY resource`
})

/** Every cursor that is set, as unix seconds (for the lag metrics). */
export const cursorPositions = Effect.gen(function* () {
  const sql = yield* SqlClient
  return yield* sql<{ connection: string; resource: string; at: number }>`
    SELECT connection, resource, extract(epoch FROM cursor)::float8 AS at
    FROM crm_sync.cursors WHERE cursor IS NOT NULL`
})
