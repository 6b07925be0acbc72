// Long by design: the whole config document is one schema, a section per top-level key.
/**
 * AppConfig: everything crm-sync is told about its world — CRM connections, webhook endpoints,
 * schedules, budget shares and tuning — from the JSON file named by `CRM_SYNC_CONFIG` with
 * environment variables laid over it (env wins). The single-connection case needs no file at all.
 *
 * The merged document is decoded with Schema. A bad value fails with a `ConfigInvalid` naming
 * the key and what is wrong, in one line; `main.ts` prints it and exits 2. Tokens, client
 * secrets, signing secrets, the encryption key and the database URL are `Redacted` from the
 * moment they are decoded, so no log line, error or `status` output can show them.
 */
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Cron from "effect/Cron"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SchemaIssue from "effect/SchemaIssue"
import { existsSync, readFileSync } from "node:fs"
import { type Variable, Variables } from "./Variables.ts"

export class ConfigInvalid extends Schema.TaggedError<ConfigInvalid>()("ConfigInvalid", {
  key: Schema.String,
  message: Schema.String
}) {
  /** The one line printed before exiting with code 2. */
  get line(): string {
    return `config: ${this.key}: ${this.message}`
  }
}

const Secret = Schema.RedactedFromValue(Schema.NonEmptyString)

/**
 * A Standard Webhooks signing secret: `whsec_` and the base64 of the key. Anything else would be
 * accepted by the verifier as some other key and every delivery would fail its signature.
 */
const SigningSecret = Schema.RedactedFromValue(
  Schema.String.check(
    Schema.isPattern(/^whsec_[A-Za-z0-9+/]{4,}={0,2}$/, {
      message: "a signing secret is whsec_ followed by base64, as the CRM shows it"
    })
  )
)

/**
 * The CRM's address: http or https, no credentials (the client never sends them, and `status`
 * would print them), no query or fragment (paths add `/v1/...`).
 */
const BaseUrl = Schema.URLFromString.check(
  Schema.makeFilter((url: URL) =>
    url.protocol !== "https:" && url.protocol !== "http:"
      ? `expected an http or https URL, got ${url.protocol}`
      : url.username !== "" || url.password !== ""
        ? "must not carry credentials (user:password@): use the connection's token"
        : url.search !== "" || url.hash !== ""
          ? "must not have a query or fragment"
          : undefined
  )
)

const isLoopback = (url: URL) => ["127.0.0.1", "localhost", "[::1]"].includes(url.hostname)

/** An OAuth server address: https, or http on this machine only (a test server, the sandbox). */
const OAuthServerUrl = Schema.URLFromString.check(
  Schema.makeFilter((url: URL) =>
    url.protocol === "https:" || (url.protocol === "http:" && isLoopback(url))
      ? undefined
      : `must be https (http only on a loopback address), got ${url.protocol}//${url.host}`
  )
)

/** The code comes back to crm-sync itself, on this machine (RFC 8252 §7.3: loopback redirect). */
const RedirectUri = Schema.String.check(
  Schema.makeFilter((value: string) => {
    const url = URL.canParse(value) ? new URL(value) : undefined
    return url !== undefined && url.protocol === "http:" && isLoopback(url)
      ? undefined
      : "must be an http:// loopback address crm-sync listens on (127.0.0.1, localhost or [::1])"
  })
)

const PositiveInt = Schema.Int.check(Schema.isGreaterThan(0))
const Share = Schema.Finite.check(Schema.isBetween({ minimum: 0, maximum: 1 }))

/** A duration such as "5 minutes", "6 hours", "30 seconds" (Duration.fromInput's forms). */
const DurationString = Schema.DurationFromString

/** A duration between `min` and `max` (inclusive), with both named in the error. */
const DurationBetween = (min: Duration.Input, max: Duration.Input, example: string) => {
  const minMs = Duration.toMillis(Duration.fromInputUnsafe(min))
  const maxMs = Duration.toMillis(Duration.fromInputUnsafe(max))
  return DurationString.check(
    Schema.makeFilter(
      (duration: Duration.Duration) => Duration.toMillis(duration) >= minMs && Duration.toMillis(duration) <= maxMs,
      {
        expected: `a duration from ${Duration.format(Duration.millis(minMs))} to ${Duration.format(Duration.millis(maxMs))}, e.g. "${example}"`
      }
    )
  )
}

/** A duration of at least a second (a lease shorter than that would be taken from under its holder). */
const AtLeastASecond = DurationBetween("1 second", "1 day", "2 minutes")

/** How often a job runs: at least a second (0 s would poll without pause), at most a week. */
const Interval = DurationBetween("1 second", "7 days", "5 minutes")

/** A cron expression (five fields, UTC), checked as the scheduler will read it, or `off`. */
const CronExpression = Schema.String.check(
  Schema.makeFilter((expression: string) =>
    expression === "off"
      ? undefined
      : Result.match(Cron.parse(expression, "UTC"), {
          onSuccess: () => undefined,
          onFailure: (error) => `not a cron expression (minute hour day month weekday, UTC): ${error.message}`
        })
  )
)

const withDefault = <S extends Schema.Top>(schema: S, value: S["Encoded"]) =>
  schema.pipe(Schema.withDecodingDefaultKey(Effect.succeed(value)))

const Limits = Schema.Struct({
  token: Schema.optionalKey(PositiveInt),
  company: Schema.optionalKey(PositiveInt),
  ip: Schema.optionalKey(PositiveInt),
  window: Schema.optionalKey(DurationString)
})

const OAuth = Schema.Struct({
  client_id: Schema.NonEmptyString,
  client_secret: Secret,
  auth_url: OAuthServerUrl,
  token_url: OAuthServerUrl,
  redirect_uri: withDefault(RedirectUri, "http://127.0.0.1:8765/oauth/callback"),
  scope: Schema.optionalKey(Schema.String),
  company_id: Schema.optionalKey(Schema.String)
})

export const CredentialKind = Schema.Literals(["personal", "oauth"])
export type CredentialKind = typeof CredentialKind.Type

export const Connection = Schema.Struct({
  name: Schema.String.check(Schema.isPattern(/^[a-z0-9][a-z0-9_-]{0,62}$/, { message: "use a-z, 0-9, _ and -" })),
  base_url: BaseUrl,
  credential: CredentialKind,
  /** The personal access token; for OAuth, tokens come from `crm-sync connect` instead. */
  token: Schema.optionalKey(Secret),
  oauth: Schema.optionalKey(OAuth),
  /** Overrides of spec §8's limits for this connection's credential kind. */
  limits: withDefault(Limits, {}),
  /** Label of the per-IP bucket: connections leaving through the same address share one. */
  egress: withDefault(Schema.NonEmptyString, "default"),
  /** Label of the per-company/per-app bucket (default: the OAuth client id, else the connection name). */
  company_bucket: Schema.optionalKey(Schema.NonEmptyString),
  request_timeout: withDefault(DurationBetween("1 second", "10 minutes", "30 seconds"), "30 seconds")
}).check(
  Schema.makeFilter((connection) =>
    connection.credential === "personal" && connection.token === undefined
      ? { path: ["token"], issue: "a personal connection needs a token (or CRM_TOKEN)" }
      : connection.credential === "oauth" && connection.oauth === undefined && connection.token === undefined
        ? { path: ["oauth"], issue: "an oauth connection needs oauth settings or a token" }
        : undefined
  )
)
export type Connection = typeof Connection.Type

export const WebhookEndpoint = Schema.Struct({
  name: Schema.String.check(Schema.isPattern(/^[a-z0-9][a-z0-9_-]{0,62}$/, { message: "use a-z, 0-9, _ and -" })),
  /** Several at once during a rotation: a delivery signed by any of them is accepted. */
  secrets: Schema.NonEmptyArray(SigningSecret),
  /** Required for events that carry no `event_type` (client.created, client.updated, prospect.created). */
  event_type: Schema.optionalKey(Schema.NonEmptyString),
  connection: Schema.optionalKey(Schema.String)
})
export type WebhookEndpoint = typeof WebhookEndpoint.Type

const Webhooks = Schema.Struct({
  endpoints: withDefault(Schema.Array(WebhookEndpoint), []),
  tolerance: withDefault(DurationBetween("1 second", "1 day", "5 minutes"), "5 minutes"),
  max_body_bytes: withDefault(PositiveInt.check(Schema.isLessThanOrEqualTo(16 * 1024 * 1024)), 262_144),
  max_attempts: withDefault(PositiveInt.check(Schema.isLessThanOrEqualTo(100)), 10),
  retention: withDefault(DurationBetween("1 hour", "3650 days", "14 days"), "14 days"),
  /** How long a processor's claim on inbox rows lasts before another may take them (its holder died). */
  lease_timeout: withDefault(AtLeastASecond, "2 minutes"),
  /** A delivery must arrive whole (headers and body) within this, or its connection is closed. */
  read_timeout: withDefault(DurationBetween("1 second", "5 minutes", "10 seconds"), "10 seconds"),
  /** Open connections the webhook port keeps at once; beyond, new ones are refused. */
  max_connections: withDefault(PositiveInt.check(Schema.isLessThanOrEqualTo(100_000)), 500),
  /** Body bytes being read at once across all deliveries; beyond, 503 with Retry-After. */
  max_inflight_bytes: withDefault(PositiveInt.check(Schema.isLessThanOrEqualTo(1024 * 1024 * 1024)), 32 * 1024 * 1024)
})

const Schedules = Schema.Struct({
  businesses: withDefault(Interval, "5 minutes"),
  crawl: withDefault(Interval, "6 hours"),
  /** Full listings of businesses: the only way their deletions show (no event, no filter). */
  business_crawl: withDefault(Interval, "24 hours"),
  /** How often each OAuth connection's webhook subscription is checked (it can vanish, spec §3). */
  subscription_check: withDefault(Interval, "24 hours"),
  reference: withDefault(Interval, "24 hours"),
  reconcile: withDefault(CronExpression, "0 3 * * *"),
  prune: withDefault(Interval, "1 hour")
})

const Budget = Schema.Struct({
  /** Share of each window that bulk work (crawls, backfill, reconcile) leaves for the others. */
  reserve_interactive: withDefault(Share, 0.1),
  reserve_incremental: withDefault(Share, 0.1),
  /** Share of a window a reconciliation run may spend. */
  reconcile_share: withDefault(Share, 0.25),
  /** How long a ceiling learned from a 429 (other consumers' use) is kept. */
  learned_ceiling_ttl: withDefault(DurationBetween("1 minute", "7 days", "6 hours"), "6 hours"),
  /** How much of the configured limit a learned ceiling rises after each clean window. */
  probe_step: withDefault(Share, 0.2),
  /**
   * When permits are paced evenly across the window: only while a learned ceiling holds
   * (`learned`), or always (`always`: a co-tenant that spends late in the window is then met, and
   * learned from, instead of left the 429s).
   */
  pacing: withDefault(Schema.Literals(["learned", "always"]), "learned"),
  /** Requests are not started this close to a window's end (clock skew with the CRM). */
  safety_margin: withDefault(DurationBetween("0 millis", "1 minute", "2 seconds"), "2 seconds")
})

const Sync = Schema.Struct({
  /** A crawl that would delete more than this share of a resource at once deletes nothing. */
  deletion_threshold: withDefault(Share, 0.1),
  /** How far behind the cursor a poll starts again (equal timestamps, clock skew, late commits). */
  poll_lookback: withDefault(DurationBetween("0 millis", "1 day", "5 minutes"), "5 minutes"),
  /**
   * How long the history of job runs (`crm_sync.job_runs`) is kept: every `schedules.prune`, runs
   * that finished longer ago go, except each job's latest run and latest success and backfills'.
   */
  history_retention: withDefault(DurationBetween("1 day", "3650 days", "90 days"), "90 days"),
  /**
   * How many scheduled jobs (polls, crawls, reference refreshes, subscription checks) a process
   * runs at once, whatever the number of connections: the size of the scheduler's worker pool.
   */
  workers: withDefault(PositiveInt.check(Schema.isLessThanOrEqualTo(64)), 4)
})

/** The resources that can keep a history (schema crm_history, migration 0025; docs/history.md). */
export const HistoryResourceNames = [
  "annuity_contracts",
  "businesses",
  "clients",
  "financial_accounts",
  "households"
] as const

const History = Schema.Struct({
  /** Which resources keep every version of their records in crm_history (all of them by default). */
  resources: withDefault(Schema.Array(Schema.Literals(HistoryResourceNames)), [...HistoryResourceNames]),
  /**
   * How long a closed version is kept after it ended (`valid_to`): `forever` (the default), or a
   * duration; every `schedules.prune`, older closed versions go, a slice at a time.
   */
  retention: withDefault(
    Schema.Union([Schema.Literal("forever"), DurationBetween("1 day", "36500 days", "365 days")]),
    "forever"
  )
})

const Outbound = Schema.Struct({
  max_attempts: withDefault(PositiveInt.check(Schema.isLessThanOrEqualTo(100)), 8),
  /** How long a writer's claim on a row lasts without renewal (it renews every third of it while working). */
  lease_timeout: withDefault(AtLeastASecond, "2 minutes"),
  /**
   * Retry a create the CRM answered with a 5xx. Off by default: a 5xx is not cached (spec §4
   * rule 6), so when the CRM had committed before failing, the retry creates the record twice.
   */
  retry_server_errors: withDefault(Schema.Boolean, false)
})

/**
 * Settings of every crm-sync session on the warehouse (sent when each connection opens). No
 * transaction of crm-sync waits for anything of its own process, so every wait is a lock
 * PostgreSQL sees; these bound the rest: a lock wait fails after `lock_timeout` (and the write is
 * tried again), and a session idle inside a transaction longer than
 * `idle_in_transaction` is closed by the server, its locks released. The latter stays above
 * the OAuth token request's 30 s, which a refresh makes holding its connection's row lock.
 */
const DatabaseSettings = Schema.Struct({
  lock_timeout: withDefault(DurationBetween("100 millis", "10 minutes", "10 seconds"), "10 seconds"),
  idle_in_transaction: withDefault(DurationBetween("35 seconds", "1 day", "1 minute"), "1 minute"),
  /** Pooled sessions of one process: each LISTEN keeps one, each running job uses one or two. */
  pool_size: withDefault(PositiveInt.check(Schema.isGreaterThanOrEqualTo(4), Schema.isLessThanOrEqualTo(200)), 10)
})

export const ConfigDocument = Schema.Struct({
  database_url: Schema.optionalKey(Secret),
  data_dir: withDefault(Schema.NonEmptyString, ".crm-sync"),
  encryption_key: Schema.optionalKey(Secret),
  webhook_port: withDefault(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 65535 })), 8080),
  /** The operators' listener: status page, `/status`, `/metrics`, `/readyz`, `/healthz`. */
  admin_port: withDefault(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 65535 })), 9090),
  /** Where the admin listener binds: all interfaces by default (a container's port is its pod's). */
  admin_host: withDefault(Schema.NonEmptyString, "0.0.0.0"),
  /** When set, every admin request but `/healthz` and `/readyz` needs `Authorization: Bearer <token>`. */
  admin_token: Schema.optionalKey(Secret),
  /**
   * `/metrics` answers without `admin_token`: Prometheus's pod-annotation discovery cannot send
   * one. For an admin port that only the cluster reaches (the shipped NetworkPolicy).
   */
  open_metrics: withDefault(Schema.Boolean, false),
  log_level: withDefault(Schema.Literals(["debug", "info", "warn", "error"]), "info"),
  /** `json` lines or readable `text`; unset: text on a terminal, JSON otherwise. */
  log_format: Schema.optionalKey(Schema.Literals(["json", "text"])),
  /**
   * `apply` (default): every command applies pending migrations first. `check`: it only verifies
   * that none is pending and stops if one is — for a runtime role that may not run DDL
   * (ops/sql/roles.sql), with `crm-sync migrate` run as the migration owner before it.
   */
  migrations: withDefault(Schema.Literals(["apply", "check"]), "apply"),
  connections: withDefault(Schema.Array(Connection), []),
  webhooks: withDefault(Webhooks, {}),
  schedules: withDefault(Schedules, {}),
  budget: withDefault(Budget, {}),
  sync: withDefault(Sync, {}),
  outbound: withDefault(Outbound, {}),
  history: withDefault(History, {}),
  database: withDefault(DatabaseSettings, {})
}).check(
  Schema.makeFilter((document) => {
    if (document.admin_port !== 0 && document.admin_port === document.webhook_port)
      return { path: ["admin_port"], issue: "must differ from webhook_port (the webhook port faces the internet)" }
    const seen = new Set<string>()
    for (const [index, connection] of document.connections.entries()) {
      if (seen.has(connection.name)) return { path: ["connections", index, "name"], issue: "duplicate name" }
      seen.add(connection.name)
    }
    // A delivery older than the retention could be accepted again after its row was pruned.
    if (Duration.isGreaterThan(document.webhooks.tolerance, document.webhooks.retention))
      return { path: ["webhooks", "tolerance"], issue: "must not exceed webhooks.retention" }
    const endpoints = new Set<string>()
    for (const [index, endpoint] of document.webhooks.endpoints.entries()) {
      if (endpoints.has(endpoint.name))
        return { path: ["webhooks", "endpoints", index, "name"], issue: "duplicate name" }
      endpoints.add(endpoint.name)
    }
    return undefined
  })
)
export type ConfigDocument = typeof ConfigDocument.Type

export interface AppConfigShape extends ConfigDocument {
  /** Where the settings came from, for `status`. */
  readonly origin: string
}

type EnvValues = { readonly [K in keyof typeof Variables]: Option.Option<string> }

/**
 * A variable's value from the environment, or — the convention of container platforms for
 * secrets — from the file `NAME_FILE` names (its content, without the trailing newline). Both set
 * is an error, and so is a file that cannot be read; each names the variable. `from` is what the
 * user set: NAME or NAME_FILE.
 */
const readNamed = (name: string): Effect.Effect<Option.Option<{ value: string; from: string }>, ConfigInvalid> =>
  Effect.gen(function* () {
    const direct = yield* readSet(name)
    const file = yield* readSet(`${name}_FILE`)
    if (Option.isNone(file)) return Option.map(direct, (value) => ({ value, from: name }))
    if (Option.isSome(direct)) {
      return yield* new ConfigInvalid({ key: name, message: `both ${name} and ${name}_FILE are set; set one` })
    }
    return Option.some({ value: yield* readSecretFile(`${name}_FILE`, file.value), from: `${name}_FILE` })
  })

/** A contract variable by its name, or else by its alias (the name wins when both are set). */
const readVariableOf = (variable: Variable) =>
  Effect.flatMap(readNamed(variable.name), (found) =>
    Option.isSome(found) || variable.alias === undefined ? Effect.succeed(found) : readNamed(variable.alias)
  )

const readVariable = (name: string): Effect.Effect<Option.Option<string>, ConfigInvalid> =>
  Effect.map(
    readNamed(name),
    Option.map((found) => found.value)
  )

/** A variable's value, if it is set and not empty. */
const readSet = (key: string) =>
  Config.option(Config.String(key)).pipe(
    Effect.mapError((error) => new ConfigInvalid({ key: "environment", message: error.message })),
    Effect.map(Option.filter((value) => value !== ""))
  )

/** The content of a secret's file (trailing newline removed); an error names `key`. */
const readSecretFile = (key: string, path: string): Effect.Effect<string, ConfigInvalid> =>
  Effect.try({
    try: () => readFileSync(path, "utf8").replace(/\r?\n$/, ""),
    catch: (cause) =>
      new ConfigInvalid({
        key,
        message: `cannot read ${path}: ${cause instanceof Error ? cause.message.replace(/^[A-Z]+: /, "") : String(cause)}`
      })
  }).pipe(
    Effect.filterOrFail(
      (content) => content !== "",
      () => new ConfigInvalid({ key, message: `${path} is empty` })
    )
  )

/** The variable the user set (NAME, NAME_FILE, or an alias) for document key `key`, if one did. */
const variableFor = (key: string): Effect.Effect<string | undefined, ConfigInvalid> =>
  Effect.gen(function* () {
    for (const variable of Object.values(Variables) as ReadonlyArray<Variable>) {
      if (variable.key !== key) continue
      const found = yield* readVariableOf(variable)
      if (Option.isSome(found)) return found.value.from
    }
    return undefined
  })

/** The contract's variables (each from NAME or NAME_FILE). */
const Env: Effect.Effect<EnvValues, ConfigInvalid> = Effect.map(
  Effect.forEach(Object.entries(Variables), ([field, variable]) =>
    Effect.map(readVariableOf(variable), (found) => [field, Option.map(found, (it) => it.value)] as const)
  ),
  (entries) => Object.fromEntries(entries) as unknown as EnvValues
)

type Json = Record<string, unknown>

const isRecord = (value: unknown): value is Json => typeof value === "object" && value !== null && !Array.isArray(value)

/** Lays the environment over the file's document (env wins), before any decoding. */
export const mergeEnv = (file: Json, env: EnvValues): Json => {
  const document: Json = { ...file }
  const set = (key: string, value: Option.Option<string>, as: (raw: string) => unknown = (raw) => raw) => {
    if (Option.isSome(value) && value.value !== "") document[key] = as(value.value)
  }
  set("database_url", env.databaseUrl)
  set("data_dir", env.dataDir)
  set("encryption_key", env.encryptionKey)
  set("webhook_port", env.webhookPort, (raw) => (/^\d+$/.test(raw) ? Number(raw) : raw))
  set("admin_port", env.adminPort, (raw) => (/^\d+$/.test(raw) ? Number(raw) : raw))
  set("admin_token", env.adminToken)
  set("open_metrics", env.openMetrics, (raw) => (raw === "true" ? true : raw === "false" ? false : raw))
  set("log_level", env.logLevel)
  set("log_format", env.logFormat)
  set("migrations", env.migrations)
  if (Option.isSome(env.reconcileSchedule) && env.reconcileSchedule.value !== "") {
    const schedules: Json = isRecord(document.schedules) ? { ...document.schedules } : {}
    schedules.reconcile = env.reconcileSchedule.value
    document.schedules = schedules
  }

  const hasConnectionEnv = [env.baseUrl, env.token, env.tokenKind].some(Option.isSome)
  if (hasConnectionEnv) {
    const connections = Array.isArray(document.connections) ? [...document.connections] : []
    const first: Json = isRecord(connections[0]) ? { ...connections[0] } : { name: "default" }
    if (Option.isSome(env.baseUrl)) first.base_url = env.baseUrl.value
    if (Option.isSome(env.token)) first.token = env.token.value
    if (Option.isSome(env.tokenKind)) first.credential = env.tokenKind.value
    else if (first.credential === undefined) first.credential = "personal"
    connections[0] = first
    document.connections = connections
  }
  if (Option.isSome(env.webhookSecret) && env.webhookSecret.value !== "") {
    // CRM_WEBHOOK_SECRET alone: one endpoint, POST /webhooks/default, for every event with event_type.
    const webhooks: Json = isRecord(document.webhooks) ? { ...document.webhooks } : {}
    const endpoints = Array.isArray(webhooks.endpoints) ? [...webhooks.endpoints] : []
    const index = endpoints.findIndex((endpoint) => isRecord(endpoint) && endpoint.name === "default")
    const endpoint: Json = index >= 0 ? { ...(endpoints[index] as Json) } : { name: "default" }
    endpoint.secrets = [env.webhookSecret.value]
    if (index >= 0) endpoints[index] = endpoint
    else endpoints.push(endpoint)
    webhooks.endpoints = endpoints
    document.webhooks = webhooks
  }
  return document
}

/** `{"env": "NAME"}`: a value of the file given by an environment variable (a secret from a Secret). */
const isEnvRef = (value: unknown): value is { readonly env: string } =>
  isRecord(value) && Object.keys(value).length === 1 && typeof value.env === "string" && value.env !== ""

/** `{"file": "/run/secrets/x"}`: a value of the file read from another file (a mounted secret). */
const isFileRef = (value: unknown): value is { readonly file: string } =>
  isRecord(value) && Object.keys(value).length === 1 && typeof value.file === "string" && value.file !== ""

/** The files the document's `{"file": PATH}` values name, with the key each fills. */
const fileRefs = (
  document: unknown,
  path: ReadonlyArray<PropertyKey> = []
): ReadonlyArray<readonly [string, string]> => {
  if (isFileRef(document)) return [[formatPath(path), document.file]]
  if (Array.isArray(document)) return document.flatMap((item, index) => fileRefs(item, [...path, index]))
  if (isRecord(document)) return Object.entries(document).flatMap(([key, item]) => fileRefs(item, [...path, key]))
  return []
}

/** The variables the document's `{"env": "NAME"}` values name. */
export const envRefNames = (document: unknown): ReadonlyArray<string> => {
  if (isEnvRef(document)) return [document.env]
  if (Array.isArray(document)) return document.flatMap(envRefNames)
  if (isRecord(document)) return Object.values(document).flatMap(envRefNames)
  return []
}

/**
 * Replaces every `{"env": "NAME"}` in the file's document with the variable's value, so that a
 * config file (a ConfigMap) can name its secrets without holding them. An unset or empty variable
 * is an error naming the key that asked for it.
 */
export const resolveEnvRefs = (
  document: unknown,
  lookup: (name: string) => string | undefined,
  /** The content of each `{"file": PATH}`, by path. */
  files?: ReadonlyMap<string, string>
): Effect.Effect<unknown, ConfigInvalid> =>
  Effect.suspend(() => {
    const walk = (value: unknown, path: ReadonlyArray<PropertyKey>): unknown => {
      if (isFileRef(value)) {
        const found = files?.get(value.file)
        if (found === undefined)
          throw new ConfigInvalid({ key: formatPath(path), message: `${value.file} was not read` })
        return found
      }
      if (isEnvRef(value)) {
        const found = lookup(value.env)
        if (found === undefined || found === "") {
          throw new ConfigInvalid({
            key: formatPath(path),
            message: `environment variable ${value.env} is not set (nor ${value.env}_FILE)`
          })
        }
        return found
      }
      if (Array.isArray(value)) return value.map((item, index) => walk(item, [...path, index]))
      if (isRecord(value)) {
        return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, walk(item, [...path, key])]))
      }
      return value
    }
    try {
      return Effect.succeed(walk(document, []))
    } catch (error) {
      return error instanceof ConfigInvalid ? Effect.fail(error) : Effect.die(error)
    }
  })

const formatPath = (path: ReadonlyArray<PropertyKey>) =>
  path.reduce<string>(
    (out, segment) =>
      typeof segment === "number" ? `${out}[${segment}]` : out === "" ? String(segment) : `${out}.${String(segment)}`,
    ""
  ) || "(document)"

const standardFormatter = SchemaIssue.makeFormatterStandardSchemaV1()

/** Decodes a merged document; the first problem becomes one line naming its key. */
export const decodeDocument = (input: unknown): Effect.Effect<ConfigDocument, ConfigInvalid> =>
  Schema.decodeUnknownEffect(ConfigDocument)(input, { errors: "first", onExcessProperty: "error" }).pipe(
    Effect.mapError((error) => {
      const first = standardFormatter(error.issue).issues[0]
      const path = (first?.path ?? []).map((segment) =>
        typeof segment === "object" && segment !== null && "key" in segment ? segment.key : segment
      ) as ReadonlyArray<PropertyKey>
      return new ConfigInvalid({
        key: formatPath(path),
        message: (first?.message ?? error.message).replace(/\s+/g, " ")
      })
    })
  )

const readFile = (path: string) =>
  Effect.try({
    try: () => {
      if (!existsSync(path)) throw new Error("no such file")
      return JSON.parse(readFileSync(path, "utf8")) as unknown
    },
    catch: (cause) =>
      new ConfigInvalid({
        key: "CRM_SYNC_CONFIG",
        message: `cannot read ${path}: ${cause instanceof Error ? cause.message : String(cause)}`
      })
  }).pipe(
    Effect.filterOrFail(
      isRecord,
      () => new ConfigInvalid({ key: "CRM_SYNC_CONFIG", message: `${path} is not a JSON object` })
    )
  )

export class AppConfig extends Context.Service<AppConfig, AppConfigShape>()("crm-sync/config/AppConfig") {
  /** Reads CRM_SYNC_CONFIG (if set) and the environment through the current ConfigProvider. */
  static readonly load = Effect.gen(function* () {
    const env = yield* Env
    const raw = Option.isSome(env.file) && env.file.value !== "" ? yield* readFile(env.file.value) : {}
    const values = new Map<string, string>()
    for (const name of envRefNames(raw)) {
      const value = yield* readVariable(name)
      if (Option.isSome(value)) values.set(name, value.value)
    }
    const files = new Map<string, string>()
    for (const [key, path] of fileRefs(raw)) files.set(path, yield* readSecretFile(key, path))
    const file = (yield* resolveEnvRefs(raw, (name) => values.get(name), files)) as Json
    const document = yield* decodeDocument(mergeEnv(file, env)).pipe(
      // A bad value the user set in the environment is named as they set it: WEBHOOK_PORT, not webhook_port.
      Effect.catchTag("ConfigInvalid", (error) =>
        Effect.flatMap(variableFor(error.key), (variable) =>
          Effect.fail(variable === undefined ? error : new ConfigInvalid({ key: variable, message: error.message }))
        )
      )
    )
    const origin = Option.isSome(env.file) && env.file.value !== "" ? `${env.file.value} + environment` : "environment"
    return AppConfig.of({ ...document, origin })
  })

  static readonly layer = Layer.effect(AppConfig, AppConfig.load)

  /** A config for tests and the demo, decoded from a literal document (defaults applied). */
  static readonly layerFrom = (document: Json) =>
    Layer.effect(
      AppConfig,
      Effect.map(decodeDocument(document), (decoded) => AppConfig.of({ ...decoded, origin: "inline" }))
    )
}
