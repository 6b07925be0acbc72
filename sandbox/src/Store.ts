/**
 * Holds the current generated world (spec §2's records) and answers the questions every other
 * sandbox service asks of it: which books a user can see in a company, where a record lives.
 * `reset` regenerates the world from the seed, dropping every mutation.
 */
import { Context, Effect, Layer } from "effect"
import { buildWorld } from "./Generator.ts"
import type { World } from "./World.ts"
import { SandboxConfig } from "./Options.ts"
import type { BookRow, UserRow } from "./Records.ts"

export class SandboxStore extends Context.Service<
  SandboxStore,
  {
    readonly world: Effect.Effect<World>
    readonly reset: Effect.Effect<void>
  }
>()("crm-sync/sandbox/SandboxStore") {
  static readonly layer = Layer.effect(
    SandboxStore,
    Effect.gen(function* () {
      const options = yield* SandboxConfig
      let world = buildWorld(options)
      return SandboxStore.of({
        world: Effect.sync(() => world),
        reset: Effect.sync(() => {
          world = buildWorld(options)
        })
      })
    })
  )
}

/** Books of `company` the user is a member of (spec §4 rule 7: access is per book). */
export const accessibleBooks = (world: World, userId: string, company: number): ReadonlyArray<BookRow> =>
  world.books.filter((book) => book.company === company && book.members.has(userId))

export const canAccessBook = (world: World, userId: string, company: number, bookId: string): boolean => {
  const book = world.booksById.get(bookId)
  return book !== undefined && book.company === company && book.members.has(userId)
}

export const companyOrdinal = (world: World, companyId: string): number | undefined =>
  world.companies.find((company) => company.id === companyId)?.ordinal

export const userName = (user: UserRow): string => `${user.first_name} ${user.last_name}`
