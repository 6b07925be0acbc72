/**
 * Health and metrics routes, served on the admin listener (AdminRoutes.ts); the webhook port
 * serves only `/healthz` of them:
 *
 * - `GET /healthz`: liveness. 200 as long as the process can answer HTTP at all; it deliberately
 *   does not look at the database, so an orchestrator does not restart a healthy process because
 *   PostgreSQL is briefly away (the inbox answers 503 meanwhile and senders retry).
 * - `GET /readyz`: readiness. 200 when the database answers a trivial query within two seconds,
 *   else 503; a load balancer then stops sending deliveries to a replica that cannot store them.
 * - `GET /metrics`: every metric in Effect's registry as Prometheus text (see Metrics.ts).
 *
 * `HealthRoutes` only registers routes on the `HttpRouter`; `main.ts` serves them on `admin_port`.
 */
import { Duration, Effect, Layer } from "effect"
import { HttpRouter, HttpServerResponse } from "effect/http"
import { PrometheusMetrics } from "effect/observability"
import { SqlClient } from "effect/sql/SqlClient"

const READINESS_TIMEOUT = Duration.seconds(2)

const ok = HttpServerResponse.text("ok\n")

const readiness = HttpRouter.use(
  Effect.fnUntraced(function* (router) {
    const sql = yield* SqlClient
    const check = sql`SELECT 1`.pipe(
      Effect.timeout(READINESS_TIMEOUT),
      Effect.match({
        onSuccess: () => ok,
        onFailure: () => HttpServerResponse.text("database unavailable\n", { status: 503 })
      })
    )
    yield* router.add("GET", "/readyz", check)
  })
)

/** `/healthz` alone: what the webhook port serves besides the deliveries, for load balancers. */
export const LivenessRoute = HttpRouter.add("GET", "/healthz", ok)

/** `/healthz`, `/readyz` and `/metrics`. Needs the `HttpRouter` and a `SqlClient`. */
export const HealthRoutes = Layer.mergeAll(LivenessRoute, readiness, PrometheusMetrics.layerHttp({ path: "/metrics" }))
