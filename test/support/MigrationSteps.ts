/**
 * A migration tested on a warehouse with data: the migrations before it are applied from a copy of
 * the directory, the test stores its rows, then `applyIt` applies the migration itself (and only
 * it). The later ones, where a test needs them, come from `migrateFrom(migrationsDirectory)`.
 */
import * as Effect from "effect/Effect"
import { copyFileSync, mkdtempSync, readdirSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { migrateFrom, migrationsDirectory } from "../../src/warehouse/Migrations.ts"

/** Applies every migration before the one whose file name ends with `suffix`; returns `applyIt`. */
export const migrateUpTo = Effect.fnUntraced(function* (suffix: string) {
  const files = readdirSync(migrationsDirectory).filter((name) => name.endsWith(".sql"))
  const target = files.find((name) => name.endsWith(suffix))
  if (target === undefined) return yield* Effect.die(new Error(`no migration ends with ${suffix}`))
  const directory = mkdtempSync(join(tmpdir(), "crm-sync-migration-"))
  for (const name of files.filter((name) => name < target)) {
    copyFileSync(join(migrationsDirectory, name), join(directory, name))
  }
  yield* migrateFrom(directory)
  const applyIt = Effect.gen(function* () {
    copyFileSync(join(migrationsDirectory, target), join(directory, target))
    yield* migrateFrom(directory)
    rmSync(directory, { recursive: true, force: true })
  })
  return { applyIt }
})
