/**
 * The admin listener's routes (`admin_port`, default 9090): the status page at `/`, `/status` as
 * JSON, `/metrics`, `/readyz` and `/healthz`. Nothing here is served on the webhook port, which
 * faces the internet so that the CRM can deliver: there only `/webhooks/*` and `/healthz` answer.
 *
 * With `admin_token` set, every admin request needs `Authorization: Bearer <token>`, except the
 * two probes, which reveal nothing and which orchestrators call without credentials. The token is
 * compared in constant time.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import { SqlClient } from "effect/sql/SqlClient"
import { timingSafeEqual } from "node:crypto"
import { AppConfig } from "../config/AppConfig.ts"
import { HealthRoutes } from "./Health.ts"
import { renderStatusPage, statusDetails } from "./StatusPage.ts"
import { StatusRoute, StatusSnapshot } from "./StatusReport.ts"

/** Paths answered without the token: liveness and readiness probes. */
const OPEN_PATHS = new Set(["/healthz", "/readyz"])

const unauthorized = HttpServerResponse.text("unauthorized\n", {
  status: 401,
  headers: { "www-authenticate": 'Bearer realm="crm-sync admin"' }
})

const sameToken = (given: string, expected: string) => {
  const a = Buffer.from(given)
  const b = Buffer.from(expected)
  return a.length === b.length && timingSafeEqual(a, b)
}

/** Requires the bearer token on every admin route but the probes. */
const requireToken = (token: Redacted.Redacted<string>) =>
  HttpRouter.middleware(
    (httpEffect) =>
      Effect.gen(function* () {
        const request = yield* HttpServerRequest.HttpServerRequest
        const path = request.url.split("?")[0] ?? ""
        if (OPEN_PATHS.has(path)) return yield* httpEffect
        const header = request.headers.authorization ?? ""
        const given = header.startsWith("Bearer ") ? header.slice("Bearer ".length) : ""
        return sameToken(given, Redacted.value(token)) ? yield* httpEffect : unauthorized
      }),
    { global: true }
  )

/** The job intervals the page compares each job's last success with, in seconds. */
const intervals = (config: AppConfig["Service"]) => ({
  "poll:businesses": Duration.toSeconds(config.schedules.businesses),
  crawl: Duration.toSeconds(config.schedules.crawl),
  "crawl:businesses": Duration.toSeconds(config.schedules.business_crawl),
  reference: Duration.toSeconds(config.schedules.reference)
})

const StatusPageRoute = HttpRouter.use(
  Effect.fnUntraced(function* (router) {
    const config = yield* AppConfig
    const snapshot = yield* StatusSnapshot
    const sql = yield* SqlClient
    yield* router.add(
      "GET",
      "/",
      Effect.gen(function* () {
        const report = yield* snapshot.current
        const details = yield* statusDetails(intervals(config))
        return HttpServerResponse.html(renderStatusPage(report, details))
      }).pipe(
        Effect.provideService(SqlClient, sql),
        Effect.catch(() => Effect.succeed(HttpServerResponse.text("status unavailable\n", { status: 503 })))
      )
    )
  })
)

/** Every admin route, and the token check when `admin_token` is set. */
export const AdminRoutes = Layer.unwrap(
  Effect.map(AppConfig, (config) => {
    const routes = Layer.mergeAll(HealthRoutes, StatusRoute, StatusPageRoute).pipe(Layer.provide(StatusSnapshot.layer))
    return config.admin_token === undefined ? routes : Layer.mergeAll(routes, requireToken(config.admin_token))
  })
)
