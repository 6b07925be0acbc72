-- When an outbox row was first sent: an idempotency key lives 1 hour on the CRM (spec §4 rule 6,
-- §8), so a row whose outcome is unknown after that long cannot be retried blindly.
ALTER TABLE crm_sync.outbox ADD COLUMN first_attempt_at timestamptz;
