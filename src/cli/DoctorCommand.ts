/**
 * `crm-sync doctor [--connection NAME] [--json] [--deep]`: the checks a first run needs, in
 * order, one line each (✓, ✗ with what to do, – skipped with why): the config and its secrets;
 * PostgreSQL (reachable, version, migrations, the role's rights); each connection (DoctorCrm.ts);
 * the webhook endpoints and ports; the schedules against the budget. Exit 0 when every check
 * passes, 1 when one fails, 2 for bad usage (an unknown connection).
 *
 * Unlike every other command it does not stop at a config that does not load, nor apply
 * migrations: a broken setup is what it reports. No request reaches the CRM without a permit of
 * the rate budget, which lives in the warehouse; when the warehouse is unreachable or behind its
 * migrations, the CRM checks are skipped and say so.
 */
import * as Console from "effect/Console"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Result from "effect/Result"
import { AppConfig, type AppConfigShape } from "../config/AppConfig.ts"
import { RateBudget } from "../budget/RateBudget.ts"
import { Credentials } from "../crm/Credentials.ts"
import { oneLine } from "../observability/Text.ts"
import { DatabaseInfo, DatabaseLive } from "../warehouse/Database.ts"
import { CrmHttpClient } from "./ApiStack.ts"
import { UsageError, noCrmConfigured, withConfig } from "./Base.ts"
import {
  type Check,
  endpointChecks,
  fail,
  migrationsCheck,
  pass,
  planChecks,
  portCheck,
  postgresVersion,
  renderCheck,
  roleRights,
  skip
} from "./DoctorChecks.ts"
import { connectionChecks } from "./DoctorCrm.ts"

export interface DoctorInput {
  readonly connection: string | undefined
  readonly json: boolean
  readonly deep: boolean
}

/** Collects the checks; in text mode each line is printed as soon as its check is done. */
const reporter = (json: boolean) => {
  const checks: Array<Check> = []
  const report = (...found: ReadonlyArray<Check>) =>
    Effect.forEach(found, (check) => {
      checks.push(check)
      return json ? Effect.void : Console.log(renderCheck(check))
    })
  return { checks, report }
}

const finish = (json: boolean, checks: ReadonlyArray<Check>) =>
  Effect.gen(function* () {
    const failed = checks.filter((check) => check.status === "fail").length
    if (json) yield* Console.log(JSON.stringify({ ok: failed === 0, checks }))
    else yield* Console.log(failed === 0 ? "\nall checks passed" : `\n${failed} check(s) failed`)
    if (failed > 0) process.exitCode = 1
  })

const configLine = (config: AppConfigShape) => {
  const connections = config.connections.length
  const endpoints = config.webhooks.endpoints.length
  return pass(
    "config",
    `${config.origin} parses, every secret resolves (${connections} connection(s), ${endpoints} webhook endpoint(s))`
  )
}

const unreachable = (error: unknown) =>
  fail(
    "postgresql",
    oneLine(error),
    "check CRM_SYNC_DATABASE_URL (host, port, database, role, password) and that the server accepts this machine"
  )

/** The checks that need the warehouse; returns whether the rate budget can work on it. */
const databaseChecks = (config: AppConfigShape, report: (...checks: ReadonlyArray<Check>) => Effect.Effect<unknown>) =>
  Effect.gen(function* () {
    const info = yield* DatabaseInfo
    yield* report(pass("postgresql", `reachable (${info.kind}: ${info.location})`))
    yield* report(yield* postgresVersion)
    const migrations = yield* migrationsCheck(config)
    yield* report(migrations.check)
    yield* report(yield* roleRights(config, migrations.pending ?? []))
    return migrations.pending !== undefined && migrations.pending.length === 0
  })

const crmSkipped = (why: string) =>
  skip(
    "crm",
    `not asked: every request to the CRM takes a permit of the rate budget, which lives in the warehouse (${why}); ` +
      "fix the PostgreSQL checks first"
  )

const run = (input: DoctorInput, config: AppConfigShape) =>
  Effect.gen(function* () {
    const { checks, report } = reporter(input.json)
    yield* report(configLine(config))
    const connections = config.connections.filter(
      (connection) => input.connection === undefined || connection.name === input.connection
    )

    const database = yield* Layer.build(DatabaseLive).pipe(Effect.result)
    let budgetUsable = false
    if (Result.isFailure(database)) yield* report(unreachable(database.failure))
    else budgetUsable = yield* databaseChecks(config, report).pipe(Effect.provideContext(database.success))

    if (connections.length === 0) {
      yield* report(
        fail("crm", "no CRM connection is configured", noCrmConfigured.message.replace(/^no CRM is configured: /, ""))
      )
    } else if (Result.isFailure(database)) {
      yield* report(crmSkipped("unreachable"))
    } else if (!budgetUsable) {
      yield* report(crmSkipped("its migrations are not applied"))
    } else {
      const crmStack = yield* Layer.build(
        Layer.mergeAll(RateBudget.layer, Credentials.layer).pipe(Layer.provideMerge(CrmHttpClient))
      ).pipe(Effect.provideContext(database.success), Effect.result)
      if (Result.isFailure(crmStack))
        yield* report(
          fail("crm", `the rate budget cannot start: ${oneLine(crmStack.failure)}`, "see the PostgreSQL checks")
        )
      else {
        const context = Context.merge(database.success, crmStack.success)
        for (const connection of connections) {
          yield* report(
            ...(yield* connectionChecks(config, connection, input.deep).pipe(Effect.provideContext(context)))
          )
        }
      }
    }

    yield* report(...endpointChecks(config, input.connection))
    yield* report(
      yield* portCheck("webhook port", "CRM_SYNC_WEBHOOK_PORT (webhook_port)", config.webhook_port, undefined)
    )
    yield* report(
      yield* portCheck("admin port", "CRM_SYNC_ADMIN_PORT (admin_port)", config.admin_port, config.admin_host)
    )

    if (connections.length > 0) {
      if (budgetUsable && Result.isSuccess(database)) {
        yield* report(...(yield* planChecks(config, input.connection).pipe(Effect.provideContext(database.success))))
      } else {
        yield* report(skip("schedules", "the plan reads the warehouse: fix the PostgreSQL checks first"))
      }
    }
    yield* finish(input.json, checks)
  }).pipe(Effect.scoped)

export const doctor = (input: DoctorInput) =>
  Effect.gen(function* () {
    const loaded = yield* Effect.result(AppConfig.load)
    if (Result.isFailure(loaded)) {
      const { checks, report } = reporter(input.json)
      yield* report(
        fail(
          "config",
          `${loaded.failure.key}: ${loaded.failure.message}`,
          "fix that value (config/README.md explains every key); nothing else is checked until the config loads"
        )
      )
      return yield* finish(input.json, checks)
    }
    const config = loaded.success
    const only = input.connection
    if (only !== undefined && !config.connections.some((connection) => connection.name === only)) {
      const names = config.connections.map((connection) => connection.name)
      return yield* new UsageError({
        message: `doctor --connection: no connection named ${only} in this config (${names.length === 0 ? "none configured" : `configured: ${names.join(", ")}`})`
      })
    }
    return yield* run(input, config).pipe(withConfig(config))
  })
