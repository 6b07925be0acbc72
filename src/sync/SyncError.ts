/**
 * SyncError: how a read-sync job (poll, crawl, reference refresh, backfill) fails, as one tagged
 * error with a tagged `reason` saying which side failed — the CRM (after the client's own retries),
 * the warehouse, or the sync bookkeeping — and whether the next scheduled run may succeed. It names
 * the job, the connection and the resource, never a record's content or a token.
 */
import * as Schema from "effect/Schema"
import type { SqlError } from "effect/sql/SqlError"
import type { CrmError } from "../crm/CrmError.ts"
import type { WarehouseError } from "../warehouse/WarehouseError.ts"
import type { CrawlRunsError } from "./CrawlRuns.ts"
import type { LeaseError } from "./JobLease.ts"

/** The CRM refused or failed the request (the client already retried what it could). */
export class Crm extends Schema.TaggedError<Crm>()("Crm", {
  message: Schema.String,
  retryable: Schema.Boolean
}) {}

/** PostgreSQL refused or failed a write (warehouse rows, cursors, crawl bookkeeping, leases). */
export class Database extends Schema.TaggedError<Database>()("Database", {
  message: Schema.String
}) {
  get retryable(): boolean {
    return true
  }
}

/** The request itself is wrong: an unknown resource or connection name. */
export class Usage extends Schema.TaggedError<Usage>()("Usage", {
  message: Schema.String
}) {
  get retryable(): boolean {
    return false
  }
}

export const SyncErrorReason = Schema.Union([Crm, Database, Usage])
export type SyncErrorReason = typeof SyncErrorReason.Type

export class SyncError extends Schema.TaggedError<SyncError>()("SyncError", {
  /** e.g. `crawl`, `poll`, `reference`, `backfill`. */
  job: Schema.String,
  connection: Schema.optionalKey(Schema.String),
  resource: Schema.optionalKey(Schema.String),
  reason: SyncErrorReason
}) {
  get retryable(): boolean {
    return this.reason.retryable
  }
  override get message(): string {
    const where = [this.connection, this.resource].filter((part) => part !== undefined).join(" ")
    return `${this.job}${where === "" ? "" : ` ${where}`}: ${this.reason.message}`
  }
}

/** What a job step can fail with, before it is told as a SyncError. */
export type JobFailure =
  SyncError | CrmError | WarehouseError | CrawlRunsError | LeaseError | SqlError | Schema.SchemaError

/** Tells a job step's failure as a SyncError of the right reason. */
export const toSyncError =
  (job: string, context: { readonly connection?: string; readonly resource?: string }) =>
  (error: JobFailure): SyncError => {
    if (error._tag === "SyncError") return error
    const where = {
      ...(context.connection === undefined ? {} : { connection: context.connection }),
      ...(context.resource === undefined ? {} : { resource: context.resource })
    }
    const reason =
      error._tag === "CrmError"
        ? new Crm({ message: error.message, retryable: error.retryable })
        : new Database({ message: error.message })
    return new SyncError({ job, ...where, reason })
  }
