/**
 * The CRM emulator's public face: the `Sandbox` service (a running emulator with its admin API),
 * its options, the event types it sends and the shape of its request log. The command line is
 * `@crm-sync/sandbox/cli`; helpers for tests are `@crm-sync/sandbox/testing`.
 */
export { Sandbox, type SandboxCredentials } from "./Sandbox.ts"
export { type SandboxOptions, type ResolvedOptions, resolveOptions } from "./Options.ts"
export { DurationString, parseDuration } from "./Durations.ts"
export { EVENT_TYPES, type EventType } from "./Webhooks.ts"
export type { RequestLogEntry, RequestFilter } from "./RequestLog.ts"
export { buildWorld } from "./Generator.ts"
export type { World } from "./World.ts"
export { userTokenOf } from "./Auth.ts"
