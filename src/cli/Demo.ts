/**
 * The demo (`npm start`, `crm-sync demo`): crm-sync's whole daemon against the bundled sandbox,
 * with nothing configured. `prepareDemo` sets the sandbox up as a partner sets up the real CRM;
 * `demoActivity` plays the CRM's users so that webhook deliveries flow.
 */
import * as DateTime from "effect/DateTime"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Random from "effect/Random"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import { randomBytes } from "node:crypto"
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import type { TokenSet } from "../crm/OAuth.ts"
import type { AppConfigShape } from "../config/AppConfig.ts"
import { decodeDocument } from "../config/AppConfig.ts"
import { EVENT_TYPES, type EventType, Sandbox } from "@crm-sync/sandbox"

const CONNECTION = "sandbox"

const secret = () => `whsec_${randomBytes(24).toString("base64")}`

/** Endpoints for the events without `event_type`: each needs its own URL (spec §6.3). */
const untyped: ReadonlyArray<{ readonly name: string; readonly event: EventType }> = [
  { name: "client-created", event: "client.created" },
  { name: "client-updated", event: "client.updated" },
  { name: "prospect-created", event: "prospect.created" }
]

/** Every other event carries `event_type`: one endpoint takes them all. */
const typed: ReadonlyArray<EventType> = EVENT_TYPES.filter((event) => !untyped.some((entry) => entry.event === event))

/**
 * Sets the sandbox up as a partner would set up the real CRM: an OAuth connection for the
 * sandbox's own user (tokens issued by the sandbox's admin API instead of a browser round trip),
 * partner webhook endpoints pointing at this process's intake — one for every event that carries
 * `event_type`, and one each for `client.created`, `client.updated` and `prospect.created`, which
 * do not (spec §6.3) — with fresh signing secrets. Returns the configuration the daemon runs with.
 */
export const prepareDemo = Effect.fn("Demo.prepare")(function* (base: AppConfigShape) {
  const sandbox = yield* Sandbox
  const { credentials, admin } = sandbox
  const tokens = yield* admin.connect({
    clientId: credentials.oauthClientId,
    userId: credentials.userId,
    companyId: credentials.companyId
  })
  const intake = `http://127.0.0.1:${base.webhook_port}/webhooks`
  const endpoints = [{ name: "default", secrets: [secret()] }]
  yield* admin.registerEndpoint({
    clientId: credentials.oauthClientId,
    url: `${intake}/default`,
    secret: endpoints[0]!.secrets[0]!,
    eventTypes: typed
  })
  for (const { name, event } of untyped) {
    const endpoint = { name, secrets: [secret()], event_type: event }
    endpoints.push(endpoint)
    yield* admin.registerEndpoint({
      clientId: credentials.oauthClientId,
      url: `${intake}/${name}`,
      secret: endpoint.secrets[0]!,
      eventTypes: [event]
    })
  }
  const document = {
    connections: [
      {
        name: CONNECTION,
        base_url: sandbox.baseUrl,
        credential: "oauth",
        oauth: {
          client_id: credentials.oauthClientId,
          client_secret: credentials.oauthClientSecret,
          auth_url: `${sandbox.baseUrl}/oauth/authorize`,
          token_url: `${sandbox.baseUrl}/oauth/token`
        }
      }
    ],
    webhooks: { endpoints: endpoints.map((endpoint) => ({ ...endpoint, connection: CONNECTION })) },
    // Short enough that a newcomer sees every job run within a minute or two.
    schedules: { businesses: "1 minute", crawl: "10 minutes", reference: "1 hour" }
  }
  const overlay = yield* decodeDocument(document)
  const encryptionKey = base.encryption_key ?? (yield* demoEncryptionKey(base.data_dir))
  const configFile = yield* writeDemoConfig(base, document, encryptionKey)
  const config = {
    ...base,
    encryption_key: encryptionKey,
    connections: overlay.connections,
    webhooks: { ...base.webhooks, endpoints: overlay.webhooks.endpoints },
    schedules: overlay.schedules,
    origin: `demo: the bundled sandbox at ${sandbox.baseUrl}`
  } satisfies AppConfigShape
  // As `crm-sync connect` would store them, once the daemon's Credentials are up.
  const tokenSet: TokenSet = {
    accessToken: Redacted.make(tokens.access_token),
    refreshToken: Redacted.make(tokens.refresh_token),
    expiresIn: Duration.seconds(tokens.expires_in),
    scope: tokens.scope
  }
  return { config, tokens: tokenSet, configFile }
})

/**
 * The demo's settings as a config file beside its embedded database (`demo-config.json`, readable
 * by its owner only, like the demo's key): `CRM_SYNC_CONFIG` naming it lets the other commands
 * (`doctor`, `plan`, `backfill`) see the demo's connection and endpoints from another shell.
 */
const writeDemoConfig = (base: AppConfigShape, document: object, key: Redacted.Redacted<string>) =>
  Effect.sync(() => {
    const file = join(base.data_dir, "demo-config.json")
    const content = {
      ...(base.database_url === undefined ? {} : { database_url: Redacted.value(base.database_url) }),
      data_dir: base.data_dir,
      encryption_key: Redacted.value(key),
      webhook_port: base.webhook_port,
      admin_port: base.admin_port,
      ...document
    }
    mkdirSync(base.data_dir, { recursive: true })
    writeFileSync(file, `${JSON.stringify(content, null, 2)}\n`, { mode: 0o600 })
    return file
  })

/**
 * OAuth tokens are stored encrypted; without CRM_SYNC_ENCRYPTION_KEY the demo makes a key of its
 * own, kept beside the embedded database so a restarted demo can read what it stored.
 */
const demoEncryptionKey = (dataDir: string) =>
  Effect.sync(() => {
    const file = join(dataDir, "demo-encryption-key")
    mkdirSync(dataDir, { recursive: true })
    if (!existsSync(file)) writeFileSync(file, randomBytes(32).toString("hex"), { mode: 0o600 })
    return Redacted.make(readFileSync(file, "utf8").trim())
  })

const pick = <A>(items: ReadonlyArray<A>) =>
  Effect.map(Random.nextIntBetween(0, Math.max(items.length - 1, 0), { halfOpen: false }), (index) => items[index])

/** One change a CRM user might make; failures (a record deleted meanwhile) are only logged. */
const oneChange = Effect.gen(function* () {
  const { admin, credentials } = yield* Sandbox
  const state = yield* admin.state
  const books = state.books.filter((book) => book.user_ids.includes(credentials.userId))
  const book = yield* pick(books)
  if (book === undefined) return
  const households = (yield* admin.records("households", { bookId: book.id, limit: 20 })) as ReadonlyArray<{
    readonly id: string
  }>
  const household = yield* pick(households)
  const tasks = (yield* admin.records("tasks", { bookId: book.id, limit: 20 })) as ReadonlyArray<{
    readonly id: string
    readonly status: string
  }>
  const roll = yield* Random.nextIntBetween(0, 6, { halfOpen: true })
  const actions = admin.actions
  const stamp = DateTime.formatIso(yield* DateTime.now).slice(11, 19)
  switch (roll) {
    case 0:
      yield* actions.createTask({ book_id: book.id, title: `Call back about the rollover (${stamp})` })
      break
    case 1: {
      const task = yield* pick(tasks)
      if (task !== undefined) {
        yield* task.status === "done" ? actions.reopenTask(task.id) : actions.completeTask(task.id)
      }
      break
    }
    case 2: {
      const meeting = yield* actions.createMeeting({ book_id: book.id, title: `Annual review (${stamp})` })
      yield* actions.setTranscript(meeting.id, {
        segments: [
          {
            text: "Let's go over the allocation.",
            participant: { name: "Advisor" },
            start_timestamp: "00:00:01",
            end_timestamp: "00:00:04"
          }
        ]
      })
      break
    }
    case 3:
      if (household !== undefined) {
        yield* actions.createNote({
          parent_type: "household",
          parent_id: household.id,
          content: `Spoke today (${stamp})`
        })
      }
      break
    case 4:
      yield* actions.createClient({ book_id: book.id, name: `Demo Client ${stamp}` })
      break
    default:
      yield* actions.createProspect({ book_id: book.id, first_name: "Pat", last_name: `Prospect ${stamp}` })
  }
})

/**
 * The CRM's users at work, one change every few seconds for as long as the demo runs (a task
 * created, completed or reopened, a meeting and its transcript, a note, a client), and now and then
 * a prospect for the outbound writer to create through the outbox.
 */
export const demoActivity = oneChange.pipe(
  Effect.catchCause((cause) => Effect.logDebug("demo activity skipped a change", cause)),
  Effect.repeat(Schedule.spaced(Duration.seconds(4))),
  Effect.asVoid
)
