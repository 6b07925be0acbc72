/**
 * OpenTelemetry export: with `OTEL_EXPORTER_OTLP_ENDPOINT` set (the standard variable, e.g.
 * `http://otel-collector:4318`), every command sends its traces, metrics and logs there over
 * OTLP/HTTP as JSON (`/v1/traces`, `/v1/metrics`, `/v1/logs`), as service `OTEL_SERVICE_NAME`
 * (default `crm-sync`). The spans are Effect's own: a sync job's run (`JobRuns.record`), a crawl
 * (`PageCrawler.crawl`) and each page's request (`CrmClient.list…`), a webhook delivery
 * (`WebhookIntake.deliver`), an outbox send (`CrmClient.create…`). Unset, nothing is exported and
 * nothing changes; `/metrics` is served either way.
 */
import * as Config from "effect/Config"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as FetchHttpClient from "effect/http/FetchHttpClient"

/** The variables read here (beside the config's). */
export const TelemetryVariables = ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME"] as const

/** OTLP export when an endpoint is configured, else nothing. */
export const TelemetryLive = (version: string) =>
  Layer.unwrap(
    Effect.gen(function* () {
      const endpoint = yield* Config.option(Config.String("OTEL_EXPORTER_OTLP_ENDPOINT"))
      if (Option.isNone(endpoint) || endpoint.value.trim() === "") return Layer.empty
      const serviceName = yield* Config.String("OTEL_SERVICE_NAME").pipe(Config.withDefault("crm-sync"))
      // Loaded only when exporting: most deployments never do, and it is not small.
      const Otlp = yield* Effect.promise(() => import("effect/observability/Otlp"))
      return Otlp.layerJson({
        baseUrl: endpoint.value.trim().replace(/\/+$/, ""),
        resource: { serviceName, serviceVersion: version },
        tracerExportInterval: "2 seconds",
        metricsExportInterval: "10 seconds",
        loggerExportInterval: "2 seconds",
        loggerMergeWithExisting: true
      }).pipe(Layer.provide(FetchHttpClient.layer))
    }).pipe(Effect.orDie)
  )
