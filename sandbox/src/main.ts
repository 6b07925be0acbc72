/** `npm start -w sandbox -- [flags]`: the `sandbox` command (cli.ts) run alone, outside crm-sync's command line. */
import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Effect } from "effect"
import { Command } from "effect/cli"
import { makeSandboxCommand } from "./cli.ts"

Command.run(makeSandboxCommand(), { version: "0.1.0" }).pipe(Effect.provide(NodeServices.layer), NodeRuntime.runMain)
