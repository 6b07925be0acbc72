/**
 * The world of a chaos run, all drawn from one seeded PRNG: the CRM's users at work (every
 * resource and event type the spec lists, and the changes no event announces), the sandbox's
 * faults switched on at random, and the firm's writes queued in `crm_sync.outbox`.
 */
import { Effect } from "effect"
import type { Sandbox } from "@crm-sync/sandbox"

type SandboxService = Sandbox["Service"]

/** mulberry32: small, fast, and the same sequence for the same seed. */
export const makeRng = (seed: number) => {
  let state = seed >>> 0
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  return {
    next,
    /** An integer in [0, n). */
    int: (n: number) => Math.floor(next() * n),
    pick: <A>(items: ReadonlyArray<A>): A | undefined =>
      items.length === 0 ? undefined : items[Math.floor(next() * items.length)],
    chance: (p: number) => next() < p
  }
}
export type Rng = ReturnType<typeof makeRng>

type Change = Effect.Effect<unknown, unknown>

interface Row {
  readonly id: string
  readonly status?: string
}

const stamp = () => new Date().toISOString().slice(11, 23)

/** The activity: one change per call, counted by kind; a change refused by the sandbox is counted too. */
export const makeActivity = (sandbox: SandboxService, rng: Rng, books: ReadonlyArray<string>) => {
  const { actions } = sandbox.admin
  const counts: Record<string, number> = {}
  let refused = 0
  const records = (kind: Parameters<SandboxService["admin"]["records"]>[0], bookId: string) =>
    Effect.map(
      sandbox.admin.records(kind, { bookId, limit: 40 }),
      (rows) => rows as ReadonlyArray<Row & Record<string, unknown>>
    )

  const changes: ReadonlyArray<readonly [string, (book: string) => Change]> = [
    ["task.create", (book) => actions.createTask({ book_id: book, title: `Chaos task ${stamp()}` })],
    [
      "task.complete_or_reopen",
      (book) =>
        Effect.flatMap(records("tasks", book), (tasks): Change => {
          const task = rng.pick(tasks)
          if (task === undefined) return Effect.void
          return task.status === "done" ? actions.reopenTask(task.id) : actions.completeTask(task.id)
        })
    ],
    [
      "task.update",
      (book) =>
        Effect.flatMap(records("tasks", book), (tasks): Change => {
          const task = rng.pick(tasks)
          return task === undefined ? Effect.void : actions.updateTask(task.id, { title: `Renamed ${stamp()}` })
        })
    ],
    [
      "task.delete",
      (book) =>
        Effect.flatMap(records("tasks", book), (tasks): Change => {
          const task = rng.pick(tasks)
          return task === undefined ? Effect.void : actions.deleteTask(task.id)
        })
    ],
    [
      "meeting.create_with_transcript",
      (book) =>
        Effect.flatMap(actions.createMeeting({ book_id: book, title: `Review ${stamp()}` }), (meeting) =>
          actions.setTranscript(meeting.id, {
            segments: [
              {
                text: "Let's go over the allocation.",
                participant: { name: "Advisor" },
                start_timestamp: "00:00:01",
                end_timestamp: "00:00:04"
              }
            ]
          })
        )
    ],
    [
      "meeting.update",
      (book) =>
        Effect.flatMap(records("meetings", book), (meetings): Change => {
          const meeting = rng.pick(meetings)
          return meeting === undefined
            ? Effect.void
            : actions.updateMeeting(meeting.id, { notepad: `Notes ${stamp()}` })
        })
    ],
    [
      "meeting.delete",
      (book) =>
        Effect.flatMap(records("meetings", book), (meetings): Change => {
          const meeting = rng.pick(meetings)
          return meeting === undefined ? Effect.void : actions.deleteMeeting(meeting.id)
        })
    ],
    [
      "note.create",
      (book) => {
        const kind = rng.pick(["households", "contacts", "businesses"] as const)!
        return Effect.flatMap(records(kind, book), (parents): Change => {
          const parent = rng.pick(parents)
          if (parent === undefined) return Effect.void
          const parentType = kind === "households" ? "household" : kind === "contacts" ? "contact" : "business"
          return actions.createNote({ parent_type: parentType, parent_id: parent.id, content: `Spoke ${stamp()}` })
        })
      }
    ],
    [
      "note.update",
      (book) =>
        Effect.flatMap(records("notes", book), (notes): Change => {
          const note = rng.pick(notes)
          return note === undefined ? Effect.void : actions.updateNote(note.id, { content: `Edited ${stamp()}` })
        })
    ],
    [
      "note.delete",
      (book) =>
        Effect.flatMap(records("notes", book), (notes): Change => {
          const note = rng.pick(notes)
          return note === undefined ? Effect.void : actions.deleteNote(note.id)
        })
    ],
    ["client.create", (book) => actions.createClient({ book_id: book, name: `Chaos Client ${stamp()}` })],
    [
      "client.update",
      (book) =>
        Effect.flatMap(records("clients", book), (clients): Change => {
          const client = rng.pick(clients)
          return client === undefined
            ? Effect.void
            : actions.updateClient(client.id, { tier: rng.pick(["A", "B", "C"])! })
        })
    ],
    [
      "prospect.create",
      (book) => actions.createProspect({ book_id: book, first_name: "Pat", last_name: `Prospect ${stamp()}` })
    ],
    // No event for these: only the poll, the crawls and the reconciliation can see them.
    [
      "business.update",
      (book) =>
        Effect.flatMap(records("businesses", book), (rows): Change => {
          const row = rng.pick(rows)
          return row === undefined
            ? Effect.void
            : actions.updateBusiness(row.id, { additional_info: `Changed ${stamp()}` })
        })
    ],
    ["business.create", (book) => actions.createBusiness({ book_id: book, name: `Chaos Holdings ${stamp()}` })],
    [
      "business.delete",
      (book) =>
        Effect.flatMap(records("businesses", book), (rows): Change => {
          const row = rng.pick(rows)
          return row === undefined ? Effect.void : actions.deleteBusiness(row.id)
        })
    ],
    ["financial_account.create", (book) => actions.createFinancialAccount({ book_id: book, name: `Chaos ${stamp()}` })],
    [
      "financial_account.update",
      (book) =>
        Effect.flatMap(records("financial_accounts", book), (rows): Change => {
          const row = rng.pick(rows)
          return row === undefined
            ? Effect.void
            : actions.updateFinancialAccount(row.id, { balance_in_cents: rng.int(10_000_000) })
        })
    ],
    [
      "financial_account.delete",
      (book) =>
        Effect.flatMap(records("financial_accounts", book), (rows): Change => {
          const row = rng.pick(rows)
          return row === undefined ? Effect.void : actions.deleteFinancialAccount(row.id)
        })
    ],
    ["annuity_contract.create", (book) => actions.createAnnuityContract({ book_id: book, notes: `New ${stamp()}` })],
    [
      "annuity_contract.update",
      (book) =>
        Effect.flatMap(records("annuity_contracts", book), (rows): Change => {
          const row = rng.pick(rows)
          return row === undefined
            ? Effect.void
            : actions.updateAnnuityContract(row.id, { notes: `Re-papered ${stamp()}` })
        })
    ],
    [
      "annuity_contract.delete",
      (book) =>
        Effect.flatMap(records("annuity_contracts", book), (rows): Change => {
          const row = rng.pick(rows)
          return row === undefined ? Effect.void : actions.deleteAnnuityContract(row.id)
        })
    ]
  ]

  return {
    counts,
    refused: () => refused,
    /** One change by a CRM user, chosen by the PRNG. */
    step: async () => {
      const [name, change] = changes[rng.int(changes.length)]!
      const book = rng.pick(books)!
      const outcome = await Effect.runPromise(Effect.result(change(book)))
      if (outcome._tag === "Failure") refused++
      else counts[name] = (counts[name] ?? 0) + 1
    }
  }
}

/** A fault of the sandbox, switched on for a few requests or deliveries. */
export const randomFault = (rng: Rng): Record<string, unknown> => {
  const choices: ReadonlyArray<() => Record<string, unknown>> = [
    () => ({ kind: "status", status: rng.pick([500, 502, 503])!, times: 1 + rng.int(3), when: "before" }),
    () => ({ kind: "status", status: 503, times: 1, when: "after" }),
    () => ({ kind: "rate_limit", retry_after: 1 + rng.int(2), times: 2 + rng.int(5) }),
    () => ({ kind: "latency", ms: 200 + rng.int(1_500), times: 1 + rng.int(5) }),
    () => ({ kind: "latency", ms: 500 + rng.int(1_000), when: "inside", path: "/v1/prospects", times: 1 }),
    () => ({ kind: "reset", when: rng.pick(["before", "after"])!, times: 1 + rng.int(2) }),
    () => ({ kind: "truncate", times: 1 + rng.int(2) }),
    () => ({ kind: "non_json", status: rng.pick([200, 502])!, times: 1 }),
    () => ({
      kind: "page_drift",
      path: rng.pick(["/v1/businesses", "/v1/annuity_contracts", "/v1/financial_accounts"])!,
      action: rng.pick(["insert", "update", "delete", "mixed"])!,
      times: 1
    }),
    () => ({ kind: "webhook_duplicate", probability: 0.3, times: 5 + rng.int(10) }),
    () => ({ kind: "webhook_delay", ms: 500 + rng.int(2_500), probability: 0.5, times: 5 + rng.int(10) }),
    () => ({ kind: "webhook_reorder", probability: 0.5, times: 5 + rng.int(10) })
  ]
  return choices[rng.int(choices.length)]!()
}

/** The firm's writes: contacts and prospects, a few with payloads that cannot go out. */
export const outboxRow = (rng: Rng, books: ReadonlyArray<string>, marker: string) => {
  const book = rng.pick(books)!
  const roll = rng.next()
  if (roll < 0.08) {
    // Refused before it is sent: no last_name.
    return { operation: "prospect.create", payload: { book_id: book, first_name: "No" }, valid: false }
  }
  if (roll < 0.15) {
    // Refused by the CRM: a book that does not exist.
    return {
      operation: "prospect.create",
      payload: { book_id: "book_does_not_exist", first_name: "Lost", last_name: marker },
      valid: false
    }
  }
  return roll < 0.6
    ? { operation: "contact.create", payload: { book_id: book, first_name: "Chaos", last_name: marker }, valid: true }
    : { operation: "prospect.create", payload: { book_id: book, first_name: "Chaos", last_name: marker }, valid: true }
}
