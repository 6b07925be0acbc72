/**
 * Health and metrics routes, served on the admin listener (AdminRoutes.ts; the webhook port serves
 * only `/healthz`): `/healthz` (liveness: the process answers HTTP), `/readyz` (readiness: the
 * database answers and every connection's credentials can be used; 503 with one line per reason,
 * a database's naming where it is and what PostgreSQL or the socket said)
 * and `/metrics` (every metric in Effect's registry as Prometheus text).
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as PrometheusMetrics from "effect/observability/PrometheusMetrics"
import { SqlClient } from "effect/sql/SqlClient"
import { AppConfig } from "../config/AppConfig.ts"
import { Credentials } from "../crm/Credentials.ts"
import { DatabaseInfo } from "../warehouse/Database.ts"
import { oneLine } from "./Text.ts"

const READINESS_TIMEOUT = Duration.seconds(2)

const ok = HttpServerResponse.text("ok\n")

/** Why a connection cannot work here, as one line each (empty when every one can). */
const credentialProblems = (config: AppConfig["Service"], credentials: Credentials["Service"]) =>
  Effect.forEach(config.connections, (connection) =>
    credentials.unusable(connection).pipe(
      Effect.map(Option.map((problem) => `connection ${connection.name}: ${problem}`)),
      Effect.catch((error) => Effect.succeed(Option.some(`connection ${connection.name}: ${error.message}`)))
    )
  ).pipe(Effect.map((problems) => problems.flatMap((problem) => Option.toArray(problem))))

/** A WARN line when readiness turns, or changes its reasons; an INFO line when it is back. */
const logChange = (last: Ref.Ref<ReadonlyArray<string>>, problems: ReadonlyArray<string>) =>
  Effect.flatMap(Ref.getAndSet(last, problems), (previous) =>
    previous.join("\n") === problems.join("\n")
      ? Effect.void
      : problems.length === 0
        ? Effect.logInfo("ready again")
        : Effect.logWarning(`not ready: ${problems.join("; ")}`)
  )

/**
 * `/readyz`: 200 when the database answers a trivial query within two seconds and every
 * connection's credentials can be used by this process. A load balancer then stops sending
 * deliveries to a replica that cannot store them, and a rollout whose new replicas have a missing
 * or wrong `CRM_SYNC_ENCRYPTION_KEY` stalls with the old replicas serving. A grant that needs
 * re-authorization does not make a replica unready: it is the same for every replica, and the
 * intake must go on storing deliveries meanwhile. Each change of the answer is logged once, with
 * the reasons (a database's: where it is and what PostgreSQL or the socket said).
 */
const readiness = HttpRouter.use(
  Effect.fnUntraced(function* (router) {
    const sql = yield* SqlClient
    const config = yield* AppConfig
    const credentials = yield* Credentials
    const where = Option.match(yield* Effect.serviceOption(DatabaseInfo), {
      onNone: () => "",
      onSome: (database) => ` (${database.location})`
    })
    const lastProblems = yield* Ref.make<ReadonlyArray<string>>([])
    const check = Effect.gen(function* () {
      yield* sql`SELECT 1`
      return yield* credentialProblems(config, credentials)
    }).pipe(
      Effect.timeout(READINESS_TIMEOUT),
      Effect.catch((error) => Effect.succeed([`database unavailable${where}: ${oneLine(error, 300)}`])),
      Effect.tap((problems) => logChange(lastProblems, problems)),
      Effect.map((problems) =>
        problems.length === 0 ? ok : HttpServerResponse.text(`${problems.join("\n")}\n`, { status: 503 })
      )
    )
    yield* router.add("GET", "/readyz", check)
  })
)

/**
 * `/healthz` alone: what the webhook port serves besides the deliveries, for load balancers. It
 * deliberately does not look at the database, so an orchestrator does not restart a healthy
 * process because PostgreSQL is briefly away (the inbox answers 503 meanwhile and senders retry).
 */
export const LivenessRoute = HttpRouter.add("GET", "/healthz", ok)

/** `/healthz`, `/readyz` and `/metrics`. Needs the `HttpRouter`, a `SqlClient`, the config and Credentials. */
export const HealthRoutes = Layer.mergeAll(LivenessRoute, readiness, PrometheusMetrics.layerHttp({ path: "/metrics" }))
