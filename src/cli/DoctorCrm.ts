/**
 * `crm-sync doctor`'s checks of one CRM connection: `GET /v1/me` with the configured token (and
 * what it says: the credential kind, write access), the OAuth grant, the clock against the CRM's
 * `Date` header, the webhook subscription crm-sync made, and with `--deep` one page of each
 * listing decoded against the models (schema drift). Every request goes through the CrmClient,
 * so through the rate budget like any other. Nothing is written: the subscription is read from
 * what crm-sync recorded, since asking the CRM (`POST /v1/webhook_subscription`) would create one.
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import type { AppConfigShape, Connection } from "../config/AppConfig.ts"
import { CrmClient, type CrmClientShape, type ListPage, type Probe } from "../crm/CrmClient.ts"
import type { CrmError } from "../crm/CrmError.ts"
import { Credentials } from "../crm/Credentials.ts"
import * as Models from "../crm/Models.ts"
import { decodeItems } from "../crm/Pagination.ts"
import { formatDuration, oneLine } from "../observability/Text.ts"
import { outboxCounts } from "../outbound/Outbox.ts"
import { activeSubscriptions } from "../webhooks/Subscriptions.ts"
import { type Check, fail, pass, skip } from "./DoctorChecks.ts"

/** What to do about a `GET /v1/me` that failed, by its reason. */
const meFix = (connection: Connection, error: CrmError): string => {
  const name = connection.name
  switch (error.reason._tag) {
    case "Unauthorized":
      return connection.credential === "oauth" && connection.token === undefined
        ? `the grant was refused: run \`crm-sync connect ${name}\``
        : "paste the token again from the CRM's settings (CRM_TOKEN, or the connection's token)"
    case "NeedsReauthorization":
    case "MissingCredentials":
      return `run \`crm-sync connect ${name}\` to authorize it`
    case "Forbidden":
      return "the token may not read its own user: check its scope in the CRM"
    case "Transport":
      return `check base_url (${connection.base_url.origin}), DNS and the firewall between here and the CRM`
    case "Server":
      return "the CRM is failing: try again later"
    case "DatabaseUnavailable":
      return "the rate budget's database failed: see the PostgreSQL checks"
    default:
      return `check base_url (${connection.base_url.origin}): it must be the CRM's API address`
  }
}

/** The CRM's clock against ours: the `Date` header against the middle of the request. */
const clockCheck = (config: AppConfigShape, name: string, date: string | undefined, sentAt: number, at: number) => {
  const check = `clock (${name})`
  const crm = date === undefined ? Number.NaN : Date.parse(date)
  if (!Number.isFinite(crm)) return skip(check, "the CRM's answer had no Date header to compare with")
  // An HTTP date has whole seconds: the CRM's time is somewhere in the second it names.
  const skew = crm + 500 - (sentAt + at) / 2
  const tolerance = Duration.toMillis(config.webhooks.tolerance)
  const off = `${formatDuration(Math.abs(skew))} ${skew >= 0 ? "ahead of" : "behind"} this machine's`
  return Math.abs(skew) <= tolerance
    ? pass(check, `the CRM's clock is ${off} (webhooks.tolerance ${formatDuration(tolerance)})`)
    : fail(
        check,
        `the CRM's clock is ${off}, beyond webhooks.tolerance (${formatDuration(tolerance)}): every delivery would be refused as too old or too new`,
        "synchronize this machine's clock (NTP)"
      )
}

/**
 * The kind an `auth_type` names. The spec leaves its values unshown (§2.11); the sandbox says
 * `personal_access_token` or `oauth`, and any value naming one of the two is read as it.
 */
export const kindOfAuthType = (authType: string): "personal" | "oauth" | undefined =>
  /oauth/i.test(authType) ? "oauth" : /personal|pat\b/i.test(authType) ? "personal" : undefined

const kindCheck = (connection: Connection, probe: Probe) => {
  const check = `credential kind (${connection.name})`
  const actual = probe.access.authType
  const kind = kindOfAuthType(actual)
  if (kind === undefined) return pass(check, `the CRM says auth_type ${actual}, which names neither kind: not compared`)
  return kind === connection.credential
    ? pass(check, `${kind} token (auth_type ${actual}), as configured`)
    : fail(
        check,
        `the CRM says this is a ${kind} token (auth_type ${actual}), the config says ${connection.credential}`,
        `set credential to "${kind}" (CRM_TOKEN_KIND; the rate limits differ by kind, spec §8)`
      )
}

/** Read-only is fine for a firm that only reads; not with writes waiting in the outbox. */
const writeCheck = (connection: Connection, probe: Probe) =>
  Effect.gen(function* () {
    const check = `write access (${connection.name})`
    if (probe.access.canWrite) return pass(check, "writes enabled (the outbox can send)")
    const counts = yield* outboxCounts.pipe(Effect.orElseSucceed(() => []))
    const waiting = counts
      .filter((row) => ["pending", "in_flight", "failed"].includes(row.status))
      .reduce((sum, row) => sum + row.n, 0)
    return waiting === 0
      ? pass(check, "read-only token: rows written to crm_sync.outbox would be refused (403)")
      : fail(
          check,
          `read-only token, and ${waiting} outbox row(s) wait to be sent: the CRM will refuse them (403)`,
          "enable write access for the token in the CRM, or use one that has it"
        )
  })

const grantCheck = (connection: Connection) =>
  Effect.gen(function* () {
    const check = `oauth grant (${connection.name})`
    const credentials = yield* Credentials
    const unusable = yield* credentials.unusable(connection)
    if (Option.isSome(unusable))
      return fail(check, unusable.value, "set the CRM_SYNC_ENCRYPTION_KEY the tokens were stored with")
    const status = yield* credentials.status(connection)
    if (status.source === "config") return pass(check, "token from the config (no refresh)")
    if (status.source === "none") return fail(check, "no tokens stored", `run \`crm-sync connect ${connection.name}\``)
    if (status.needsReauthorization) {
      return fail(
        check,
        `the grant was refused${status.lastError === undefined ? "" : `: ${status.lastError}`}`,
        `run \`crm-sync connect ${connection.name}\``
      )
    }
    return pass(
      check,
      `tokens stored${status.userId === undefined ? "" : ` for user ${status.userId}`}, refreshed when needed`
    )
  }).pipe(
    Effect.catch((error) =>
      Effect.succeed(fail(`oauth grant (${connection.name})`, oneLine(error), "see the PostgreSQL checks"))
    )
  )

const subscriptionCheck = (connection: Connection) =>
  Effect.gen(function* () {
    const check = `webhook subscription (${connection.name})`
    const rows = yield* activeSubscriptions
    const row = rows.find((candidate) => candidate.connection === connection.name)
    if (row === undefined) {
      return fail(
        check,
        "crm-sync has made none: no events are sent for this connection",
        `run \`crm-sync webhooks subscribe ${connection.name}\``
      )
    }
    if (row.state === "unreachable") {
      return fail(check, "the CRM refused the last check of it", `run \`crm-sync connect ${connection.name}\``)
    }
    return pass(check, `${row.state} at the last check (the daemon checks it every schedules.subscription_check)`)
  }).pipe(
    Effect.catch((error) =>
      Effect.succeed(fail(`webhook subscription (${connection.name})`, oneLine(error), "see the PostgreSQL checks"))
    )
  )

/** The listings `--deep` reads a page of, with the model each record decodes to. */
const listings = (client: CrmClientShape) => {
  const query = { page: 1, per_page: 100 }
  const options = { priority: "interactive" as const }
  return [
    { resource: "books", fields: Models.Book.fields, read: client.listBooks(query, options) },
    { resource: "businesses", fields: Models.Business.fields, read: client.listBusinesses(query, options) },
    {
      resource: "project_templates",
      fields: Models.ProjectTemplate.fields,
      read: client.listProjectTemplates(query, options)
    },
    {
      resource: "annuity_contracts",
      fields: Models.AnnuityContract.fields,
      read: client.listAnnuityContracts(query, options)
    },
    {
      resource: "financial_accounts",
      fields: Models.FinancialAccount.fields,
      read: client.listFinancialAccounts(query, options)
    }
  ] as ReadonlyArray<{
    readonly resource: string
    readonly fields: object
    readonly read: Effect.Effect<ListPage<unknown>, CrmError>
  }>
}

/** One page of a listing: fields the model does not know (kept in `raw`) and records that do not decode. */
export const driftOf = (page: ListPage<unknown>, known: ReadonlySet<string>) => {
  const unknown = new Set<string>()
  const undecodable: Array<string> = []
  for (const item of decodeItems(page)) {
    if (item.raw !== null && typeof item.raw === "object") {
      for (const key of Object.keys(item.raw)) if (!known.has(key)) unknown.add(key)
    }
    if (Result.isFailure(item.record)) undecodable.push(item.record.failure)
  }
  return { records: page.data.length, unknown: [...unknown].toSorted(), undecodable }
}

const deepChecks = (connection: Connection, client: CrmClientShape) =>
  Effect.forEach(listings(client), (listing) =>
    listing.read.pipe(
      Effect.map((page) => {
        const check = `schema of ${listing.resource} (${connection.name})`
        const drift = driftOf(page, new Set(Object.keys(listing.fields)))
        const unknown =
          drift.unknown.length === 0
            ? "no unknown field"
            : `fields the models do not know (kept in raw): ${drift.unknown.join(", ")}`
        if (drift.undecodable.length === 0)
          return pass(check, `${drift.records} record(s) read, all decode; ${unknown}`)
        return fail(
          check,
          `${drift.undecodable.length} of ${drift.records} record(s) do not decode (first: ${drift.undecodable[0]}); ${unknown}`,
          "the CRM's records changed shape: such records go to crm_sync.undecodable_records; report it with this line"
        )
      }),
      Effect.catch((error) =>
        Effect.succeed(fail(`schema of ${listing.resource} (${connection.name})`, error.message, "see the token check"))
      )
    )
  )

/** Every check of one connection, in order; the budget (and so the database) must be up. */
export const connectionChecks = (config: AppConfigShape, connection: Connection, deep: boolean) =>
  Effect.gen(function* () {
    const client = yield* CrmClient.make(connection.name)
    const checks: Array<Check> = []
    const sentAt = yield* Clock.currentTimeMillis
    // One attempt gets its whole request_timeout; retries beyond it (a firewall that drops
    // packets would take five) and a budget with no permit to give are cut short.
    const bound = Duration.sum(connection.request_timeout, Duration.seconds(5))
    type Outcome =
      | { readonly _tag: "answered"; readonly answer: Probe }
      | { readonly _tag: "failed"; readonly error: CrmError }
      | { readonly _tag: "silent" }
    const outcome: Outcome = yield* client.probe().pipe(
      Effect.map((answer): Outcome => ({ _tag: "answered", answer })),
      Effect.catch((error) => Effect.succeed<Outcome>({ _tag: "failed", error })),
      Effect.timeoutOrElse({ duration: bound, orElse: () => Effect.succeed<Outcome>({ _tag: "silent" }) })
    )
    const at = yield* Clock.currentTimeMillis
    const name = connection.name
    const noClock = skip(`clock (${name})`, "no answer from the CRM to compare with")
    if (outcome._tag === "silent") {
      checks.push(
        fail(
          `crm (${name})`,
          `GET /v1/me: no answer within ${formatDuration(Duration.toMillis(bound))}`,
          `check base_url (${connection.base_url.origin}) and the firewall; or the rate budget had no permit to give (\`crm-sync status\`)`
        ),
        noClock
      )
    } else if (outcome._tag === "failed") {
      checks.push(
        fail(`crm (${name})`, `GET /v1/me: ${outcome.error.reason.description}`, meFix(connection, outcome.error))
      )
      if (connection.credential === "oauth") checks.push(yield* grantCheck(connection))
      checks.push(noClock)
    } else {
      const { answer } = outcome
      checks.push(
        pass(`crm (${name})`, `GET /v1/me answers: user ${answer.access.userId} at ${connection.base_url.origin}`)
      )
      checks.push(kindCheck(connection, answer))
      checks.push(yield* writeCheck(connection, answer))
      if (connection.credential === "oauth") checks.push(yield* grantCheck(connection))
      checks.push(clockCheck(config, name, answer.date, sentAt, at))
    }
    if (connection.credential === "oauth") checks.push(yield* subscriptionCheck(connection))
    if (deep && outcome._tag === "answered") checks.push(...(yield* deepChecks(connection, client)))
    return checks
  }).pipe(
    Effect.catch((error) => Effect.succeed([fail(`crm (${connection.name})`, oneLine(error), "see the checks above")]))
  )
