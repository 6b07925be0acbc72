-- What the rate budget has learned of other consumers (spec §8 gives no header that says how much
-- of a bucket is left): a 429 that came while crm-sync's own count in the window was below the
-- configured limit means the others spent the difference, and `learned_limit` is the ceiling
-- crm-sync budgets to in later windows (every process: they all read this row). It rises a step
-- every `probe_wait` clean windows (a departed co-tenant's share is won back; each probe that meets
-- a 429 doubles the wait) and is forgotten `budget.learned_ceiling_ttl` after `learned_at`.
-- Forward-only: never edit once landed.
ALTER TABLE crm_sync.rate_windows
  ADD COLUMN learned_limit integer,
  ADD COLUMN learned_at timestamptz,
  ADD COLUMN probe_wait integer NOT NULL DEFAULT 1,
  ADD COLUMN clean_windows integer NOT NULL DEFAULT 0;
