/**
 * The read sync's metrics, in Effect's metric registry (so `/metrics` exports them with the rest;
 * see src/observability/Metrics.ts): runs of each job by outcome, records written by each crawl
 * or poll by outcome, and deletions held back by the mass-disappearance threshold — the one an
 * operator should be alerted on, since nothing is deleted until someone looks.
 *
 * Labels come from closed sets: job names (poll:businesses, crawl:<resource>, reference,
 * backfill:<resource>), resources, and outcomes.
 */
import * as Effect from "effect/Effect"
import * as Metric from "effect/Metric"
import { increment } from "../observability/Metrics.ts"

export const syncRuns = Metric.counter("crm_sync_sync_runs_total", {
  description: "Read-sync job runs, by job and status (succeeded, failed, interrupted)",
  incremental: true
})

export const syncRecords = Metric.counter("crm_sync_sync_records_total", {
  description:
    "Records handled by polls and crawls, by resource and outcome (inserted, updated, unchanged, rejected, deleted, undeleted)",
  incremental: true
})

export const syncDeletionsRefused = Metric.counter("crm_sync_sync_deletions_refused_total", {
  description: "Deletions by absence held back because more than sync.deletion_threshold would vanish at once",
  incremental: true
})

/** Counts what one batch of records became. */
export const recordOutcomes = (
  resource: string,
  outcomes: Readonly<
    Partial<Record<"inserted" | "updated" | "unchanged" | "rejected" | "deleted" | "undeleted", number>>
  >
) =>
  Effect.forEach(
    Object.entries(outcomes).filter(([, count]) => count !== undefined && count > 0),
    ([outcome, count]) => increment(syncRecords, { resource, outcome }, count!),
    { discard: true }
  )

export const recordRun = (job: string, status: string) => increment(syncRuns, { job, status })

export const recordRefused = (resource: string, count: number) =>
  count > 0 ? increment(syncDeletionsRefused, { resource }, count) : Effect.void
