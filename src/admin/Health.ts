/**
 * Health and metrics routes, served on the admin listener (AdminRoutes.ts; the webhook port serves
 * only `/healthz`): `/healthz` (liveness: the process answers HTTP), `/readyz` (readiness: the
 * database answers and every connection's credentials can be used; 503 with one line per reason,
 * a database's naming where it is and what PostgreSQL or the socket said)
 * and `/metrics` (every metric in Effect's registry as Prometheus text).
 */
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as PrometheusMetrics from "effect/observability/PrometheusMetrics"
import { SqlClient } from "effect/sql/SqlClient"
import { AppConfig } from "../config/AppConfig.ts"
import { Credentials } from "../crm/Credentials.ts"
import { DatabaseInfo } from "../warehouse/Database.ts"
import { oneLine } from "../observability/Text.ts"

const READINESS_TIMEOUT = Duration.seconds(2)

const ok = HttpServerResponse.text("ok\n")

/** Why a connection cannot work here, as one line each (empty when every one can). */
const credentialProblems = (config: AppConfig["Service"], credentials: Credentials["Service"]) =>
  Effect.forEach(
    config.connections,
    (connection) =>
      credentials.unusable(connection).pipe(
        Effect.map(Option.map((problem) => `connection ${connection.name}: ${problem}`)),
        Effect.catch((error) => Effect.succeed(Option.some(`connection ${connection.name}: ${error.message}`)))
      ),
    { concurrency: 2 }
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

/** How often the background check asks the database for `SELECT 1`; `/readyz` answers its latest result. */
const READINESS_EVERY = Duration.seconds(1)
/** How often it looks at the stored credentials again (they change only with `connect` or a new key). */
const CREDENTIALS_EVERY = Duration.seconds(30)
const CREDENTIALS_TIMEOUT = Duration.seconds(10)

/**
 * `/readyz`: 200 when the database answers a trivial query within two seconds and every
 * connection's credentials can be used by this process. A load balancer then stops sending
 * deliveries to a replica that cannot store them, and a rollout whose new replicas have a missing
 * or wrong `CRM_SYNC_ENCRYPTION_KEY` stalls with the old replicas serving. A grant that needs
 * re-authorization does not make a replica unready: it is the same for every replica, and the
 * intake must go on storing deliveries meanwhile. Each change of the answer is logged once, with
 * the reasons (a database's: where it is and what PostgreSQL or the socket said).
 *
 * The check runs in the background (`SELECT 1` every second on a connection of its own, the
 * credentials every 30 s, one
 * query per OAuth connection) and the probe answers its latest result, so the probe's time does
 * not depend on the number of connections, on the pool being busy or on a slow database; only the
 * first probe waits for the first check.
 */
const readiness = HttpRouter.use(
  Effect.fnUntraced(function* (router) {
    const config = yield* AppConfig
    const credentials = yield* Credentials
    const info = yield* Effect.serviceOption(DatabaseInfo)
    const where = Option.match(info, { onNone: () => "", onSome: (database) => ` (${database.location})` })
    // Its own connection where the database layer offers one: SELECT 1 then measures the database,
    // not the queue for the shared pool.
    const dedicated = Option.flatMap(info, (database) => Option.fromNullishOr(database.dedicated))
    const shared = yield* SqlClient
    const sql = Option.isSome(dedicated)
      ? yield* Effect.catch(dedicated.value("readiness"), () => Effect.succeed(shared))
      : shared
    const lastProblems = yield* Ref.make<ReadonlyArray<string>>([])
    const credentialState = yield* Ref.make<{ readonly problems: ReadonlyArray<string>; readonly at: number }>({
      problems: [],
      at: -Infinity
    })
    const answer = yield* Deferred.make<void>()
    const latest = yield* Ref.make<ReadonlyArray<string>>([])
    const credentialCheck = Effect.gen(function* () {
      const now = yield* Effect.clockWith((clock) => clock.currentTimeMillis)
      const known = yield* Ref.get(credentialState)
      if (now - known.at < Duration.toMillis(CREDENTIALS_EVERY)) return known.problems
      // One query per OAuth connection, a few at a time. A look that takes too long keeps what
      // was known, and is tried again at the next check; before any, the replica is not ready.
      const checked = yield* credentialProblems(config, credentials).pipe(Effect.timeoutOption(CREDENTIALS_TIMEOUT))
      if (Option.isNone(checked)) {
        return known.at === -Infinity
          ? ["the connections' credentials could not be checked within 10 s"]
          : known.problems
      }
      yield* Ref.set(credentialState, { problems: checked.value, at: now })
      return checked.value
    })
    const check = sql`SELECT 1`.pipe(
      Effect.timeout(READINESS_TIMEOUT),
      Effect.andThen(credentialCheck),
      Effect.catch((error) => Effect.succeed([`database unavailable${where}: ${oneLine(error, 300)}`])),
      Effect.tap((problems) => logChange(lastProblems, problems)),
      Effect.tap((problems) => Ref.set(latest, problems)),
      Effect.andThen(Deferred.succeed(answer, undefined))
    )
    yield* check.pipe(Effect.repeat(Schedule.spaced(READINESS_EVERY)), Effect.forkScoped)
    const respond = Effect.gen(function* () {
      yield* Deferred.await(answer)
      const problems = yield* Ref.get(latest)
      return problems.length === 0 ? ok : HttpServerResponse.text(`${problems.join("\n")}\n`, { status: 503 })
    })
    yield* router.add("GET", "/readyz", respond)
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
