/**
 * Credentials: the bearer token each request of a connection carries (spec §5.1).
 *
 * A personal access token (spec §5.2) comes from the config and never changes. An OAuth connection
 * (spec §5.3) keeps its token pair in `crm_sync.credentials`, encrypted (TokenCipher), and
 * refreshes it shortly before it expires or when the API answers 401: single-flight across every
 * process on the database (see `refreshLocked`). `invalid_grant` marks the connection as needing
 * re-authorization (visible in `status`); nothing retries it until `crm-sync connect` stores a new pair.
 */
import * as Context from "effect/Context"
import * as DateTime from "effect/DateTime"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as PubSub from "effect/PubSub"
import * as Redacted from "effect/Redacted"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as Semaphore from "effect/Semaphore"
import type { HttpClient } from "effect/http"
import { SqlClient } from "effect/sql/SqlClient"
import { AppConfig, type Connection, type CredentialKind } from "../config/AppConfig.ts"
import {
  CrmError,
  type CrmErrorReason,
  DatabaseUnavailable,
  MissingCredentials,
  NeedsReauthorization,
  Unauthorized
} from "./CrmError.ts"
import { refreshGrant, type TokenSet } from "./OAuth.ts"
import { open, parseKey, seal, type TokenKey } from "./TokenCipher.ts"

/** An access token this close to its expiry is refreshed before use rather than sent. */
const REFRESH_AHEAD = Duration.seconds(60)

/** How long a refresher waits for another process's refresh (which is bounded by its own timeout). */
const LOCK_TIMEOUT = "60s"

export interface CredentialStatus {
  readonly connection: string
  readonly kind: CredentialKind
  /** Where the token comes from: the config, the credentials table, or nowhere yet. */
  readonly source: "config" | "stored" | "none"
  readonly needsReauthorization: boolean
  /** The CRM user an OAuth grant belongs to, once `connect` has asked `GET /v1/me`. */
  readonly userId: string | undefined
  readonly accessExpiresAt: DateTime.Utc | undefined
  readonly lastError: string | undefined
  readonly updatedAt: DateTime.Utc | undefined
}

const Row = Schema.Struct({
  access_token: Schema.NullOr(Schema.Uint8Array),
  refresh_token: Schema.NullOr(Schema.Uint8Array),
  needs_reauthorization: Schema.Boolean,
  user_id: Schema.NullOr(Schema.String),
  last_error: Schema.NullOr(Schema.String),
  /** Milliseconds left before the access token expires (negative once it has), on the database's clock. */
  expires_in_ms: Schema.NullOr(Schema.Number),
  expires_at_ms: Schema.NullOr(Schema.Number),
  updated_at_ms: Schema.Number
})
type Row = typeof Row.Type
const decodeRows = Schema.decodeUnknownEffect(Schema.Array(Row))

const COLUMNS = `access_token, refresh_token, needs_reauthorization, user_id, last_error,
  (extract(epoch FROM access_expires_at - clock_timestamp()) * 1000)::float8 AS expires_in_ms,
  (extract(epoch FROM access_expires_at) * 1000)::float8 AS expires_at_ms,
  (extract(epoch FROM updated_at) * 1000)::float8 AS updated_at_ms`

/** A personal token, or an OAuth connection configured with a fixed token instead of OAuth settings. */
const configuredToken = (connection: Connection): Redacted.Redacted<string> | undefined =>
  connection.credential === "personal" || connection.oauth === undefined ? connection.token : undefined

const failure = (operation: string, connection: Connection, reason: CrmErrorReason) =>
  new CrmError({ operation, connection: connection.name, attempts: 1, reason })

const database = (operation: string, connection: Connection) => (cause: unknown) =>
  failure(
    operation,
    connection,
    new DatabaseUnavailable({ detail: cause instanceof Error ? cause.message.slice(0, 200) : "credentials" })
  )

const notConnected = (operation: string, connection: Connection) =>
  failure(
    operation,
    connection,
    new MissingCredentials({
      detail: `connection ${connection.name} has no OAuth tokens yet: run \`crm-sync connect ${connection.name}\``
    })
  )

interface Cached {
  readonly token: Redacted.Redacted<string>
  /** Clock millis after which the token is refreshed before use; undefined: no known expiry. */
  readonly refreshAt: number | undefined
}

/** What the service's functions share: the database, the encryption key, this process's cache and locks. */
interface Vault {
  readonly sql: SqlClient
  readonly key: Result.Result<TokenKey, string>
  readonly httpClient: Context.Context<HttpClient.HttpClient>
  readonly cache: Map<string, Cached>
  /** One refresh at a time per connection in this process (the row lock orders the processes). */
  readonly locks: Map<string, Semaphore.Semaphore>
  /** The connections whose grant this process found refused (see `announceRefused`). */
  readonly refused: PubSub.PubSub<string>
}

const lockFor = (vault: Vault, name: string) => {
  const existing = vault.locks.get(name)
  if (existing !== undefined) return existing
  const created = Semaphore.makeUnsafe(1)
  vault.locks.set(name, created)
  return created
}

const tokenKey = (vault: Vault, operation: string, connection: Connection) =>
  Result.match(vault.key, {
    onSuccess: Effect.succeed,
    onFailure: (detail) => Effect.fail(failure(operation, connection, new MissingCredentials({ detail })))
  })

const openToken = (vault: Vault, operation: string, connection: Connection, sealed: Uint8Array) =>
  Effect.flatMap(tokenKey(vault, operation, connection), (k) =>
    Result.match(open(k, connection.name, sealed), {
      onSuccess: Effect.succeed,
      onFailure: (detail) => Effect.fail(failure(operation, connection, new MissingCredentials({ detail })))
    })
  )

const readRow = (sql: SqlClient, connection: Connection, lock: boolean) =>
  (lock
    ? sql`SELECT ${sql.literal(COLUMNS)} FROM crm_sync.credentials WHERE connection = ${connection.name} FOR UPDATE`
    : sql`SELECT ${sql.literal(COLUMNS)} FROM crm_sync.credentials WHERE connection = ${connection.name}`
  ).pipe(
    Effect.flatMap(decodeRows),
    Effect.map((rows) => Option.fromUndefinedOr(rows[0]))
  )

const remember = Effect.fnUntraced(function* (
  vault: Vault,
  connection: Connection,
  token: Redacted.Redacted<string>,
  expiresInMs: number | null
) {
  const now = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
  vault.cache.set(connection.name, {
    token,
    refreshAt: expiresInMs === null ? undefined : now + expiresInMs - Duration.toMillis(REFRESH_AHEAD)
  })
  return token
})

const needsReauthorization = (operation: string, connection: Connection, row: Row) =>
  failure(operation, connection, new NeedsReauthorization(row.last_error === null ? {} : { detail: row.last_error }))

/**
 * The grant's failure, committed with it: `status` shows it, and no other process retries a dead
 * grant.
 */
const recordRefreshFailure = (sql: SqlClient, connection: Connection, error: CrmError) => {
  const reason = error.reason
  const dead = reason instanceof NeedsReauthorization
  // refused_at: the start of the range in which the CRM sends no events (it removes the
  // subscription with the grant); `status` lists it.
  return sql`UPDATE crm_sync.credentials
    SET refused_at = CASE WHEN ${dead} AND NOT needs_reauthorization THEN now() ELSE refused_at END,
        reauthorized_at = CASE WHEN ${dead} AND NOT needs_reauthorization THEN NULL ELSE reauthorized_at END,
        needs_reauthorization = needs_reauthorization OR ${dead},
        last_error = ${dead ? `invalid_grant${reason.detail === undefined ? "" : `: ${reason.detail}`}` : reason.description},
        updated_at = now()
    WHERE connection = ${connection.name}`
}

/**
 * The new pair, the rotated refresh token included, committed before either is used. One hazard
 * is left to the authorization server: if it rotates the refresh token and this commit then
 * fails, the stored refresh token is the old one, and the next refresh ends in `invalid_grant`
 * (needs re-authorization) — loud, never a silent loop.
 */
const storeRefreshed = (sql: SqlClient, connection: Connection, k: TokenKey, tokens: TokenSet, row: Row) => {
  const expiresInMs = tokens.expiresIn === undefined ? null : Duration.toMillis(tokens.expiresIn)
  return sql`UPDATE crm_sync.credentials
    SET access_token = ${seal(k, connection.name, tokens.accessToken)},
        refresh_token = ${tokens.refreshToken === undefined ? row.refresh_token : seal(k, connection.name, tokens.refreshToken)},
        access_expires_at = ${expiresInMs === null ? null : expiresInMs / 1000}::float8 * interval '1 second' + clock_timestamp(),
        needs_reauthorization = false, last_error = NULL, updated_at = now()
    WHERE connection = ${connection.name}`.pipe(Effect.as(expiresInMs))
}

/**
 * Inside the row lock: reuse a token someone else refreshed, or refresh it ourselves. The refresher
 * holds the connection's row lock (`SELECT ... FOR UPDATE`) while it calls the token endpoint and
 * commits the new pair; a process that waited on the lock finds the token changed and uses it
 * without a token request of its own.
 */
const refreshLocked = Effect.fnUntraced(function* (
  vault: Vault,
  connection: Connection,
  rejected: Redacted.Redacted<string> | undefined
) {
  const { sql } = vault
  const operation = "Credentials.refresh"
  yield* sql.unsafe(`SET LOCAL lock_timeout = '${LOCK_TIMEOUT}'`)
  const row = yield* readRow(sql, connection, true)
  if (Option.isNone(row) || row.value.access_token === null) return yield* notConnected(operation, connection)
  if (row.value.needs_reauthorization) return yield* needsReauthorization(operation, connection, row.value)
  const current = yield* openToken(vault, operation, connection, row.value.access_token)
  const expiring = row.value.expires_in_ms !== null && row.value.expires_in_ms < Duration.toMillis(REFRESH_AHEAD)
  const replaced = rejected !== undefined && Redacted.value(current) !== Redacted.value(rejected)
  if ((rejected === undefined || replaced) && !expiring) {
    return Result.succeed({ token: current, expiresInMs: row.value.expires_in_ms, refreshed: false })
  }
  if (row.value.refresh_token === null) {
    yield* sql`UPDATE crm_sync.credentials
      SET needs_reauthorization = true, last_error = 'no refresh token', updated_at = now(),
          refused_at = now(), reauthorized_at = NULL
      WHERE connection = ${connection.name}`
    return Result.fail(failure(operation, connection, new NeedsReauthorization({ detail: "no refresh token" })))
  }
  const refreshToken = yield* openToken(vault, operation, connection, row.value.refresh_token)
  const outcome = yield* refreshGrant(connection, refreshToken).pipe(
    Effect.provideContext(vault.httpClient),
    Effect.result
  )
  if (Result.isFailure(outcome)) {
    yield* recordRefreshFailure(sql, connection, outcome.failure)
    return Result.fail(outcome.failure)
  }
  const k = yield* tokenKey(vault, operation, connection)
  const expiresInMs = yield* storeRefreshed(sql, connection, k, outcome.success, row.value)
  return Result.succeed({ token: outcome.success.accessToken, expiresInMs, refreshed: true })
})

/**
 * The grant was just refused: one ERROR line, and the news for this process's subscription check
 * (the CRM removed the webhook subscription with the grant; it re-checks at once).
 */
const announceRefused = (vault: Vault, connection: Connection, reason: NeedsReauthorization) =>
  Effect.andThen(
    Effect.logError(
      `connection ${connection.name}: the CRM refused the OAuth grant (${reason.detail ?? "invalid_grant"}); ` +
        `nothing is synced and the CRM removed the webhook subscription with it, so its events are lost from now: ` +
        `run \`crm-sync connect ${connection.name}\` (it subscribes again), then \`crm-sync reconcile\``
    ).pipe(Effect.annotateLogs({ connection: connection.name })),
    PubSub.publish(vault.refused, connection.name)
  )

const refresh = (vault: Vault) =>
  Effect.fn("Credentials.refresh")(function* (connection: Connection, rejected: Redacted.Redacted<string> | undefined) {
    if (configuredToken(connection) !== undefined) {
      // A configured token cannot be refreshed: a 401 for it is final.
      return yield* failure("Credentials.refresh", connection, new Unauthorized({}))
    }
    const outcome = yield* lockFor(vault, connection.name).withPermit(
      vault.sql
        .withTransaction(refreshLocked(vault, connection, rejected))
        .pipe(
          Effect.catchTag(["SqlError", "SchemaError"], (error) =>
            Effect.fail(database("Credentials.refresh", connection)(error))
          )
        )
    )
    if (Result.isFailure(outcome)) {
      vault.cache.delete(connection.name)
      // Only the process that turned the grant refused gets here with NeedsReauthorization (the
      // others find it flagged and fail inside refreshLocked): so it is said once.
      if (outcome.failure.reason instanceof NeedsReauthorization) {
        yield* announceRefused(vault, connection, outcome.failure.reason)
      }
      return yield* outcome.failure
    }
    if (outcome.success.refreshed) {
      yield* Effect.logInfo("credentials: refreshed the OAuth access token").pipe(
        Effect.annotateLogs({ connection: connection.name })
      )
    }
    return yield* remember(vault, connection, outcome.success.token, outcome.success.expiresInMs)
  })

const token = (vault: Vault, refresh: Credentials["Service"]["refresh"]) =>
  Effect.fn("Credentials.token")(function* (connection: Connection) {
    const configured = configuredToken(connection)
    if (configured !== undefined) return configured
    const now = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
    const cached = vault.cache.get(connection.name)
    if (cached !== undefined && (cached.refreshAt === undefined || now < cached.refreshAt)) return cached.token
    const row = yield* readRow(vault.sql, connection, false).pipe(
      Effect.mapError(database("Credentials.token", connection))
    )
    if (Option.isNone(row) || row.value.access_token === null) {
      return yield* notConnected("Credentials.token", connection)
    }
    if (row.value.needs_reauthorization) return yield* needsReauthorization("Credentials.token", connection, row.value)
    const stored = yield* openToken(vault, "Credentials.token", connection, row.value.access_token)
    if (row.value.expires_in_ms !== null && row.value.expires_in_ms < Duration.toMillis(REFRESH_AHEAD)) {
      return yield* refresh(connection, undefined)
    }
    return yield* remember(vault, connection, stored, row.value.expires_in_ms)
  })

const store = (vault: Vault) =>
  Effect.fn("Credentials.store")(function* (connection: Connection, tokens: TokenSet) {
    const { sql } = vault
    const k = yield* tokenKey(vault, "Credentials.store", connection)
    const expiresInMs = tokens.expiresIn === undefined ? null : Duration.toMillis(tokens.expiresIn)
    yield* sql`INSERT INTO crm_sync.credentials
        (connection, access_token, refresh_token, access_expires_at, user_id, needs_reauthorization, last_error, updated_at)
      VALUES (${connection.name}, ${seal(k, connection.name, tokens.accessToken)},
        ${tokens.refreshToken === undefined ? null : seal(k, connection.name, tokens.refreshToken)},
        ${expiresInMs === null ? null : expiresInMs / 1000}::float8 * interval '1 second' + clock_timestamp(),
        NULL, false, NULL, now())
      ON CONFLICT (connection) DO UPDATE SET
        reauthorized_at = CASE WHEN credentials.refused_at IS NOT NULL AND credentials.reauthorized_at IS NULL
                               THEN now() ELSE credentials.reauthorized_at END,
        access_token = excluded.access_token, refresh_token = excluded.refresh_token,
        access_expires_at = excluded.access_expires_at, user_id = NULL, needs_reauthorization = false,
        last_error = NULL, updated_at = now()`.pipe(Effect.mapError(database("Credentials.store", connection)))
    vault.cache.delete(connection.name)
  })

const recordUser = (sql: SqlClient) =>
  Effect.fn("Credentials.recordUser")(function* (connection: Connection, userId: string) {
    yield* sql`UPDATE crm_sync.credentials SET user_id = ${userId}, updated_at = now()
      WHERE connection = ${connection.name}`.pipe(Effect.mapError(database("Credentials.recordUser", connection)))
  })

/** The status of a connection with no stored row to show: its token is configured, or there is none yet. */
const unstoredStatus = (connection: Connection, source: "config" | "none"): CredentialStatus => ({
  connection: connection.name,
  kind: connection.credential,
  source,
  needsReauthorization: false,
  userId: undefined,
  accessExpiresAt: undefined,
  lastError: undefined,
  updatedAt: undefined
})

const status = (sql: SqlClient) =>
  Effect.fn("Credentials.status")(function* (connection: Connection) {
    if (configuredToken(connection) !== undefined) return unstoredStatus(connection, "config")
    const row = yield* readRow(sql, connection, false).pipe(Effect.mapError(database("Credentials.status", connection)))
    return Option.match(row, {
      onNone: () => unstoredStatus(connection, "none"),
      onSome: (value): CredentialStatus => ({
        connection: connection.name,
        kind: connection.credential,
        source: value.access_token === null ? "none" : "stored",
        needsReauthorization: value.needs_reauthorization,
        userId: value.user_id ?? undefined,
        accessExpiresAt:
          value.expires_at_ms === null ? undefined : DateTime.makeUnsafe(Math.round(value.expires_at_ms)),
        lastError: value.last_error ?? undefined,
        updatedAt: DateTime.makeUnsafe(Math.round(value.updated_at_ms))
      })
    })
  })

const unusable = (vault: Vault) =>
  Effect.fn("Credentials.unusable")(function* (connection: Connection) {
    if (configuredToken(connection) !== undefined || connection.credential !== "oauth") {
      return Option.none<string>()
    }
    const key = vault.key
    if (Result.isFailure(key)) return Option.some(key.failure)
    const row = yield* readRow(vault.sql, connection, false).pipe(
      Effect.mapError(database("Credentials.unusable", connection))
    )
    const sealed = Option.flatMap(row, (value) => Option.fromNullishOr(value.access_token))
    if (Option.isNone(sealed)) return Option.none<string>()
    return Result.match(open(key.success, connection.name, sealed.value), {
      onSuccess: () => Option.none<string>(),
      onFailure: (detail) =>
        Option.some(`the stored OAuth tokens cannot be opened with CRM_SYNC_ENCRYPTION_KEY: ${detail}`)
    })
  })

const make = Effect.gen(function* () {
  const config = yield* AppConfig
  const vault: Vault = {
    sql: yield* SqlClient,
    key:
      config.encryption_key === undefined
        ? Result.fail("CRM_SYNC_ENCRYPTION_KEY (encryption_key) is not set; OAuth tokens are stored encrypted with it")
        : parseKey(config.encryption_key),
    httpClient: yield* Effect.context<HttpClient.HttpClient>(),
    cache: new Map(),
    locks: new Map(),
    refused: yield* PubSub.unbounded<string>()
  }
  const refreshToken = refresh(vault)
  return Credentials.of({
    token: token(vault, refreshToken),
    refresh: refreshToken,
    store: store(vault),
    recordUser: recordUser(vault.sql),
    status: status(vault.sql),
    unusable: unusable(vault),
    refusals: PubSub.subscribe(vault.refused)
  })
})

export class Credentials extends Context.Service<
  Credentials,
  {
    /** The token to send now: the configured one, or the stored OAuth token (refreshed if about to expire). */
    readonly token: (connection: Connection) => Effect.Effect<Redacted.Redacted<string>, CrmError>
    /**
     * A fresh OAuth token after `rejected` was refused (401) or expired: one token request per
     * connection across all processes; a caller that waited for another's refresh gets its result.
     */
    readonly refresh: (
      connection: Connection,
      rejected: Redacted.Redacted<string> | undefined
    ) => Effect.Effect<Redacted.Redacted<string>, CrmError>
    /** Stores a token pair from `connect` (encrypted), clearing any "needs re-authorization". */
    readonly store: (connection: Connection, tokens: TokenSet) => Effect.Effect<void, CrmError>
    /** Records which CRM user a connection's grant belongs to (its OAuth user bucket, spec §8). */
    readonly recordUser: (connection: Connection, userId: string) => Effect.Effect<void, CrmError>
    /** What `crm-sync status` shows of a connection's credentials (no token values). */
    readonly status: (connection: Connection) => Effect.Effect<CredentialStatus, CrmError>
    /**
     * Why this process cannot use the connection's credentials, if it cannot: an OAuth connection
     * with no encryption key, or stored tokens the configured key does not open (a wrong or rotated
     * `CRM_SYNC_ENCRYPTION_KEY`). A connection not connected yet, or needing re-authorization, is
     * not such a problem: those are the CRM grant's state, the same for every replica.
     */
    readonly unusable: (connection: Connection) => Effect.Effect<Option.Option<string>, CrmError>
    /** The names of the connections whose grant this process finds refused from now on, as it finds them. */
    readonly refusals: Effect.Effect<PubSub.Subscription<string>, never, Scope.Scope>
  }
>()("crm-sync/crm/Credentials") {
  static readonly layer: Layer.Layer<Credentials, never, AppConfig | SqlClient | HttpClient.HttpClient> = Layer.effect(
    Credentials,
    make
  )
}

/**
 * The CRM user of each connection's grant, where `connect` recorded it: an OAuth connection's token
 * bucket is that user's (spec §8), for the plan and `status` as for the client.
 */
export const recordedUsers = Effect.gen(function* () {
  const sql = yield* SqlClient
  const rows = yield* sql<{ connection: string; user_id: string }>`
    SELECT connection, user_id FROM crm_sync.credentials WHERE user_id IS NOT NULL`
  return new Map(rows.map((row) => [row.connection, row.user_id]))
})

/** The connections whose grant the CRM refused (`invalid_grant`): `crm-sync connect` again. */
export const needingReauthorization = Effect.gen(function* () {
  const sql = yield* SqlClient
  const rows = yield* sql<{ connection: string }>`
    SELECT connection FROM crm_sync.credentials WHERE needs_reauthorization ORDER BY connection`
  return rows.map((row) => row.connection)
})

/**
 * Per connection, the latest time range in which the CRM refused its grant: from the refusal to
 * the `crm-sync connect` that stored a new one (null while still refused).
 */
export const grantGaps = Effect.gen(function* () {
  const sql = yield* SqlClient
  return yield* sql<{ connection: string; started_at: Date; ended_at: Date | null }>`
    SELECT connection, refused_at AS started_at, reauthorized_at AS ended_at
    FROM crm_sync.credentials WHERE refused_at IS NOT NULL ORDER BY connection`
})
