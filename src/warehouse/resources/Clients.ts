/**
 * Clients (spec §2.9, §6.3), known only from client.created and client.updated events, and the
 * history of their changed fields. Client events write field by field (ClientWrites.ts:
 * `changed_fields`, `field_signed_at`), not through the snapshot upsert of BatchSql.ts; the
 * descriptor gives their model and typed columns.
 */
import * as Models from "../../crm/Models.ts"
import { column, define, table } from "./Declaration.ts"
import { bookId, versionFrom } from "./Shared.ts"

export const clients = define<Models.Client>({
  table: "clients",
  comment: "Clients as delivered in client.created and client.updated events (spec §2.9, §6.3).",
  schema: Models.Client,
  fields: {
    book_id: bookId,
    name: column("text", "The client's name."),
    status: column("text", "Client status."),
    tier: column("text", "Client tier; may be null."),
    aum: column("numeric", "Assets under management; may be null."),
    became_client_at: column("timestamptz", "When the record became a client; may be null."),
    type: column("text", "The record kind (for a client, client).")
  },
  other: {
    ...versionFrom("clients"),
    field_signed_at: column(
      "jsonb",
      "Per field of raw, the first signed time (hook-timestamp, ISO 8601) of the client.updated that last wrote it: a delivery writes a field it names in changed_fields only when its time is not older than the one held here. Fields absent here were filled from a snapshot that did not name them (a client.created, or an update naming other fields) and take the next update that names them. Null while only a client.created was applied."
    )
  },
  common: {
    updated_at:
      "The latest first signed time (hook-timestamp) of the client.updated deliveries applied: client events carry no updated_at (spec §2.9). Which fields each delivery wrote, and when, is in field_signed_at. Null while only a client.created was applied: a creation stands for no time."
  }
})

/** One row per client.updated delivery (WarehouseWrites.recordClientChanges), keyed by hook-id. */
export const clientChanges = table({
  table: "client_changes",
  comment: "History of client.updated events: changed_fields per delivery (spec §6.3).",
  primaryKey: ["hook_id"],
  columns: {
    hook_id: column("text", "The delivery's hook id (one row per delivery).", { notNull: true }),
    client_id: column("text", "The client that changed: clients.id.", { notNull: true }),
    changed_fields: column("text[]", "Names of the fields the event says changed (spec §6.3 changed_fields).", {
      notNull: true
    }),
    subscription_id: column("text", "The webhook subscription that delivered the event."),
    book_id: bookId,
    received_at: column("timestamptz", "When crm-sync received the delivery.", { notNull: true }),
    synced_at: column("timestamptz", "When crm-sync last wrote this row.", { notNull: true })
  }
})
