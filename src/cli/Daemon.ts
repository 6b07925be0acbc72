/**
 * `crm-sync run`: the daemon. Webhook intake on `webhook_port`; status page, status, metrics and
 * probes on `admin_port`; the event processor; the read-sync jobs; the reconciliation schedule; the
 * outbound writer. At start it reports each connection's access (auth type, write access) from
 * `GET /v1/me`. `demo` runs the same daemon against the sandbox.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as HttpRouter from "effect/http/HttpRouter"
import { createServer } from "node:http"
import { setFlagsFromString } from "node:v8"
import { AppConfig, type AppConfigShape } from "../config/AppConfig.ts"
import * as Connect from "../crm/Connect.ts"
import { CrmClient } from "../crm/CrmClient.ts"
import { AdminRoutes } from "../admin/AdminRoutes.ts"
import { StatusSnapshot } from "../admin/StatusReport.ts"
import { LivenessRoute } from "../admin/Health.ts"
import { RuntimeMetricsLive } from "../observability/RuntimeMetrics.ts"
import { StateMetricsLive } from "../admin/StateMetrics.ts"
import { OutboundWriterLive } from "../outbound/OutboundWriter.ts"
import { ReconcileSchedulerLive } from "../sync/ReconcileSchedule.ts"
import { SyncJobsLive } from "./DaemonJobs.ts"
import { EventProcessor, EventProcessorLive } from "../webhooks/EventProcessor.ts"
import { InboxWriter } from "../webhooks/InboxWriter.ts"
import { TranscriptReader } from "../webhooks/TranscriptReader.ts"
import { WebhookInbox } from "../webhooks/WebhookInbox.ts"
import { WebhookIntake } from "../webhooks/WebhookIntake.ts"
import { ApiStack } from "./ApiStack.ts"
import { noCrmConfigured, withBase } from "./Base.ts"

/** The daemon's parts, on the CRM stack, for the configured connections. */
export const Daemon = Layer.unwrap(
  Effect.gen(function* () {
    const config = yield* AppConfig
    if (config.connections.length === 0) return yield* noCrmConfigured
    // No log line per request: deliveries arrive by the thousand; metrics count them instead.
    // Paths match exactly (case, trailing and doubled slashes), so an ingress rule on the exact
    // path cannot be bypassed by spelling it another way.
    const serveOptions = { disableLogger: true, routerConfig: exactPaths } as const
    const webhookHttp = HttpRouter.serve(Layer.mergeAll(WebhookIntake.routes, LivenessRoute), serveOptions).pipe(
      Layer.provide(WebhookIntake.layer),
      Layer.provide(InboxWriter.layer),
      Layer.provide(NodeHttpServer.layer(() => webhookServer(config), { port: config.webhook_port }))
    )
    // The status snapshot (the one AdminRoutes uses: layers are shared by reference) is built
    // before the admin port opens, so its first report is ready for the first `/status`
    // (StatusSnapshot: at most FIRST_REPORT_WAIT) and no request reaches a port without routes.
    const adminHttp = HttpRouter.serve(AdminRoutes, serveOptions).pipe(
      Layer.provide(NodeHttpServer.layer(createServer, { port: config.admin_port, host: config.admin_host })),
      Layer.provide(StatusSnapshot.layer)
    )
    const processing = EventProcessorLive.pipe(
      Layer.provideMerge(EventProcessor.layer),
      Layer.provide(TranscriptReader.layer)
    )
    const access = Layer.effectDiscard(
      Effect.forEach(config.connections, (connection) =>
        Connect.reportAccess().pipe(
          Effect.provide(CrmClient.layerFor(connection.name)),
          Effect.catch((error) => Effect.logWarning(`connection ${connection.name}: ${error.message}`))
        )
      )
    )
    // Released as the daemon's layers close (a signal): the line that says the stop began.
    const started = Layer.effectDiscard(
      Effect.acquireRelease(
        Effect.logInfo(
          `crm-sync running: ${config.connections.length} connection(s), webhooks on port ${config.webhook_port}, ` +
            `status page and metrics on port ${config.admin_port}`
        ),
        () => Effect.logInfo("crm-sync stopping: finishing the work in hand")
      )
    )
    return Layer.mergeAll(
      access,
      webhookHttp,
      adminHttp,
      processing,
      SyncJobsLive,
      ReconcileSchedulerLive,
      OutboundWriterLive,
      StateMetricsLive,
      RuntimeMetricsLive,
      started
    ).pipe(Layer.provide(WebhookInbox.layer))
  })
).pipe(Layer.provide(ApiStack))

/**
 * The internet-facing server: a delivery must arrive whole within `webhooks.read_timeout` (headers
 * within the lesser of it and 5 s), and at most `webhooks.max_connections` connections are kept;
 * a slow or idle client cannot hold memory for Node's default 300 s.
 */
const webhookServer = (config: AppConfigShape) => {
  const readMs = Duration.toMillis(config.webhooks.read_timeout)
  const server = createServer({
    requestTimeout: readMs,
    headersTimeout: Math.min(readMs, 5_000),
    // Node checks those deadlines on this period (default 30 s, which would let a slow client
    // stay half a minute whatever the timeouts say).
    connectionsCheckingInterval: 1_000
  })
  server.maxConnections = config.webhooks.max_connections
  server.keepAliveTimeout = 5_000
  return server
}

/** Routing that matches a path only as written: no case folding, no trailing or doubled slashes. */
const exactPaths = { caseSensitive: true, ignoreTrailingSlash: false, ignoreDuplicateSlashes: false } as const

/**
 * V8 lets the old generation grow to up to 4× what survived the last full collection before it
 * collects again. The daemon's garbage is short-lived pages and rows, so at 500 connections it
 * sat at 326 MB of heap over 94 MB alive (469 MB resident); growing by half instead keeps it near
 * 130 MB (279 MB resident) for a few percent more collection (docs/decisions.md: "Memory"). V8
 * reads the flag at each collection, so it applies from here; a `--heap-growing-percent` Node was
 * started with is the operator's and stays.
 */
export const HEAP_GROWING_PERCENT = 50
const boundHeapGrowth = Effect.sync(() => {
  if (!process.execArgv.some((arg) => arg.startsWith("--heap-growing-percent"))) {
    setFlagsFromString(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`)
  }
})

/** `crm-sync run`. */
export const run = () =>
  withBase(
    boundHeapGrowth.pipe(
      Effect.andThen(Layer.launch(Daemon)),
      // A signal ends the daemon as an interruption, after every part has shut down.
      Effect.onInterrupt(() => Effect.logInfo("crm-sync stopped"))
    )
  )
