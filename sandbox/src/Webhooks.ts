/**
 * Webhook subscriptions (spec §3), partner endpoints and event delivery (§6). An event is
 * submitted once per eligible subscription (§6.1: app enabled, user active, book accessible —
 * checked at submission), becoming a message with its own `hook-id`; its snapshot is built
 * later, when the message is prepared (so it may be newer than the event); then it is delivered
 * to every enabled endpoint of the app that selects its type, in submission order per endpoint,
 * retried on non-2xx (`WebhookDelivery.ts`). `client.updated` is debounced per client:
 * changed field names accumulate over a window that opens at the first change.
 */
import { Context, Duration, Effect, Fiber, FiberSet, Layer, Option, Queue } from "effect"
import { randomBytes } from "node:crypto"
import { SandboxAuth } from "./Auth.ts"
import { type ApiError, notFound, validationFailed } from "./errors.ts"
import { SandboxFaults } from "./Faults.ts"
import type { World } from "./World.ts"
import type { BookRow } from "./Records.ts"
import { SandboxConfig } from "./Options.ts"
import { iso, SandboxClock } from "./SandboxClock.ts"
import { SandboxStore } from "./Store.ts"
import { startPreparation, startWorker } from "./WebhookDelivery.ts"
import { SandboxWebhookSender } from "./WebhookSender.ts"
import {
  type DeliveryFilter,
  type DeliveryRecord,
  type Endpoint,
  EVENT_TYPES,
  type EventType,
  type Message,
  type MessageRecord,
  type Pending,
  type Subject,
  type Subscription,
  type WebhookDeps,
  type WebhookState
} from "./WebhookTypes.ts"

export { EVENT_TYPES } from "./WebhookTypes.ts"
export type {
  DeliveryFilter,
  DeliveryRecord,
  Endpoint,
  EndpointItem,
  EventType,
  Message,
  MessageRecord,
  Subject,
  Subscription
} from "./WebhookTypes.ts"

const webhookSecret = () => `whsec_${randomBytes(24).toString("base64")}`

/** Unique across resets and restarts: receivers deduplicate on hook-id. */
const nextId = (state: WebhookState, prefix: string) =>
  `${prefix}_${randomBytes(6).toString("hex")}${(++state.counter).toString(36)}`

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

/** §6.1 eligibility, checked at submission: app enabled, user active, book accessible. */
const isEligible = Effect.fnUntraced(function* (
  deps: WebhookDeps,
  world: World,
  book: BookRow,
  subscription: Subscription
) {
  if (subscription.company !== book.company) return false
  if (world.usersById.get(subscription.userId)?.active !== true) return false
  if (!book.members.has(subscription.userId)) return false
  const app = yield* Effect.option(deps.auth.app(subscription.clientId))
  return Option.isSome(app) && app.value.enabled
})

/** The enabled endpoints of the subscription's app that select `type`. */
const targetsOf = (state: WebhookState, subscription: Subscription, type: EventType) =>
  [...state.endpoints.values()].filter(
    (endpoint) =>
      endpoint.clientId === subscription.clientId &&
      endpoint.enabled &&
      (endpoint.eventTypes.length === 0 || endpoint.eventTypes.includes(type))
  )

/** Submits the event once per eligible subscription; messages already submitted are not recalled. */
const submit = Effect.fnUntraced(function* (
  deps: WebhookDeps,
  type: EventType,
  subject: Subject,
  changedFields: ReadonlyArray<string>
) {
  const { options, state } = deps
  const world = yield* deps.store.world
  const now = yield* deps.clock.now
  const submittedAtMs = yield* deps.clock.wallNow
  const book = world.books[subject.book]!
  const submitted: Array<MessageRecord> = []
  for (const subscription of state.subscriptions.values()) {
    if (!(yield* isEligible(deps, world, book, subscription))) continue
    const record: MessageRecord = {
      id: nextId(state, "msg"),
      event_type: type,
      subscription_id: subscription.id,
      user_id: subscription.userId,
      company_id: world.companies[book.company]!.id,
      book_id: book.id,
      record_id: subject.id,
      submitted_at: iso(now),
      prepared_at: null,
      payload: null,
      endpoint_ids: targetsOf(state, subscription, type).map((endpoint) => endpoint.id)
    }
    state.messages.push(record)
    if (state.messages.length > options.logSize * 1.25) state.messages = state.messages.slice(-options.logSize)
    submitted.push(record)
    yield* Queue.offer(state.preparing, { record, subject, changedFields, submittedAtMs, generation: state.generation })
  }
  return submitted
})

/** Sends `client.updated` for every debounce window that is due (or all of them). */
const flushPending = Effect.fnUntraced(function* (deps: WebhookDeps, all: boolean) {
  const now = yield* deps.clock.now
  // a snapshot: submitting yields, and other fibers may add entries meanwhile
  for (const [key, entry] of Array.from(deps.state.pending.entries())) {
    if (!all && entry.deadline > now) continue
    deps.state.pending.delete(key)
    yield* submit(deps, "client.updated", entry.subject, entry.fields)
  }
})

const clientChanged = Effect.fn("SandboxWebhooks.clientChanged")(function* (
  deps: WebhookDeps,
  subject: Subject,
  fields: ReadonlyArray<string>
) {
  const { clock, state } = deps
  const existing = state.pending.get(subject.id)
  if (existing !== undefined) {
    for (const field of fields) if (!existing.fields.includes(field)) existing.fields.push(field)
    return
  }
  const now = yield* clock.now
  const entry: Pending = { subject, fields: [...new Set(fields)], deadline: now + deps.options.debounceMs }
  state.pending.set(subject.id, entry)
  // sleeps until the deadline in sandbox time (timers may fire a little early; loop until due)
  const timer = Effect.gen(function* () {
    while (state.pending.get(subject.id) === entry) {
      const remaining = entry.deadline - (yield* clock.now)
      if (remaining <= 0) return yield* flushPending(deps, false)
      yield* Effect.sleep(Duration.millis(remaining))
    }
  })
  yield* deps.background(timer)
})

const endpointById = (state: WebhookState, id: string) => {
  const endpoint = state.endpoints.get(id)
  return endpoint === undefined ? Effect.fail(notFound(`endpoint ${id} not found`)) : Effect.succeed(endpoint)
}

const stopWorker = Effect.fnUntraced(function* (state: WebhookState, id: string) {
  const worker = state.workers.get(id)
  state.workers.delete(id)
  if (worker !== undefined) yield* Fiber.interrupt(worker.fiber)
})

const removeApp = Effect.fn("SandboxWebhooks.removeApp")(function* (state: WebhookState, clientId: string) {
  for (const [key, subscription] of state.subscriptions) {
    if (subscription.clientId === clientId) state.subscriptions.delete(key)
  }
  for (const endpoint of Array.from(state.endpoints.values())) {
    if (endpoint.clientId === clientId) {
      state.endpoints.delete(endpoint.id)
      yield* stopWorker(state, endpoint.id)
    }
  }
})

const registerEndpoint = Effect.fn("SandboxWebhooks.registerEndpoint")(function* (
  deps: WebhookDeps,
  input: {
    readonly clientId: string
    readonly url: string
    readonly secret?: string | undefined
    readonly eventTypes?: ReadonlyArray<string> | undefined
  }
) {
  yield* deps.auth.app(input.clientId)
  yield* checkUrl(input.url)
  yield* checkEventTypes(input.eventTypes)
  if (input.secret !== undefined && !/^whsec_[A-Za-z0-9+/]+=*$/.test(input.secret)) {
    return yield* validationFailed("secret must be whsec_ followed by base64")
  }
  const endpoint: Endpoint = {
    id: nextId(deps.state, "ep"),
    clientId: input.clientId,
    url: input.url,
    secret: input.secret ?? webhookSecret(),
    eventTypes: input.eventTypes ?? [],
    enabled: true,
    createdAt: yield* deps.clock.now
  }
  deps.state.endpoints.set(endpoint.id, endpoint)
  yield* startWorker(deps, endpoint)
  return endpoint
})

const updateEndpoint = Effect.fn("SandboxWebhooks.updateEndpoint")(function* (
  state: WebhookState,
  id: string,
  patch: {
    readonly url?: string | undefined
    readonly enabled?: boolean | undefined
    readonly eventTypes?: ReadonlyArray<string> | undefined
  }
) {
  const endpoint = yield* endpointById(state, id)
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
})

const reset = Effect.fnUntraced(function* (state: WebhookState) {
  state.generation++
  for (const id of Array.from(state.workers.keys())) yield* stopWorker(state, id)
  state.subscriptions.clear()
  state.endpoints.clear()
  state.pending.clear()
  state.messages = []
  state.deliveries = []
})

const makeDeps = Effect.gen(function* () {
  const fibers = yield* FiberSet.make()
  const sandboxContext = yield* Effect.context<never>()
  const state: WebhookState = {
    subscriptions: new Map(),
    endpoints: new Map(),
    workers: new Map(),
    pending: new Map(),
    messages: [],
    deliveries: [],
    deliverySeq: 0,
    counter: 0,
    generation: 0,
    preparing: yield* Queue.unbounded<Message>()
  }
  return {
    options: yield* SandboxConfig,
    clock: yield* SandboxClock,
    store: yield* SandboxStore,
    auth: yield* SandboxAuth,
    faults: yield* SandboxFaults,
    sender: yield* SandboxWebhookSender,
    background: (effect) => FiberSet.run(fibers, Effect.provideContext(effect, sandboxContext)),
    state
  } satisfies WebhookDeps
})

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
      const deps = yield* makeDeps
      const state = deps.state
      yield* startPreparation(deps)
      yield* deps.clock.onAdvance(flushPending(deps, false))
      return SandboxWebhooks.of({
        subscribe: Effect.fn("SandboxWebhooks.subscribe")(function* (key) {
          const existing = state.subscriptions.get(keyOf(key))
          if (existing !== undefined) return { subscription: existing, created: false }
          const subscription: Subscription = { id: nextId(state, "sub"), ...key, createdAt: yield* deps.clock.now }
          state.subscriptions.set(keyOf(key), subscription)
          return { subscription, created: true }
        }),
        unsubscribe: (key) => Effect.sync(() => void state.subscriptions.delete(keyOf(key))),
        subscriptions: Effect.sync(() => [...state.subscriptions.values()]),
        removeApp: (clientId) => removeApp(state, clientId),
        registerEndpoint: (input) => registerEndpoint(deps, input),
        updateEndpoint: (id, patch) => updateEndpoint(state, id, patch),
        removeEndpoint: Effect.fn("SandboxWebhooks.removeEndpoint")(function* (id) {
          yield* endpointById(state, id)
          state.endpoints.delete(id)
          yield* stopWorker(state, id)
        }),
        endpoints: Effect.sync(() => [...state.endpoints.values()]),
        emit: (type, subject) => submit(deps, type, subject, []),
        clientChanged: (subject, fields) => clientChanged(deps, subject, fields),
        flushDebounce: flushPending(deps, true),
        messages: (filter = {}) => Effect.sync(() => filterBy(state.messages, filter)),
        deliveries: (filter = {}) =>
          Effect.sync(() =>
            filterBy(state.deliveries, filter).filter(
              (delivery) =>
                (filter.endpointId === undefined || delivery.endpoint_id === filter.endpointId) &&
                (filter.since === undefined || delivery.seq > filter.since)
            )
          ),
        lastDeliverySeq: Effect.sync(() => state.deliverySeq),
        clearLogs: Effect.sync(() => {
          state.messages = []
          state.deliveries = []
        }),
        reset: reset(state)
      })
    })
  )
}
