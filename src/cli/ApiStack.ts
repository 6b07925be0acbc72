/** What every command that talks to the CRM needs: the budget, credentials, HTTP and the warehouse. */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { Layer } from "effect"
import { RateBudget } from "../budget/RateBudget.ts"
import { Credentials } from "../crm/Credentials.ts"
import { MigratedDatabase } from "../warehouse/Database.ts"
import { Warehouse } from "../warehouse/Warehouse.ts"

export const ApiStack = Layer.mergeAll(RateBudget.layer, Credentials.layer, Warehouse.layer).pipe(
  Layer.provideMerge(NodeHttpClient.layerUndici),
  Layer.provideMerge(MigratedDatabase)
)
