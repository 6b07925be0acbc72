/**
 * The webhook machinery's types (events, subscriptions, endpoints, messages, deliveries, and the
 * state and services it works with), shared by Webhooks.ts and WebhookDelivery.ts.
 */
import type { Effect, Fiber, Queue } from "effect"
import type { SandboxAuth } from "./Auth.ts"
import type { SandboxFaults } from "./Faults.ts"
import type { SandboxConfig } from "./Options.ts"
import type { SandboxClock } from "./SandboxClock.ts"
import type { SandboxStore } from "./Store.ts"
import type { SandboxWebhookSender } from "./WebhookSender.ts"

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

export interface Message {
  readonly record: MessageRecord
  readonly subject: Subject
  readonly changedFields: ReadonlyArray<string>
  readonly submittedAtMs: number
  readonly generation: number
}

export type EndpointItem =
  { readonly kind: "deliver"; readonly message: Message } | { readonly kind: "release"; readonly message: Message }

export interface EndpointWorker {
  readonly queue: Queue.Queue<EndpointItem>
  readonly fiber: Fiber.Fiber<unknown, unknown>
}

export interface Pending {
  readonly subject: Subject
  readonly fields: Array<string>
  readonly deadline: number
}

/** Everything the webhook machinery holds; `reset` empties it and bumps the generation. */
export interface WebhookState {
  readonly subscriptions: Map<string, Subscription>
  readonly endpoints: Map<string, Endpoint>
  readonly workers: Map<string, EndpointWorker>
  /** Open `client.updated` debounce windows, by client id. */
  readonly pending: Map<string, Pending>
  messages: Array<MessageRecord>
  deliveries: Array<DeliveryRecord>
  deliverySeq: number
  counter: number
  /** Messages of an older generation (before a reset) are dropped wherever they are. */
  generation: number
  /** Submitted messages waiting for their snapshot, in submission order. */
  readonly preparing: Queue.Queue<Message>
}

export interface WebhookDeps {
  readonly options: SandboxConfig["Service"]
  readonly clock: SandboxClock["Service"]
  readonly store: SandboxStore["Service"]
  readonly auth: SandboxAuth["Service"]
  readonly faults: SandboxFaults["Service"]
  readonly sender: SandboxWebhookSender["Service"]
  /**
   * Runs background work with the sandbox's own services (its live clock), whichever fiber
   * started it: an admin call from a test must not hand its TestClock to a delivery.
   */
  readonly background: <A, E>(effect: Effect.Effect<A, E>) => Effect.Effect<Fiber.Fiber<A, E>>
  readonly state: WebhookState
}
