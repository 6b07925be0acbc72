import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Exit, Redacted } from "effect"
import { mkdtempSync, writeFileSync } from "node:fs"
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

describe("AppConfig", () => {
  it.effect("the single-connection case needs no file", () =>
    Effect.gen(function* () {
      const config = yield* load({
        CRM_BASE_URL: "https://crm.example.test",
        CRM_TOKEN: "pat_abc",
        CRM_WEBHOOK_SECRET: "whsec_c2VjcmV0",
        WEBHOOK_PORT: "9090"
      })
      assert.strictEqual(config.connections.length, 1)
      const connection = config.connections[0]!
      assert.strictEqual(connection.name, "default")
      assert.strictEqual(connection.credential, "personal")
      assert.strictEqual(connection.base_url.href, "https://crm.example.test/")
      assert.strictEqual(Redacted.value(connection.token!), "pat_abc")
      assert.strictEqual(config.webhook_port, 9090)
      assert.strictEqual(config.webhooks.endpoints[0]!.name, "default")
      assert.strictEqual(config.data_dir, ".crm-sync")
      assert.strictEqual(config.sync.deletion_threshold, 0.1)
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
            endpoints: [{ name: "clients-created", secrets: ["whsec_a", "whsec_b"], event_type: "client.created" }]
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

  it.effect("a bad value names its key in one line", () =>
    Effect.gen(function* () {
      const exit = yield* Effect.exit(
        decodeDocument({ connections: [{ name: "x", base_url: "not a url", credential: "personal", token: "t" }] })
      )
      const error = failure(exit)
      assert.strictEqual(error.key, "connections[0].base_url")
      assert.notInclude(error.line, "\n")

      const port = failure(yield* Effect.exit(load({ WEBHOOK_PORT: "eighty" })))
      assert.strictEqual(port.key, "webhook_port")

      const kind = failure(
        yield* Effect.exit(load({ CRM_BASE_URL: "https://a.test", CRM_TOKEN: "t", CRM_TOKEN_KIND: "magic" }))
      )
      assert.strictEqual(kind.key, "connections[0].credential")

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
      assert.include(lease.line, "at least 1 second")
    })
  )
})
