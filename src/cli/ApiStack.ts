/** What every command that talks to the CRM needs: the budget, credentials, HTTP and the warehouse. */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import * as Layer from "effect/Layer"
import { RateBudget } from "../budget/RateBudget.ts"
import { Credentials } from "../crm/Credentials.ts"
import { MigratedDatabase } from "../warehouse/Database.ts"
import { historyFromConfig } from "../warehouse/History.ts"
import { Warehouse } from "../warehouse/Warehouse.ts"

/**
 * The HTTP client for the CRM: Node's own `http`/`https` with connections kept alive. Measured
 * against undici's client (docs/performance.md, startup): the same backfill rate, and the idle
 * daemon about 15 MB smaller, since undici is a second HTTP stack beside Node's.
 */
export const CrmHttpClient = NodeHttpClient.layerNodeHttpOptions({ keepAlive: true })

export const ApiStack = Layer.mergeAll(
  RateBudget.layer,
  Credentials.layer,
  Warehouse.layer.pipe(Layer.provide(historyFromConfig))
).pipe(Layer.provideMerge(CrmHttpClient), Layer.provideMerge(MigratedDatabase))
