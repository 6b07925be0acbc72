/**
 * Webhook subscriptions (spec §3), partner endpoints and event delivery (§6). An event is
 * submitted once per eligible subscription (§6.1: app enabled, user active, book accessible —
 * checked at submission), becoming a message with its own `hook-id`; its snapshot is built
 * later, when the message is prepared (so it may be newer than the event); then it is delivered
 * to every enabled endpoint of the app that selects its type, in submission order per endpoint,
 * retried on non-2xx along the configured schedule. `client.updated` is debounced per client:
 * changed field names accumulate over a window that opens at the first change.
 */
import { Cause, Context, Duration, Effect, Fiber, FiberSet, Layer, Option, Queue } from "effect"
import { randomBytes } from "node:crypto"
import { SandboxAuth } from "./Auth.ts"
import { type ApiError, notFound, validationFailed } from "./errors.ts"
import { SandboxFaults } from "./Faults.ts"
import type { World } from "./Generator.ts"
import { SandboxConfig } from "./Options.ts"
import { iso, SandboxClock } from "./SandboxClock.ts"
import { clientApi, meetingSnapshot, noteApi, prospectApi, taskApi } from "./Serializers.ts"
import { SandboxStore } from "./Store.ts"
import { type SendResult, SandboxWebhookSender } from "./WebhookSender.ts"

export const EVENT_TYPES = [
  "meeting.created",
  "meeting.updated",
  "meeting.deleted",
  "meeting.transcript_ready",
  "task.created",
  "task.updated",
  "task.completed",
  "task.reopened",
  "task.deleted",
  "note.created",
  "note.updated",
  "note.deleted",
  "client.created",
  "client.updated",
  "prospect.created"
] as const
export type EventType = (typeof EVENT_TYPES)[number]

/** The record an event is about. */
export interface Subject {
  readonly kind: "meeting" | "task" | "note" | "client" | "prospect"
  readonly index: number
  readonly id: string
  readonly book: number
  /** Notes: the household the note belongs to, kept on deletion (§6.3). */
  readonly householdId?: string | null
}

export interface Subscription {
  readonly id: string
  readonly clientId: string
  readonly userId: string
  readonly company: number
  readonly createdAt: number
}

export interface Endpoint {
  readonly id: string
  readonly clientId: string
  url: string
  readonly secret: string
  eventTypes: ReadonlyArray<string>
  enabled: boolean
  readonly createdAt: number
}

export interface MessageRecord {
  readonly id: string
  readonly event_type: EventType
  readonly subscription_id: string
  readonly user_id: string
  readonly company_id: string
  readonly book_id: string
  readonly record_id: string
  readonly submitted_at: string
  prepared_at: string | null
  payload: string | null
  readonly endpoint_ids: ReadonlyArray<string>
}

export interface DeliveryRecord {
  readonly seq: number
  readonly message_id: string
  readonly endpoint_id: string
  readonly url: string
  readonly event_type: EventType
  readonly attempt: number
  /** A copy sent by the `webhook_duplicate` fault. */
  readonly duplicate: boolean
  readonly status: number | null
  readonly error: string | null
  readonly at: string
  readonly duration_ms: number
  readonly headers: Readonly<Record<string, string>>
  readonly payload: string
  readonly response_body: string | null
  readonly subscription_id: string
  readonly user_id: string
  readonly book_id: string
  readonly company_id: string
  /** `delivered`, `retrying` (another attempt is scheduled) or `failed` (no attempts left). */
  readonly outcome: "delivered" | "retrying" | "failed"
}

export interface DeliveryFilter {
  readonly eventType?: string | undefined
  readonly endpointId?: string | undefined
  readonly messageId?: string | undefined
  readonly since?: number | undefined
}

interface Message {
  readonly record: MessageRecord
  readonly subject: Subject
  readonly changedFields: ReadonlyArray<string>
  readonly submittedAtMs: number
  readonly generation: number
}

type EndpointItem =
  { readonly kind: "deliver"; readonly message: Message } | { readonly kind: "release"; readonly message: Message }

interface EndpointWorker {
  readonly queue: Queue.Queue<EndpointItem>
  readonly fiber: Fiber.Fiber<unknown, unknown>
}

interface Pending {
  readonly subject: Subject
  readonly fields: Array<string>
  readonly deadline: number
}

const webhookSecret = () => `whsec_${randomBytes(24).toString("base64")}`

const keyOf = (key: { readonly clientId: string; readonly userId: string; readonly company: number }) =>
  `${key.clientId}|${key.userId}|${key.company}`

const checkEventTypes = (eventTypes: ReadonlyArray<string> | undefined) => {
  const unknown = (eventTypes ?? []).filter((type) => !(EVENT_TYPES as ReadonlyArray<string>).includes(type))
  return unknown.length === 0
    ? Effect.void
    : Effect.fail(validationFailed(`unknown event types: ${unknown.join(", ")}; known: ${EVENT_TYPES.join(", ")}`))
}

const checkUrl = (url: string) =>
  URL.canParse(url) && /^https?:$/.test(new URL(url).protocol)
    ? Effect.void
    : Effect.fail(validationFailed(`endpoint url must be an http(s) URL, got "${url}"`))

const filterBy = <A extends { readonly event_type: string; readonly id?: string; readonly message_id?: string }>(
  items: ReadonlyArray<A>,
  filter: DeliveryFilter
) =>
  items.filter(
    (item) =>
      (filter.eventType === undefined || item.event_type === filter.eventType) &&
      (filter.messageId === undefined || (item.message_id ?? item.id) === filter.messageId)
  )

/** A bug in one message must not stop the loops that serve all the others (interruption still does). */
const keepGoing = (stage: string) =>
  Effect.catchCauseIf(
    (cause: Cause.Cause<unknown>) => !Cause.hasInterrupts(cause),
    (cause) => Effect.logError(`sandbox webhook ${stage} failed; skipping the message`, cause)
  )

export class SandboxWebhooks extends Context.Service<
  SandboxWebhooks,
  {
    /** `POST /v1/webhook_subscription`: the existing subscription, or a new one (`created`). */
    subscribe(key: {
      readonly clientId: string
      readonly userId: string
      readonly company: number
    }): Effect.Effect<{ readonly subscription: Subscription; readonly created: boolean }>
    /** `DELETE /v1/webhook_subscription`: idempotent. */
    unsubscribe(key: {
      readonly clientId: string
      readonly userId: string
      readonly company: number
    }): Effect.Effect<void>
    readonly subscriptions: Effect.Effect<ReadonlyArray<Subscription>>
    /** All subscriptions of an app are removed (app deleted). */
    removeApp(clientId: string): Effect.Effect<void>
    registerEndpoint(input: {
      readonly clientId: string
      readonly url: string
      readonly secret?: string | undefined
      readonly eventTypes?: ReadonlyArray<string> | undefined
    }): Effect.Effect<Endpoint, ApiError>
    updateEndpoint(
      id: string,
      patch: {
        readonly url?: string | undefined
        readonly enabled?: boolean | undefined
        readonly eventTypes?: ReadonlyArray<string> | undefined
      }
    ): Effect.Effect<Endpoint, ApiError>
    removeEndpoint(id: string): Effect.Effect<void, ApiError>
    readonly endpoints: Effect.Effect<ReadonlyArray<Endpoint>>
    /** Submits an event to every eligible subscription. */
    emit(type: EventType, subject: Subject): Effect.Effect<ReadonlyArray<MessageRecord>>
    /** Records changed client fields; `client.updated` goes out when the debounce window closes. */
    clientChanged(subject: Subject, fields: ReadonlyArray<string>): Effect.Effect<void>
    /** Closes every open debounce window now. */
    readonly flushDebounce: Effect.Effect<void>
    messages(filter?: DeliveryFilter): Effect.Effect<ReadonlyArray<MessageRecord>>
    deliveries(filter?: DeliveryFilter): Effect.Effect<ReadonlyArray<DeliveryRecord>>
    readonly lastDeliverySeq: Effect.Effect<number>
    readonly clearLogs: Effect.Effect<void>
    readonly reset: Effect.Effect<void>
  }
>()("crm-sync/sandbox/SandboxWebhooks") {
  static readonly layer = Layer.effect(
    SandboxWebhooks,
    Effect.gen(function* () {
      const options = yield* SandboxConfig
      const clock = yield* SandboxClock
      const store = yield* SandboxStore
      const auth = yield* SandboxAuth
      const faults = yield* SandboxFaults
      const sender = yield* SandboxWebhookSender
      const fibers = yield* FiberSet.make()
      // Background work runs with the sandbox's own services (its live clock), whichever fiber
      // started it: an admin call from a test must not hand its TestClock to a delivery.
      const sandboxContext = yield* Effect.context<never>()
      const background = <A, E>(effect: Effect.Effect<A, E>) =>
        FiberSet.run(fibers, Effect.provideContext(effect, sandboxContext))

      const subscriptions = new Map<string, Subscription>()
      const endpoints = new Map<string, Endpoint>()
      const workers = new Map<string, EndpointWorker>()
      const pending = new Map<string, Pending>()
      let messages: Array<MessageRecord> = []
      let deliveries: Array<DeliveryRecord> = []
      let deliverySeq = 0
      let counter = 0
      let generation = 0
      const preparing = yield* Queue.unbounded<Message>()

      // unique across resets and restarts: receivers deduplicate on hook-id
      const nextId = (prefix: string) => `${prefix}_${randomBytes(6).toString("hex")}${(++counter).toString(36)}`

      const context = (world: World, message: Message) => ({
        subscription_id: message.record.subscription_id,
        user_id: message.record.user_id,
        book_id: message.record.book_id,
        company_id: world.companies[world.books[message.subject.book]!.company]!.id
      })

      /** The body of §6.3 for this message, from the records as they are now. */
      const payloadOf = (world: World, message: Message): unknown => {
        const type = message.record.event_type
        const subject = message.subject
        const ctx = context(world, message)
        switch (subject.kind) {
          case "client": {
            const client = clientApi(world.clients.lastKnown(subject.index)!)
            return type === "client.created"
              ? { ...client, ...ctx }
              : { client, changed_fields: message.changedFields, ...ctx }
          }
          case "prospect":
            return { ...prospectApi(world.prospects.lastKnown(subject.index)!), ...ctx }
          default: {
            const envelope: Record<string, unknown> = { event_type: type, id: subject.id, ...ctx }
            if (subject.kind === "note" && subject.householdId != null) envelope.household_id = subject.householdId
            if (type.endsWith(".deleted")) return envelope
            if (subject.kind === "meeting") {
              envelope.meeting = meetingSnapshot(world, world.meetings.lastKnown(subject.index)!)
            } else if (subject.kind === "task") {
              envelope.task = taskApi(world, world.tasks.lastKnown(subject.index)!)
            } else {
              envelope.note = noteApi(world.notes.lastKnown(subject.index)!)
            }
            return envelope
          }
        }
      }

      const record = (
        message: Message,
        endpoint: Endpoint,
        attempt: number,
        duplicate: boolean,
        result: SendResult
      ) => {
        const delivered = result.status !== null && result.status >= 200 && result.status < 300
        const entry: DeliveryRecord = {
          seq: ++deliverySeq,
          message_id: message.record.id,
          endpoint_id: endpoint.id,
          url: endpoint.url,
          event_type: message.record.event_type,
          attempt,
          duplicate,
          status: result.status,
          error: result.error,
          at: iso(result.sentAt),
          duration_ms: result.durationMs,
          headers: result.headers,
          payload: message.record.payload ?? "",
          response_body: result.responseBody,
          subscription_id: message.record.subscription_id,
          user_id: message.record.user_id,
          book_id: message.record.book_id,
          company_id: message.record.company_id,
          outcome: delivered
            ? "delivered"
            : duplicate || attempt > options.webhookRetryScheduleMs.length
              ? "failed"
              : "retrying"
        }
        deliveries.push(entry)
        if (deliveries.length > options.logSize * 1.25) deliveries = deliveries.slice(-options.logSize)
        return delivered
      }

      const attempt = (message: Message, endpoint: Endpoint, n: number, duplicate = false) =>
        Effect.gen(function* () {
          if (message.generation !== generation) return true
          const result = yield* sender.send({
            url: endpoint.url,
            secret: endpoint.secret,
            messageId: message.record.id,
            payload: message.record.payload ?? ""
          })
          // a reset while the request was in flight: its outcome belongs to the old log
          if (message.generation !== generation) return true
          return record(message, endpoint, n, duplicate, result)
        })

      /** First attempt now; later attempts in the background along the retry schedule. */
      const deliver = Effect.fnUntraced(function* (message: Message, endpoint: Endpoint) {
        const delivered = yield* attempt(message, endpoint, 1)
        if (!delivered && options.webhookRetryScheduleMs.length > 0) {
          yield* background(
            Effect.gen(function* () {
              for (const [i, delay] of options.webhookRetryScheduleMs.entries()) {
                yield* Effect.sleep(Duration.millis(delay))
                if (!endpoints.has(endpoint.id)) return
                if (yield* attempt(message, endpoint, i + 2)) return
              }
            })
          )
        }
      })

      const startWorker = Effect.fnUntraced(function* (endpoint: Endpoint) {
        const queue = yield* Queue.unbounded<EndpointItem>()
        // a message held back by `webhook_reorder`, sent right after the next one
        let held: Message | undefined
        const step = Effect.gen(function* () {
          const item = yield* Queue.take(queue)
          if (item.kind === "release") {
            if (held === item.message) {
              held = undefined
              yield* deliver(item.message, endpoint)
            }
            return
          }
          const message = item.message
          if (message.generation !== generation) return
          const applied = yield* faults.forDelivery(message.record.event_type)
          const delay = applied.find((fault) => fault.kind === "webhook_delay")
          if (delay !== undefined && delay.kind === "webhook_delay") {
            yield* background(Effect.andThen(Effect.sleep(Duration.millis(delay.ms)), deliver(message, endpoint)))
            return
          }
          if (applied.some((fault) => fault.kind === "webhook_reorder") && held === undefined) {
            held = message
            yield* background(
              Effect.andThen(
                Effect.sleep(Duration.millis(options.webhookReorderHoldMs)),
                Queue.offer(queue, { kind: "release", message })
              )
            )
            return
          }
          yield* deliver(message, endpoint)
          if (applied.some((fault) => fault.kind === "webhook_duplicate")) yield* attempt(message, endpoint, 1, true)
          if (held !== undefined) {
            const release = held
            held = undefined
            yield* deliver(release, endpoint)
          }
        })
        const fiber = yield* background(Effect.forever(step.pipe(keepGoing("delivery"))))
        workers.set(endpoint.id, { queue, fiber })
      })

      // Preparation: one fiber, in submission order, so per-endpoint order follows submission order.
      yield* background(
        Effect.forever(
          Effect.gen(function* () {
            const message = yield* Queue.take(preparing)
            const wait = message.submittedAtMs + options.webhookPrepareDelayMs - (yield* clock.wallNow)
            if (wait > 0) yield* Effect.sleep(Duration.millis(wait))
            if (message.generation !== generation) return
            const world = yield* store.world
            message.record.payload = JSON.stringify(payloadOf(world, message))
            message.record.prepared_at = iso(yield* clock.now)
            for (const endpointId of message.record.endpoint_ids) {
              const worker = workers.get(endpointId)
              if (worker !== undefined) yield* Queue.offer(worker.queue, { kind: "deliver", message })
            }
          }).pipe(keepGoing("preparation"))
        )
      )

      const submit = Effect.fnUntraced(function* (
        type: EventType,
        subject: Subject,
        changedFields: ReadonlyArray<string>
      ) {
        const world = yield* store.world
        const now = yield* clock.now
        const submittedAtMs = yield* clock.wallNow
        const book = world.books[subject.book]!
        const submitted: Array<MessageRecord> = []
        for (const subscription of subscriptions.values()) {
          // §6.1 eligibility, checked now; messages already submitted are not recalled
          if (subscription.company !== book.company) continue
          if (world.usersById.get(subscription.userId)?.active !== true) continue
          if (!book.members.has(subscription.userId)) continue
          const app = yield* Effect.option(auth.app(subscription.clientId))
          if (Option.isNone(app) || !app.value.enabled) continue
          const targets = [...endpoints.values()].filter(
            (endpoint) =>
              endpoint.clientId === subscription.clientId &&
              endpoint.enabled &&
              (endpoint.eventTypes.length === 0 || endpoint.eventTypes.includes(type))
          )
          const message: Message = {
            record: {
              id: nextId("msg"),
              event_type: type,
              subscription_id: subscription.id,
              user_id: subscription.userId,
              company_id: world.companies[book.company]!.id,
              book_id: book.id,
              record_id: subject.id,
              submitted_at: iso(now),
              prepared_at: null,
              payload: null,
              endpoint_ids: targets.map((endpoint) => endpoint.id)
            },
            subject,
            changedFields,
            submittedAtMs,
            generation
          }
          messages.push(message.record)
          if (messages.length > options.logSize * 1.25) messages = messages.slice(-options.logSize)
          submitted.push(message.record)
          yield* Queue.offer(preparing, message)
        }
        return submitted
      })

      const flushPending = Effect.fnUntraced(function* (all: boolean) {
        const now = yield* clock.now
        // a snapshot: submitting yields, and other fibers may add entries meanwhile
        for (const [key, entry] of Array.from(pending.entries())) {
          if (!all && entry.deadline > now) continue
          pending.delete(key)
          yield* submit("client.updated", entry.subject, entry.fields)
        }
      })
      yield* clock.onAdvance(flushPending(false))

      const clientChanged = Effect.fn("SandboxWebhooks.clientChanged")(function* (
        subject: Subject,
        fields: ReadonlyArray<string>
      ) {
        const existing = pending.get(subject.id)
        if (existing !== undefined) {
          for (const field of fields) if (!existing.fields.includes(field)) existing.fields.push(field)
          return
        }
        const now = yield* clock.now
        const entry: Pending = { subject, fields: [...new Set(fields)], deadline: now + options.debounceMs }
        pending.set(subject.id, entry)
        // sleeps until the deadline in sandbox time (timers may fire a little early; loop until due)
        const timer = Effect.gen(function* () {
          while (pending.get(subject.id) === entry) {
            const remaining = entry.deadline - (yield* clock.now)
            if (remaining <= 0) return yield* flushPending(false)
            yield* Effect.sleep(Duration.millis(remaining))
          }
        })
        yield* background(timer)
      })

      const endpointById = (id: string) => {
        const endpoint = endpoints.get(id)
        return endpoint === undefined ? Effect.fail(notFound(`endpoint ${id} not found`)) : Effect.succeed(endpoint)
      }

      const stopWorker = Effect.fnUntraced(function* (id: string) {
        const worker = workers.get(id)
        workers.delete(id)
        if (worker !== undefined) yield* Fiber.interrupt(worker.fiber)
      })

      return SandboxWebhooks.of({
        subscribe: Effect.fn("SandboxWebhooks.subscribe")(function* (key) {
          const existing = subscriptions.get(keyOf(key))
          if (existing !== undefined) return { subscription: existing, created: false }
          const subscription: Subscription = { id: nextId("sub"), ...key, createdAt: yield* clock.now }
          subscriptions.set(keyOf(key), subscription)
          return { subscription, created: true }
        }),
        unsubscribe: (key) => Effect.sync(() => void subscriptions.delete(keyOf(key))),
        subscriptions: Effect.sync(() => [...subscriptions.values()]),
        removeApp: Effect.fn("SandboxWebhooks.removeApp")(function* (clientId) {
          for (const [key, subscription] of subscriptions) {
            if (subscription.clientId === clientId) subscriptions.delete(key)
          }
          for (const endpoint of Array.from(endpoints.values())) {
            if (endpoint.clientId === clientId) {
              endpoints.delete(endpoint.id)
              yield* stopWorker(endpoint.id)
            }
          }
        }),
        registerEndpoint: Effect.fn("SandboxWebhooks.registerEndpoint")(function* (input) {
          yield* auth.app(input.clientId)
          yield* checkUrl(input.url)
          yield* checkEventTypes(input.eventTypes)
          if (input.secret !== undefined && !/^whsec_[A-Za-z0-9+/]+=*$/.test(input.secret)) {
            return yield* validationFailed("secret must be whsec_ followed by base64")
          }
          const endpoint: Endpoint = {
            id: nextId("ep"),
            clientId: input.clientId,
            url: input.url,
            secret: input.secret ?? webhookSecret(),
            eventTypes: input.eventTypes ?? [],
            enabled: true,
            createdAt: yield* clock.now
          }
          endpoints.set(endpoint.id, endpoint)
          yield* startWorker(endpoint)
          return endpoint
        }),
        updateEndpoint: Effect.fn("SandboxWebhooks.updateEndpoint")(function* (id, patch) {
          const endpoint = yield* endpointById(id)
          if (patch.url !== undefined) {
            yield* checkUrl(patch.url)
            endpoint.url = patch.url
          }
          if (patch.eventTypes !== undefined) {
            yield* checkEventTypes(patch.eventTypes)
            endpoint.eventTypes = patch.eventTypes
          }
          if (patch.enabled !== undefined) endpoint.enabled = patch.enabled
          return endpoint
        }),
        removeEndpoint: Effect.fn("SandboxWebhooks.removeEndpoint")(function* (id) {
          yield* endpointById(id)
          endpoints.delete(id)
          yield* stopWorker(id)
        }),
        endpoints: Effect.sync(() => [...endpoints.values()]),
        emit: (type, subject) => submit(type, subject, []),
        clientChanged,
        flushDebounce: flushPending(true),
        messages: (filter = {}) => Effect.sync(() => filterBy(messages, filter)),
        deliveries: (filter = {}) =>
          Effect.sync(() =>
            filterBy(deliveries, filter).filter(
              (delivery) =>
                (filter.endpointId === undefined || delivery.endpoint_id === filter.endpointId) &&
                (filter.since === undefined || delivery.seq > filter.since)
            )
          ),
        lastDeliverySeq: Effect.sync(() => deliverySeq),
        clearLogs: Effect.sync(() => {
          messages = []
          deliveries = []
        }),
        reset: Effect.gen(function* () {
          generation++
          for (const id of Array.from(workers.keys())) yield* stopWorker(id)
          subscriptions.clear()
          endpoints.clear()
          pending.clear()
          messages = []
          deliveries = []
        })
      })
    })
  )
}
