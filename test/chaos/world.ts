/**
 * The world of a chaos run, all drawn from one seeded PRNG: the CRM's users at work (every
 * resource and event type the spec lists, and the changes no event announces), the sandbox's
 * faults switched on at random, and the firm's writes queued in `crm_sync.outbox`. Beside the
 * plain changes, scenes that put one record through a known hazard: a client delivery whose first
 * attempts fail and whose retry (signed at the retry's time) lands after a newer change of the
 * same client; a task, meeting or note change retried after the record's deletion; a transcript
 * changed twice, the second time once the first read of it has arrived (it is answered late); a
 * transcript hidden (no event); a meeting with a transcript deleted. The CRM's clock skew is set
 * by run.ts (`clockSkew`).
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
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/**
 * How many steps a retried delivery may take to land: its last attempt (at most 11 s, the chaos
 * retry schedule's first four delays) is a few dozen steps away, and the margin is wide.
 */
const RETRY_SPAN_STEPS = 150

/** A transcript of one segment, saying `text`. */
const transcriptOf = (text: string) => ({
  segments: [{ text, participant: { name: "Advisor" }, start_timestamp: "00:00:01", end_timestamp: "00:00:04" }]
})

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

  /**
   * Clients with a failing delivery on its way: no other change touches them until it has landed,
   * so that what the retry must not undo is a field the retry's snapshot did not change (the one
   * order no receiver can recover is two changes of one field, the older one's first attempt lost
   * before it reached the receiver; docs/reliability.md).
   */
  const reserved = new Map<string, number>()
  // counted in steps, not time, so that the same seed picks the same clients
  let steps = 0
  const free = <A extends Row>(rows: ReadonlyArray<A>) => rows.filter((row) => (reserved.get(row.id) ?? 0) < steps)
  const reserve = (id: string) => reserved.set(id, steps + RETRY_SPAN_STEPS)
  /** Meetings whose transcript the world changed without an event (hidden): only a read can see it. */
  const silent = new Set<string>()
  const fail = (rule: Record<string, unknown>) =>
    sandbox.admin.addFault({
      kind: "webhook_fail",
      times: 1,
      // the retry lands 6 or 11 s after the first attempt (the chaos retry schedule: 1, 2, 3, 5 s)
      attempts: 3 + rng.int(2),
      reach: rng.chance(0.5) ? "none" : "receiver",
      ...rule
    } as never)
  /** Waits (bounded) until every message about the record has its snapshot, so a later change is not in it. */
  const prepared = (recordId: string) =>
    Effect.promise(async () => {
      for (let i = 0; i < 100; i++) {
        const messages = await Effect.runPromise(sandbox.admin.messages())
        if (!messages.some((m) => m.record_id === recordId && m.prepared_at === null)) return
        await sleep(20)
      }
    })
  let lateReads = 0
  /** Waits (bounded) until the late-answer fault `id` has caught its read. */
  const firstRead = (id: string) =>
    Effect.promise(async () => {
      for (let i = 0; i < 100; i++) {
        const faults = await Effect.runPromise(sandbox.admin.faults)
        if ((faults.find((fault) => fault.id === id)?.fired ?? 1) > 0) return
        await sleep(50)
      }
    })
  const count = (recordId: string, type: string) =>
    Effect.map(
      sandbox.admin.messages({ eventType: type }),
      (messages) => messages.filter((message) => message.record_id === recordId).length
    )
  /** Waits (bounded) until more than `before` `type` messages about the record exist, all with their snapshot. */
  const announced = (recordId: string, type: string, before: number) =>
    Effect.promise(async () => {
      for (let i = 0; i < 200; i++) {
        const messages = (await Effect.runPromise(sandbox.admin.messages({ eventType: type }))).filter(
          (message) => message.record_id === recordId
        )
        if (messages.length > before && messages.every((message) => message.prepared_at !== null)) return
        await sleep(50)
      }
    })
  const withTranscript = (book: string) =>
    Effect.map(records("meetings", book), (rows) =>
      rows.filter(
        (row) => Array.isArray(row.transcript) && row.transcript.length > 0 && row.transcript_visible === true
      )
    )
  /** A change of a task, meeting or note whose delivery fails at first, then the record's deletion. */
  const retriedThenDeleted = (
    kind: "tasks" | "meetings" | "notes",
    change: (id: string) => Change,
    remove: (id: string) => Change
  ) => {
    const prefix = kind === "tasks" ? "task" : kind === "meetings" ? "meeting" : "note"
    return (book: string) =>
      Effect.flatMap(records(kind, book), (rows): Change => {
        const row = rng.pick(rows)
        if (row === undefined) return Effect.void
        return fail({ event: `${prefix}.*`, record: row.id }).pipe(
          Effect.andThen(change(row.id)),
          Effect.andThen(prepared(row.id)),
          Effect.andThen(remove(row.id))
        )
      })
  }

  const scenes: ReadonlyArray<readonly [string, (book: string) => Change]> = [
    [
      // client.updated M1 fails at first; M2 (another field, a debounce window later) is delivered;
      // M1's retry lands after it. The windows close on their own: the CRM never sends two
      // client.updated of one client within a window, so their signed seconds never tie.
      "scene.client_update_retried",
      (book) =>
        Effect.flatMap(records("clients", book), (clients): Change => {
          const client = rng.pick(free(clients))
          if (client === undefined) return Effect.void
          reserve(client.id)
          const tier = rng.pick(["A", "B", "C"])!
          return fail({ event: "client.updated", record: client.id }).pipe(
            Effect.andThen(count(client.id, "client.updated")),
            Effect.tap(() => actions.updateClient(client.id, { tier })),
            Effect.flatMap((before) => announced(client.id, "client.updated", before)),
            Effect.andThen(
              Effect.suspend(() => actions.updateClient(client.id, { name: `Chaos Client renamed ${stamp()}` }))
            )
          )
        })
    ],
    [
      // client.created fails at first; the debounced client.updated goes out; the created retry lands after it.
      "scene.client_create_retried",
      (book) => {
        const tier = rng.pick(["A", "B", "C"])!
        return fail({ event: "client.created" }).pipe(
          Effect.andThen(actions.createClient({ book_id: book, name: `Chaos Client ${stamp()}` })),
          Effect.tap((client) => Effect.sync(() => reserve(client.id))),
          Effect.tap((client) => prepared(client.id)),
          Effect.flatMap((client) => actions.updateClient(client.id, { tier }))
        )
      }
    ],
    [
      "scene.task_update_retried_after_delete",
      retriedThenDeleted(
        "tasks",
        (id) => actions.updateTask(id, { title: `Renamed ${stamp()}` }),
        (id) => actions.deleteTask(id)
      )
    ],
    [
      "scene.meeting_update_retried_after_delete",
      retriedThenDeleted(
        "meetings",
        (id) => actions.updateMeeting(id, { notepad: `Notes ${stamp()}` }),
        (id) => actions.deleteMeeting(id)
      )
    ],
    [
      "scene.note_update_retried_after_delete",
      retriedThenDeleted(
        "notes",
        (id) => actions.updateNote(id, { content: `Edited ${stamp()}` }),
        (id) => actions.deleteNote(id)
      )
    ],
    [
      // Two transcript_ready for one meeting; the first read of the transcript is answered late.
      "scene.transcript_changed_twice",
      (book) =>
        Effect.flatMap(records("meetings", book), (meetings): Change => {
          // a hidden transcript announces nothing: only meetings whose transcript is shown
          const meeting = rng.pick(meetings.filter((row) => row.transcript_visible !== false))
          if (meeting === undefined) return Effect.void
          const id = `late-transcript-${meeting.id}-${++lateReads}`
          return sandbox.admin
            .addFault({
              id,
              kind: "latency",
              when: "after",
              ms: 2_500 + rng.int(2_500),
              path: `/v1/meetings/${meeting.id}/transcript`,
              times: 1
            } as never)
            .pipe(
              Effect.andThen(actions.setTranscript(meeting.id, transcriptOf(`First take ${stamp()}`))),
              // the first read has been answered (late): the second change is not in it
              Effect.andThen(firstRead(id)),
              Effect.andThen(
                Effect.suspend(() => actions.setTranscript(meeting.id, transcriptOf(`Second take ${stamp()}`)))
              )
            )
        })
    ],
    [
      // No event announces it (spec §6.4): only a read of the transcript can retire it.
      "scene.transcript_hidden",
      (book) =>
        Effect.flatMap(withTranscript(book), (meetings): Change => {
          const meeting = rng.pick(meetings)
          if (meeting === undefined) return Effect.void
          silent.add(meeting.id)
          return actions.setTranscript(meeting.id, { visible: false })
        })
    ],
    [
      "scene.meeting_with_transcript_deleted",
      (book) =>
        Effect.flatMap(withTranscript(book), (meetings): Change => {
          const meeting = rng.pick(meetings)
          return meeting === undefined ? Effect.void : actions.deleteMeeting(meeting.id)
        })
    ]
  ]

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
          const client = rng.pick(free(clients))
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

  const all = [...changes, ...scenes]
  return {
    counts,
    refused: () => refused,
    /** Meetings whose transcript was hidden (no event): judged only once a reconciliation has read them. */
    silent: () => silent as ReadonlySet<string>,
    /** One change by a CRM user (or one scene), chosen by the PRNG. */
    step: async () => {
      steps++
      const [name, change] = all[rng.int(all.length)]!
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
