/**
 * A backfill as its own process, configured only by the environment (DATABASE_URL, CRM_BASE_URL,
 * CRM_TOKEN, CRM_TOKEN_KIND), wired like `crm-sync backfill`: the kill -9 test starts it and
 * kills it part way. Not a test file; `node test/sync/backfill-process.ts` runs it.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import { FetchHttpClient } from "effect/http"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { RateBudget } from "../../src/budget/RateBudget.ts"
import { Credentials } from "../../src/crm/Credentials.ts"
import { backfill } from "../../src/sync/Backfill.ts"
import { MigratedDatabase } from "../../src/warehouse/Database.ts"
import { Warehouse } from "../../src/warehouse/Warehouse.ts"

const Live = Layer.mergeAll(Warehouse.layer, RateBudget.layer, Credentials.layer).pipe(
  Layer.provideMerge(FetchHttpClient.layer),
  Layer.provideMerge(MigratedDatabase),
  Layer.provideMerge(AppConfig.layer)
)

NodeRuntime.runMain(backfill({ progress: "lines" }).pipe(Effect.provide(Live)))
