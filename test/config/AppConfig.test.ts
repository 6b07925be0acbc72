import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Exit, Redacted } from "effect"
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { AppConfig, ConfigInvalid, decodeDocument } from "../../src/config/AppConfig.ts"

const load = (env: Record<string, string>) =>
  AppConfig.load.pipe(Effect.provideService(ConfigProvider.ConfigProvider, ConfigProvider.fromEnv({ env })))

const failure = <A>(exit: Exit.Exit<A, ConfigInvalid>) => {
  assert.isTrue(Exit.isFailure(exit))
  if (Exit.isSuccess(exit)) throw new Error("expected a failure")
  const error = exit.cause.reasons.find((reason) => reason._tag === "Fail")
  return (error as unknown as { error: ConfigInvalid }).error
}

const connection = (fields: Record<string, unknown>) => ({
  connections: [{ name: "x", base_url: "https://crm.test", credential: "personal", token: "t", ...fields }]
})

describe("AppConfig", () => {
  it.effect("the single-connection case needs no file", () =>
    Effect.gen(function* () {
      const config = yield* load({
        CRM_BASE_URL: "https://crm.example.test",
        CRM_TOKEN: "pat_abc",
        CRM_WEBHOOK_SECRET: "whsec_c2VjcmV0",
        WEBHOOK_PORT: "9191"
      })
      assert.strictEqual(config.connections.length, 1)
      const connection = config.connections[0]!
      assert.strictEqual(connection.name, "default")
      assert.strictEqual(connection.credential, "personal")
      assert.strictEqual(connection.base_url.href, "https://crm.example.test/")
      assert.strictEqual(Redacted.value(connection.token!), "pat_abc")
      assert.strictEqual(config.webhook_port, 9191)
      assert.strictEqual(config.webhooks.endpoints[0]!.name, "default")
      assert.strictEqual(config.data_dir, ".crm-sync")
      assert.strictEqual(config.sync.deletion_threshold, 0.1)
    })
  )

  it.effect("RECONCILE_SCHEDULE sets schedules.reconcile (off: a scheduler outside the daemon reconciles)", () =>
    Effect.gen(function* () {
      const config = yield* load({ RECONCILE_SCHEDULE: "off" })
      assert.strictEqual(config.schedules.reconcile, "off")
      assert.strictEqual((yield* load({})).schedules.reconcile, "0 3 * * *")
    })
  )

  it.effect("CRM_SYNC_LOG_FORMAT chooses json or text (unset: decided by the terminal); another value is refused", () =>
    Effect.gen(function* () {
      assert.strictEqual((yield* load({ CRM_SYNC_LOG_FORMAT: "json" })).log_format, "json")
      assert.strictEqual((yield* load({ CRM_SYNC_LOG_FORMAT: "text" })).log_format, "text")
      assert.isUndefined((yield* load({})).log_format)
      const bad = failure(yield* Effect.exit(load({ CRM_SYNC_LOG_FORMAT: "logfmt" })))
      assert.strictEqual(bad.key, "CRM_SYNC_LOG_FORMAT")
      assert.strictEqual(bad.line, 'config: CRM_SYNC_LOG_FORMAT: Expected "json" | "text"')
    })
  )

  it.effect("CRM_SYNC_* names every setting of crm-sync; the older names are aliases the new ones override", () =>
    Effect.gen(function* () {
      const current = yield* load({
        CRM_SYNC_DATABASE_URL: "postgres://new.internal/warehouse",
        CRM_SYNC_WEBHOOK_PORT: "7101",
        CRM_SYNC_ADMIN_PORT: "7102",
        CRM_SYNC_LOG_LEVEL: "warn",
        CRM_SYNC_RECONCILE_SCHEDULE: "30 2 * * *"
      })
      assert.strictEqual(Redacted.value(current.database_url!), "postgres://new.internal/warehouse")
      assert.deepStrictEqual(
        [current.webhook_port, current.admin_port, current.log_level, current.schedules.reconcile],
        [7101, 7102, "warn", "30 2 * * *"]
      )

      const old = yield* load({ DATABASE_URL: "postgres://old.internal/w", WEBHOOK_PORT: "7201", LOG_LEVEL: "error" })
      assert.strictEqual(Redacted.value(old.database_url!), "postgres://old.internal/w")
      assert.deepStrictEqual([old.webhook_port, old.log_level], [7201, "error"])

      // A platform that sets DATABASE_URL for something else does not override the firm's choice.
      const both = yield* load({ CRM_SYNC_DATABASE_URL: "postgres://mine/w", DATABASE_URL: "postgres://theirs/w" })
      assert.strictEqual(Redacted.value(both.database_url!), "postgres://mine/w")

      // An error names the variable the user set, new name or alias.
      assert.strictEqual(failure(yield* Effect.exit(load({ CRM_SYNC_ADMIN_PORT: "x" }))).key, "CRM_SYNC_ADMIN_PORT")
      assert.strictEqual(failure(yield* Effect.exit(load({ ADMIN_PORT: "x" }))).key, "ADMIN_PORT")
    })
  )

  it.effect("the reconciliation's cron is checked with the rest of the config", () =>
    Effect.gen(function* () {
      const error = failure(yield* Effect.exit(load({ CRM_SYNC_RECONCILE_SCHEDULE: "every night" })))
      assert.strictEqual(error.key, "CRM_SYNC_RECONCILE_SCHEDULE")
      assert.include(error.message, "not a cron expression")
      const inFile = failure(yield* Effect.exit(decodeDocument({ schedules: { reconcile: "61 3 * * *" } })))
      assert.strictEqual(inFile.key, "schedules.reconcile")
    })
  )

  it.effect("history: every resource that can keep one by default, kept forever; a list and a duration otherwise", () =>
    Effect.gen(function* () {
      const defaults = yield* decodeDocument({})
      assert.deepStrictEqual(defaults.history.resources, [
        "annuity_contracts",
        "businesses",
        "clients",
        "financial_accounts",
        "households"
      ])
      assert.strictEqual(defaults.history.retention, "forever")
      const set = yield* decodeDocument({ history: { resources: ["financial_accounts"], retention: "400 days" } })
      assert.deepStrictEqual(set.history.resources, ["financial_accounts"])
      assert.notStrictEqual(set.history.retention, "forever")
      const unknown = failure(yield* Effect.exit(decodeDocument({ history: { resources: ["tasks"] } })))
      assert.include(unknown.line, "history.resources")
    })
  )

  it.effect("secrets never print", () =>
    Effect.gen(function* () {
      const config = yield* load({ CRM_BASE_URL: "https://crm.example.test", CRM_TOKEN: "pat_supersecret" })
      assert.notInclude(JSON.stringify(config), "pat_supersecret")
      assert.notInclude(String(config.connections[0]!.token), "pat_supersecret")
    })
  )

  it.effect("env overrides the file", () =>
    Effect.gen(function* () {
      const dir = mkdtempSync(join(tmpdir(), "crm-sync-config-"))
      const file = join(dir, "config.json")
      writeFileSync(
        file,
        JSON.stringify({
          webhook_port: 7000,
          connections: [
            { name: "east", base_url: "https://a.test", credential: "personal", token: "t1", egress: "nat-1" },
            { name: "west", base_url: "https://b.test", credential: "personal", token: "t2" }
          ],
          webhooks: {
            endpoints: [
              { name: "clients-created", secrets: ["whsec_YWFhYWFh", "whsec_YmJiYmJi"], event_type: "client.created" }
            ]
          }
        })
      )
      const config = yield* load({ CRM_SYNC_CONFIG: file, WEBHOOK_PORT: "7001" })
      assert.strictEqual(config.webhook_port, 7001)
      assert.deepStrictEqual(
        config.connections.map((c) => c.name),
        ["east", "west"]
      )
      assert.strictEqual(config.connections[0]!.egress, "nat-1")
      assert.strictEqual(config.webhooks.endpoints[0]!.secrets.length, 2)
    })
  )

  it.effect("a file names its secrets as {env: NAME}; an unset one is an error naming its key", () =>
    Effect.gen(function* () {
      const dir = mkdtempSync(join(tmpdir(), "crm-sync-config-"))
      const file = join(dir, "config.json")
      writeFileSync(
        file,
        JSON.stringify({
          connections: [
            { name: "firm", base_url: "https://a.test", credential: "personal", token: { env: "FIRM_TOKEN" } }
          ],
          webhooks: { endpoints: [{ name: "default", secrets: [{ env: "HOOK_SECRET" }] }] }
        })
      )
      const config = yield* load({
        CRM_SYNC_CONFIG: file,
        FIRM_TOKEN: "pat_from_secret",
        HOOK_SECRET: "whsec_c2VjcmV0"
      })
      assert.strictEqual(Redacted.value(config.connections[0]!.token!), "pat_from_secret")
      assert.strictEqual(Redacted.value(config.webhooks.endpoints[0]!.secrets[0]!), "whsec_c2VjcmV0")
      assert.notInclude(JSON.stringify(config), "pat_from_secret")

      const unset = failure(yield* Effect.exit(load({ CRM_SYNC_CONFIG: file, FIRM_TOKEN: "pat_from_secret" })))
      assert.strictEqual(unset.key, "webhooks.endpoints[0].secrets[0]")
      assert.include(unset.message, "environment variable HOOK_SECRET is not set")
    })
  )

  it.effect(
    "secrets from files: NAME_FILE for every variable, {file} in the config; two connections, four endpoints, no secret in the file",
    () =>
      Effect.gen(function* () {
        const folder = mkdtempSync(join(tmpdir(), "crm-sync-secrets-"))
        const secret = (name: string, value: string) => {
          const path = join(folder, name)
          // As a Secret is mounted: the value, often with a trailing newline.
          writeFileSync(path, `${value}\n`)
          return path
        }
        const key = Buffer.alloc(32, 7).toString("base64")
        const file = join(folder, "config.json")
        writeFileSync(
          file,
          JSON.stringify({
            connections: [
              { name: "firm", base_url: "https://a.test", credential: "personal", token: { env: "FIRM_TOKEN" } },
              {
                name: "partner",
                base_url: "https://b.test",
                credential: "personal",
                token: { file: secret("partner-token", "pat_partner") }
              }
            ],
            webhooks: {
              endpoints: [
                { name: "default", secrets: [{ env: "HOOK_DEFAULT" }] },
                {
                  name: "client-created",
                  event_type: "client.created",
                  secrets: [{ file: secret("cc", "whsec_WTJNPVkyTT1ZMk09WTJNPVkyTT1ZMk09") }]
                },
                { name: "client-updated", event_type: "client.updated", secrets: [{ env: "HOOK_CLIENT_UPDATED" }] },
                {
                  name: "prospect-created",
                  event_type: "prospect.created",
                  secrets: [{ file: secret("pc", "whsec_Y0dNPWNHTT1jR009Y0dNPWNHTT1jR009") }]
                }
              ]
            }
          })
        )
        const config = yield* load({
          CRM_SYNC_CONFIG: file,
          FIRM_TOKEN_FILE: secret("firm-token", "pat_firm"),
          HOOK_DEFAULT_FILE: secret("default", "whsec_WkdWbVpHVm1aR1ZtWkdWbVpHVm1aR1Zt"),
          HOOK_CLIENT_UPDATED: "whsec_WTNVPVkzVT1ZM1U9WTNVPVkzVT1ZM1U9",
          DATABASE_URL_FILE: secret("database-url", "postgres://crm:pw@db.internal/warehouse"),
          CRM_SYNC_ENCRYPTION_KEY_FILE: secret("key", key),
          CRM_SYNC_ADMIN_TOKEN_FILE: secret("admin", "admin-token")
        })
        assert.deepStrictEqual(
          config.connections.map((connection) => Redacted.value(connection.token!)),
          ["pat_firm", "pat_partner"]
        )
        assert.deepStrictEqual(
          config.webhooks.endpoints.map((endpoint) => Redacted.value(endpoint.secrets[0]!)),
          [
            "whsec_WkdWbVpHVm1aR1ZtWkdWbVpHVm1aR1Zt",
            "whsec_WTJNPVkyTT1ZMk09WTJNPVkyTT1ZMk09",
            "whsec_WTNVPVkzVT1ZM1U9WTNVPVkzVT1ZM1U9",
            "whsec_Y0dNPWNHTT1jR009Y0dNPWNHTT1jR009"
          ]
        )
        assert.strictEqual(Redacted.value(config.database_url!), "postgres://crm:pw@db.internal/warehouse")
        assert.strictEqual(Redacted.value(config.encryption_key!), key)
        assert.strictEqual(Redacted.value(config.admin_token!), "admin-token")
        assert.notInclude(readFileSync(file, "utf8"), "pat_")

        // A variable set both ways, or a file that cannot be read, is an error naming it.
        const both = failure(
          yield* Effect.exit(
            load({ CRM_TOKEN: "pat_a", CRM_TOKEN_FILE: secret("t", "pat_b"), CRM_BASE_URL: "https://a.test" })
          )
        )
        assert.strictEqual(both.key, "CRM_TOKEN")
        assert.include(both.message, "both CRM_TOKEN and CRM_TOKEN_FILE are set")
        const missing = failure(yield* Effect.exit(load({ DATABASE_URL_FILE: join(folder, "nope") })))
        assert.strictEqual(missing.key, "DATABASE_URL_FILE")
        assert.include(missing.message, "cannot read")
      })
  )

  it.effect("a bad value names its key in one line", () =>
    Effect.gen(function* () {
      const exit = yield* Effect.exit(
        decodeDocument({ connections: [{ name: "x", base_url: "not a url", credential: "personal", token: "t" }] })
      )
      const error = failure(exit)
      assert.strictEqual(error.key, "connections[0].base_url")
      assert.notInclude(error.line, "\n")

      // A value set in the environment is named as the user set it; one from the file by its key.
      const port = failure(yield* Effect.exit(load({ WEBHOOK_PORT: "eighty" })))
      assert.strictEqual(port.key, "WEBHOOK_PORT")

      const kind = failure(
        yield* Effect.exit(load({ CRM_BASE_URL: "https://a.test", CRM_TOKEN: "t", CRM_TOKEN_KIND: "magic" }))
      )
      assert.strictEqual(kind.key, "CRM_TOKEN_KIND")

      const folder = mkdtempSync(join(tmpdir(), "crm-sync-keys-"))
      const portFile = join(folder, "port")
      writeFileSync(portFile, "eighty\n")
      assert.strictEqual(failure(yield* Effect.exit(load({ WEBHOOK_PORT_FILE: portFile }))).key, "WEBHOOK_PORT_FILE")
      const file = join(folder, "config.json")
      writeFileSync(file, JSON.stringify({ webhook_port: "eighty" }))
      assert.strictEqual(failure(yield* Effect.exit(load({ CRM_SYNC_CONFIG: file }))).key, "webhook_port")

      const missing = failure(
        yield* Effect.exit(
          decodeDocument({ connections: [{ name: "x", base_url: "https://a.test", credential: "personal" }] })
        )
      )
      assert.strictEqual(missing.key, "connections[0].token")

      const unknown = failure(yield* Effect.exit(decodeDocument({ webhook_prot: 1 })))
      assert.strictEqual(unknown.key, "webhook_prot")

      const lease = failure(yield* Effect.exit(decodeDocument({ webhooks: { lease_timeout: "10 millis" } })))
      assert.strictEqual(lease.key, "webhooks.lease_timeout")
      assert.include(lease.line, "from 1s to 1d")
    })
  )

  /** Values that used to be accepted and broke things quietly; each is now one line naming its key. */
  const refused: ReadonlyArray<readonly [string, Record<string, unknown>, string, string]> = [
    ["a file: base URL", connection({ base_url: "file:///etc/passwd" }), "connections[0].base_url", "http or https"],
    ["a javascript: base URL", connection({ base_url: "javascript:alert(1)" }), "connections[0].base_url", "http"],
    [
      "credentials in the base URL",
      connection({ base_url: "https://user:secret@crm.test" }),
      "connections[0].base_url",
      "credentials"
    ],
    ["a request timeout of 0", connection({ request_timeout: "0 seconds" }), "connections[0].request_timeout", "from"],
    ["a poll every 0 s", { schedules: { businesses: "0 seconds" } }, "schedules.businesses", "from 1s"],
    ["a crawl every 0 s", { schedules: { crawl: "0 millis" } }, "schedules.crawl", "from 1s"],
    ["a negative tolerance", { webhooks: { tolerance: "-5 minutes" } }, "webhooks.tolerance", ""],
    [
      "a tolerance beyond the inbox's retention",
      { webhooks: { tolerance: "1 day", retention: "2 hours" } },
      "webhooks.tolerance",
      "retention"
    ],
    [
      "a signing secret not in whsec_ form",
      { webhooks: { endpoints: [{ name: "default", secrets: ["not-a-secret"] }] } },
      "webhooks.endpoints[0].secrets[0]",
      "whsec_"
    ],
    ["a safety margin of an hour", { budget: { safety_margin: "1 hour" } }, "budget.safety_margin", "from"],
    ["a 1 GB body limit", { webhooks: { max_body_bytes: 1_000_000_000 } }, "webhooks.max_body_bytes", ""],
    ["a pool of 2 sessions", { database: { pool_size: 2 } }, "database.pool_size", ""]
  ]

  for (const [name, document, key, says] of refused) {
    it.effect(`refuses ${name}`, () =>
      Effect.gen(function* () {
        const error = failure(yield* Effect.exit(decodeDocument(document)))
        assert.strictEqual(error.key, key)
        assert.include(error.line, says)
        assert.notInclude(error.line, "secret@", "a refused URL's password is not echoed")
        assert.strictEqual(error.line.split("\n").length, 1)
      })
    )
  }
})
