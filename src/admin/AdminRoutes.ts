/**
 * The admin listener's routes (`admin_port`, default 9090): the status page at `/`, `/status` as
 * JSON, `/metrics`, `/readyz` and `/healthz`. Nothing here is served on the webhook port, which
 * faces the internet so that the CRM can deliver: there only `/webhooks/*` and `/healthz` answer.
 *
 * With `admin_token` set, every admin request needs the token, except the two probes, which reveal
 * nothing and which orchestrators call without credentials, and `/metrics` when `open_metrics` is
 * set (Prometheus's pod-annotation discovery cannot send a token). Scripts and Prometheus send it
 * as `Authorization: Bearer <token>`; a browser as the password of HTTP Basic (any user name): a
 * 401 carries a Basic challenge, so the browser asks for it. The token is compared in constant time.
 */
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
import { StatusCharts } from "./StatusCharts.ts"
import { renderStatusPage, statusDetails } from "./StatusPage.ts"
import { queryOf, StatusRoute, StatusSnapshot, unknownConnection } from "./StatusReport.ts"

/** Paths answered without the token: liveness and readiness probes. */
const PROBES = ["/healthz", "/readyz"]

/** The Basic challenge makes a browser ask for a user name and password; the token is the password. */
const unauthorized = HttpServerResponse.text("unauthorized: send the admin token (Bearer, or as the password)\n", {
  status: 401,
  headers: { "www-authenticate": 'Basic realm="crm-sync admin", charset="UTF-8"' }
})

const sameToken = (given: string, expected: string) => {
  const a = Buffer.from(given)
  const b = Buffer.from(expected)
  return a.length === b.length && timingSafeEqual(a, b)
}

/** The token an Authorization header carries: a Bearer token, or the password of Basic credentials. */
const givenToken = (header: string): string => {
  const [scheme = "", value = ""] = header.trim().split(/\s+/, 2)
  if (scheme.toLowerCase() === "bearer") return value
  if (scheme.toLowerCase() !== "basic") return ""
  const decoded = Buffer.from(value, "base64").toString("utf8")
  const colon = decoded.indexOf(":")
  return colon < 0 ? "" : decoded.slice(colon + 1)
}

/** Requires the token on every admin route but the open ones. */
const requireToken = (token: Redacted.Redacted<string>, open: ReadonlySet<string>) =>
  HttpRouter.middleware(
    (httpEffect) =>
      Effect.gen(function* () {
        const request = yield* HttpServerRequest.HttpServerRequest
        const path = request.url.split("?")[0] ?? ""
        if (open.has(path)) return yield* httpEffect
        const given = givenToken(request.headers.authorization ?? "")
        return given !== "" && sameToken(given, Redacted.value(token)) ? yield* httpEffect : unauthorized
      }),
    { global: true }
  )

/** `?page=N` as a number (1 when absent or not a number). */
const pageNumber = (text: string | null) => {
  const page = Number(text ?? "1")
  return Number.isFinite(page) ? page : 1
}

/** The status page: `?connection=NAME` for one connection (404 when the config names none such), `?page=N`. */
const StatusPageRoute = HttpRouter.use(
  Effect.fnUntraced(function* (router) {
    const snapshot = yield* StatusSnapshot
    const charts = yield* StatusCharts
    const sql = yield* SqlClient
    yield* router.add(
      "GET",
      "/",
      Effect.gen(function* () {
        const report = yield* snapshot.current
        const query = yield* queryOf
        const connection = query.get("connection") ?? undefined
        if (connection !== undefined && !report.config.connections.some((c) => c.name === connection)) {
          return unknownConnection(connection)
        }
        const details = yield* statusDetails(connection)
        const drawn = yield* charts.of(report)
        return HttpServerResponse.html(
          renderStatusPage(report, details, { connection, page: pageNumber(query.get("page")) }, drawn ?? undefined)
        )
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
    const routes = Layer.mergeAll(HealthRoutes, StatusRoute, StatusPageRoute).pipe(
      Layer.provide(Layer.mergeAll(StatusSnapshot.layer, StatusCharts.layer))
    )
    const open = new Set(config.open_metrics ? [...PROBES, "/metrics"] : PROBES)
    return config.admin_token === undefined ? routes : Layer.mergeAll(routes, requireToken(config.admin_token, open))
  })
)
