-- The time each delivery was signed (its hook-timestamp, verified by the intake), so events whose
-- records carry no updated_at of their own (clients, spec §2.9) can be ordered by it instead of
-- by arrival. Null for rows stored before this column existed. Forward-only: never edit once landed.
ALTER TABLE crm_sync.webhook_inbox ADD COLUMN signed_at timestamptz;
