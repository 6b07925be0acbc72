-- Clients field by field (issue 32, docs/decisions.md "Client snapshots"): a client.updated
-- writes only the fields its changed_fields names, each ordered by its own time, and fills the
-- fields the stored client never had; a client.created only fills. field_signed_at holds, per
-- field, the first signed time of the delivery that last wrote it.
--
-- Rows stored before this held whole snapshots ordered by updated_at: each of their fields stands
-- for that time, so an older update arriving late still cannot undo them. Rows stored only from a
-- client.created (updated_at null) stand for no time and get none. crm.current_clients is
-- recreated with the new column (SELECT * is expanded when a view is made, migration 0018).
-- Forward-only: never edit once landed.
ALTER TABLE crm.clients ADD COLUMN field_signed_at jsonb;

UPDATE crm.clients AS c
SET field_signed_at = (
  SELECT jsonb_object_agg(k.key, to_char(c.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
  FROM jsonb_object_keys(c.raw) AS k(key)
  WHERE k.key <> 'id'
)
WHERE c.updated_at IS NOT NULL AND jsonb_typeof(c.raw) = 'object';

COMMENT ON COLUMN crm.clients."field_signed_at" IS 'Per field of raw, the first signed time (hook-timestamp, ISO 8601) of the client.updated that last wrote it: a delivery writes a field it names in changed_fields only when its time is not older than the one held here. Fields absent here were filled from a snapshot that did not name them (a client.created, or an update naming other fields) and take the next update that names them. Null while only a client.created was applied.';
COMMENT ON COLUMN crm.clients."updated_at" IS 'The latest first signed time (hook-timestamp) of the client.updated deliveries applied: client events carry no updated_at (spec §2.9). Which fields each delivery wrote, and when, is in field_signed_at. Null while only a client.created was applied: a creation stands for no time.';

SELECT crm_sync.refresh_current_views();
