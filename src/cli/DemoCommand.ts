/**
 * `crm-sync demo` (`npm start`): the daemon against the bundled sandbox, on embedded PostgreSQL,
 * with nothing configured. The sandbox is a development package: a production install leaves it
 * out, and the command line says so instead of loading this module.
 */
import { Sandbox } from "@crm-sync/sandbox"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { AppConfig } from "../config/AppConfig.ts"
import { Credentials } from "../crm/Credentials.ts"
import * as Outbox from "../outbound/Outbox.ts"
import * as Subscriptions from "../webhooks/Subscriptions.ts"
import { ApiStack } from "./ApiStack.ts"
import { withBase } from "./Base.ts"
import { Daemon } from "./Daemon.ts"
import { demoActivity, prepareDemo } from "./Demo.ts"

export const demo = (input: { readonly records: number }) =>
  Effect.gen(function* () {
    const base = yield* AppConfig
    const sandbox = yield* Sandbox
    const { config, tokens, configFile } = yield* prepareDemo(base)
    yield* Effect.logInfo(`demo: CRM sandbox at ${sandbox.baseUrl}; the daemon syncs it into the warehouse`)
    const program = Effect.gen(function* () {
      yield* (yield* Credentials).store(config.connections[0]!, tokens)
      yield* Subscriptions.subscribe(config.connections[0]!.name)
      const book = (yield* sandbox.admin.state).books[0]!.id
      // One write of the firm's own, for the outbound writer to push.
      yield* Outbox.enqueue("prospect.create", { book_id: book, first_name: "Ada", last_name: "Outbox" })
      yield* Effect.forkScoped(demoActivity)
      yield* Effect.logInfo(
        `demo: try \`CRM_SYNC_CONFIG=${configFile} crm-sync doctor\` in another shell (its setup checked), ` +
          `\`crm-sync status\`, or the status page at http://127.0.0.1:${config.admin_port}/`
      )
      return yield* Layer.launch(Daemon)
    })
    return yield* Effect.scoped(program).pipe(
      Effect.provide(ApiStack),
      Effect.provide(Layer.succeed(AppConfig, config))
    )
  }).pipe(Effect.provide(Sandbox.layer({ port: 0, records: input.records })), withBase)
