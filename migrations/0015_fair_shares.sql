-- Fair shares of a bucket several connections draw on (one egress address, one app): per window,
-- how many requests each connection (by its token bucket) took, and how many connections drew on
-- the bucket in the window before. Until late in a window no connection takes more than an even
-- share; what others leave is free after that. And `learned_base`: the ceiling as the last 429 set
-- it, before probing raised it (permits above it are spaced, so a probe that goes too far costs
-- one request, not a burst). Forward-only: never edit once landed.
ALTER TABLE crm_sync.rate_windows
  ADD COLUMN shares jsonb NOT NULL DEFAULT '{}'::jsonb,
  ADD COLUMN prev_consumers integer NOT NULL DEFAULT 0,
  ADD COLUMN learned_base integer;
