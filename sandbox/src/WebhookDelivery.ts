/**
 * Delivery of submitted webhook messages (spec §6): one preparation fiber builds each message's
 * snapshot in submission order, once its preparation delay has passed, and hands it to one worker
 * per endpoint, which delivers in that order and retries non-2xx answers along the configured
 * schedule. Webhook faults act here: delay, reorder (a message held back until after the next),
 * duplicate, and fail (the first attempts fail, unsent or with their answer lost). A reset bumps the generation, and messages of an older one are dropped.
 */
import { Cause, Duration, Effect, Queue } from "effect"
import type { World } from "./World.ts"
import { iso } from "./SandboxClock.ts"
import { clientApi, meetingSnapshot, noteApi, prospectApi, taskApi } from "./Serializers.ts"
import type { WebhookFault } from "./Faults.ts"
import type { SendResult } from "./WebhookSender.ts"
import type { DeliveryRecord, Endpoint, EndpointItem, Message, WebhookDeps } from "./WebhookTypes.ts"

/** A bug in one message must not stop the loops that serve all the others (interruption still does). */
const keepGoing = (stage: string) =>
  Effect.catchCauseIf(
    (cause: Cause.Cause<unknown>) => !Cause.hasInterrupts(cause),
    (cause) => Effect.logError(`sandbox webhook ${stage} failed; skipping the message`, cause)
  )

const contextOf = (world: World, message: Message) => ({
  subscription_id: message.record.subscription_id,
  user_id: message.record.user_id,
  book_id: message.record.book_id,
  company_id: world.companies[world.books[message.subject.book]!.company]!.id
})

/** The body of §6.3 for this message, from the records as they are now. */
export const payloadOf = (world: World, message: Message): unknown => {
  const type = message.record.event_type
  const subject = message.subject
  const ctx = contextOf(world, message)
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

/** Appends the attempt to the delivery log (a ring of about `logSize`); whether it was delivered. */
const record = (
  deps: WebhookDeps,
  message: Message,
  endpoint: Endpoint,
  attempt: { readonly n: number; readonly duplicate: boolean },
  result: SendResult
) => {
  const { options, state } = deps
  const delivered = result.status !== null && result.status >= 200 && result.status < 300
  const entry: DeliveryRecord = {
    seq: ++state.deliverySeq,
    message_id: message.record.id,
    endpoint_id: endpoint.id,
    url: endpoint.url,
    event_type: message.record.event_type,
    attempt: attempt.n,
    duplicate: attempt.duplicate,
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
      : attempt.duplicate || attempt.n > options.webhookRetryScheduleMs.length
        ? "failed"
        : "retrying"
  }
  state.deliveries.push(entry)
  if (state.deliveries.length > options.logSize * 1.25) state.deliveries = state.deliveries.slice(-options.logSize)
  return delivered
}

type Failing = Extract<WebhookFault, { readonly kind: "webhook_fail" }> | undefined

/** What a `webhook_fail` fault makes of attempt `n`: unsent, or sent with its answer lost. */
const failed = Effect.fnUntraced(function* (
  deps: WebhookDeps,
  fault: NonNullable<Failing>,
  send: Effect.Effect<SendResult>
) {
  const status = fault.status ?? 503
  if (fault.reach === "receiver") {
    const result = yield* send
    return { ...result, status, error: `webhook_fail fault: the receiver answered ${String(result.status)}, lost` }
  }
  const sentAt = yield* deps.clock.wallNow
  const result: SendResult = {
    status,
    error: "webhook_fail fault: not sent",
    headers: {},
    responseBody: null,
    durationMs: 0,
    sentAt
  }
  return result
})

/** Attempt `n`; true when delivered, or when a reset made the message moot. */
const attempt = (
  deps: WebhookDeps,
  message: Message,
  endpoint: Endpoint,
  n: number,
  duplicate = false,
  fail?: Failing
) =>
  Effect.gen(function* () {
    if (message.generation !== deps.state.generation) return true
    const send = deps.sender.send({
      url: endpoint.url,
      secret: endpoint.secret,
      messageId: message.record.id,
      payload: message.record.payload ?? ""
    })
    const result = fail !== undefined && n <= (fail.attempts ?? 1) ? yield* failed(deps, fail, send) : yield* send
    // a reset while the request was in flight: its outcome belongs to the old log
    if (message.generation !== deps.state.generation) return true
    return record(deps, message, endpoint, { n, duplicate }, result)
  })

/** First attempt now; later attempts in the background along the retry schedule. */
const deliver = Effect.fnUntraced(function* (deps: WebhookDeps, message: Message, endpoint: Endpoint, fail?: Failing) {
  const delivered = yield* attempt(deps, message, endpoint, 1, false, fail)
  const schedule = deps.options.webhookRetryScheduleMs
  if (delivered || schedule.length === 0) return
  yield* deps.background(
    Effect.gen(function* () {
      for (const [i, delay] of schedule.entries()) {
        yield* Effect.sleep(Duration.millis(delay))
        if (!deps.state.endpoints.has(endpoint.id)) return
        if (yield* attempt(deps, message, endpoint, i + 2, false, fail)) return
      }
    })
  )
})

/** A message held back by `webhook_reorder`, sent right after the next one (or on release). */
interface Held {
  message: Message | undefined
  /** The `webhook_fail` fault the held message drew, which still applies when it goes. */
  fail: Failing
}

/** One message taken from the endpoint's queue, with the delivery faults that apply to it. */
const deliverWithFaults = Effect.fnUntraced(function* (
  deps: WebhookDeps,
  endpoint: Endpoint,
  queue: Queue.Queue<EndpointItem>,
  held: Held,
  message: Message
) {
  if (message.generation !== deps.state.generation) return
  const applied = yield* deps.faults.forDelivery(message.record.event_type, message.record.record_id)
  const fail = applied.find((fault) => fault.kind === "webhook_fail") as Failing
  const delay = applied.find((fault) => fault.kind === "webhook_delay")
  if (delay !== undefined && delay.kind === "webhook_delay") {
    yield* deps.background(
      Effect.andThen(Effect.sleep(Duration.millis(delay.ms)), deliver(deps, message, endpoint, fail))
    )
    return
  }
  if (applied.some((fault) => fault.kind === "webhook_reorder") && held.message === undefined) {
    held.message = message
    held.fail = fail
    yield* deps.background(
      Effect.andThen(
        Effect.sleep(Duration.millis(deps.options.webhookReorderHoldMs)),
        Queue.offer(queue, { kind: "release", message })
      )
    )
    return
  }
  yield* deliver(deps, message, endpoint, fail)
  if (applied.some((fault) => fault.kind === "webhook_duplicate")) yield* attempt(deps, message, endpoint, 1, true)
  if (held.message !== undefined) {
    const release = held.message
    held.message = undefined
    yield* deliver(deps, release, endpoint, held.fail)
  }
})

/** Starts the endpoint's worker: its queue, served in order by one fiber. */
export const startWorker = Effect.fnUntraced(function* (deps: WebhookDeps, endpoint: Endpoint) {
  const queue = yield* Queue.unbounded<EndpointItem>()
  const held: Held = { message: undefined, fail: undefined }
  const step = Effect.gen(function* () {
    const item = yield* Queue.take(queue)
    if (item.kind === "deliver") return yield* deliverWithFaults(deps, endpoint, queue, held, item.message)
    // the hold ran out before a next message came
    if (held.message === item.message) {
      held.message = undefined
      yield* deliver(deps, item.message, endpoint, held.fail)
    }
  })
  const fiber = yield* deps.background(Effect.forever(step.pipe(keepGoing("delivery"))))
  deps.state.workers.set(endpoint.id, { queue, fiber })
})

/** Preparation: one fiber, in submission order, so per-endpoint order follows submission order. */
export const startPreparation = (deps: WebhookDeps) =>
  deps.background(
    Effect.forever(
      Effect.gen(function* () {
        const message = yield* Queue.take(deps.state.preparing)
        const wait = message.submittedAtMs + deps.options.webhookPrepareDelayMs - (yield* deps.clock.wallNow)
        if (wait > 0) yield* Effect.sleep(Duration.millis(wait))
        if (message.generation !== deps.state.generation) return
        const world = yield* deps.store.world
        message.record.payload = JSON.stringify(payloadOf(world, message))
        message.record.prepared_at = iso(yield* deps.clock.now)
        for (const endpointId of message.record.endpoint_ids) {
          const worker = deps.state.workers.get(endpointId)
          if (worker !== undefined) yield* Queue.offer(worker.queue, { kind: "deliver", message })
        }
      }).pipe(keepGoing("preparation"))
    )
  )
