-- crm-sync's own bookkeeping (schema crm_sync): the webhook inbox, the firm's outbox, the shared
-- rate-limit windows, poll cursors, crawl and job history, reconciliation reports and the stored
-- OAuth credentials. Forward-only: never edit once landed; add a new numbered file instead.

CREATE SCHEMA IF NOT EXISTS crm_sync;

-- One row per accepted webhook delivery, keyed by the delivery's hook-id (spec §6.1: process
-- idempotently using hook-id). The body is kept byte for byte as it was signed, and parsed by the
-- processor rather than stored as jsonb: a body jsonb would refuse (a \u0000 escape) must not fail
-- the group-commit INSERT that carries other deliveries with it. `event_type` is the body's own,
-- else the endpoint's fixed type (spec §6.3: some events carry none). A row is leased to one
-- processor by `locked_by`/`locked_at` (FOR UPDATE SKIP LOCKED); `attempts` counts claims.
CREATE TABLE crm_sync.webhook_inbox (
  hook_id text PRIMARY KEY,
  endpoint text NOT NULL,
  event_type text,
  body bytea NOT NULL,
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'processed', 'failed', 'dead', 'unhandled')),
  attempts integer NOT NULL DEFAULT 0,
  last_error text,
  received_at timestamptz NOT NULL DEFAULT now(),
  next_attempt_at timestamptz NOT NULL DEFAULT now(),
  locked_by text,
  locked_at timestamptz,
  processed_at timestamptz
);
CREATE INDEX webhook_inbox_claim ON crm_sync.webhook_inbox (next_attempt_at) WHERE status IN ('pending', 'failed');
CREATE INDEX webhook_inbox_prune ON crm_sync.webhook_inbox (processed_at) WHERE status IN ('processed', 'unhandled');
CREATE INDEX webhook_inbox_leases ON crm_sync.webhook_inbox (locked_at) WHERE locked_by IS NOT NULL;
CREATE INDEX webhook_inbox_dead ON crm_sync.webhook_inbox (received_at) WHERE status = 'dead';

-- Wake idle processors once per INSERT statement that stored work (the intake writes many rows
-- per statement); the notification is delivered on commit, so a woken processor sees the rows.
CREATE FUNCTION crm_sync.notify_webhook_inbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM inserted WHERE status = 'pending') THEN
    PERFORM pg_notify('crm_sync_webhook_inbox', '');
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER webhook_inbox_notify AFTER INSERT ON crm_sync.webhook_inbox
  REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION crm_sync.notify_webhook_inbox();

-- The firm's writes to push to the CRM. A firm inserts (operation, payload); crm-sync owns the rest.
CREATE TABLE crm_sync.outbox (
  id bigserial PRIMARY KEY,
  connection text,
  operation text NOT NULL,
  payload jsonb NOT NULL,
  idempotency_key uuid NOT NULL DEFAULT gen_random_uuid() UNIQUE,
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'in_flight', 'succeeded', 'failed', 'needs_review')),
  attempts integer NOT NULL DEFAULT 0,
  record_id text,
  response jsonb,
  error text,
  next_attempt_at timestamptz NOT NULL DEFAULT now(),
  locked_by text,
  locked_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  completed_at timestamptz
);
CREATE INDEX outbox_claim ON crm_sync.outbox (next_attempt_at) WHERE status IN ('pending', 'in_flight');

-- Wake idle workers when work arrives (LISTEN/NOTIFY), whoever inserted it.
CREATE FUNCTION crm_sync.notify_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('crm_sync_outbox', NEW.id::text);
  RETURN NULL;
END
$$;
CREATE TRIGGER outbox_notify AFTER INSERT ON crm_sync.outbox FOR EACH ROW EXECUTE FUNCTION crm_sync.notify_outbox();

-- One row per rate-limit bucket of spec §8 (token/user, company/app, IP). Every process on this
-- database draws on the same rows, so a backfill and a daemon together never exceed a limit.
CREATE TABLE crm_sync.rate_windows (
  bucket text PRIMARY KEY,
  scope text NOT NULL CHECK (scope IN ('token', 'company', 'ip')),
  request_limit integer NOT NULL,
  window_ms bigint NOT NULL,
  window_start timestamptz,
  used integer NOT NULL DEFAULT 0,
  blocked_until timestamptz,
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- Poll cursors, one row per (connection, resource).
CREATE TABLE crm_sync.cursors (
  connection text NOT NULL,
  resource text NOT NULL,
  cursor timestamptz,
  state jsonb NOT NULL DEFAULT '{}'::jsonb,
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (connection, resource)
);

-- One row per full-page crawl; pages read so far let an interrupted crawl resume.
CREATE TABLE crm_sync.crawl_runs (
  id bigserial PRIMARY KEY,
  connection text NOT NULL,
  resource text NOT NULL,
  source text NOT NULL DEFAULT 'crawl',
  status text NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'complete', 'failed', 'aborted')),
  started_at timestamptz NOT NULL DEFAULT now(),
  finished_at timestamptz,
  last_page integer NOT NULL DEFAULT 0,
  total_pages integer,
  total_count integer,
  seen integer NOT NULL DEFAULT 0,
  inserted integer NOT NULL DEFAULT 0,
  updated integer NOT NULL DEFAULT 0,
  unchanged integer NOT NULL DEFAULT 0,
  deleted integer NOT NULL DEFAULT 0,
  undeleted integer NOT NULL DEFAULT 0,
  note text,
  error text
);
CREATE INDEX crawl_runs_by_resource ON crm_sync.crawl_runs (connection, resource, id DESC);

-- Every scheduled or one-shot job run (poll, crawl, backfill, reconcile, prune).
CREATE TABLE crm_sync.job_runs (
  id bigserial PRIMARY KEY,
  job text NOT NULL,
  connection text,
  status text NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'succeeded', 'failed', 'interrupted')),
  started_at timestamptz NOT NULL DEFAULT now(),
  finished_at timestamptz,
  requests integer NOT NULL DEFAULT 0,
  detail jsonb NOT NULL DEFAULT '{}'::jsonb,
  error text
);
CREATE INDEX job_runs_by_job ON crm_sync.job_runs (job, id DESC);

CREATE TABLE crm_sync.reconciliation_reports (
  id bigserial PRIMARY KEY,
  connection text NOT NULL,
  started_at timestamptz NOT NULL DEFAULT now(),
  finished_at timestamptz,
  status text NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'complete', 'partial', 'failed')),
  requests integer NOT NULL DEFAULT 0,
  report jsonb NOT NULL DEFAULT '{}'::jsonb
);

-- OAuth credentials per connection, encrypted at rest (AES-256-GCM, connection name as
-- associated data). The refresh lock is this row's FOR UPDATE. `user_id` is the CRM user the
-- grant belongs to (GET /v1/me at connect): spec §8 counts an OAuth app's requests per user, so
-- connections of one user to several companies (§5.4) share one rate bucket.
CREATE TABLE crm_sync.credentials (
  connection text PRIMARY KEY,
  access_token bytea,
  refresh_token bytea,
  access_expires_at timestamptz,
  user_id text,
  needs_reauthorization boolean NOT NULL DEFAULT false,
  last_error text,
  updated_at timestamptz NOT NULL DEFAULT now()
);
