-- Records that failed to decode (or that PostgreSQL refused), kept with their error rather than
-- dropped (DESIGN.md: "a record that fails to decode is stored in raw with the error recorded,
-- and the run goes on"). The same bad record seen again (every poll sees it until it changes)
-- bumps `occurrences` and `last_seen_at` instead of adding a row: the fingerprint is the md5 of
-- the canonical jsonb text. Forward-only: never edit once landed.

CREATE SCHEMA IF NOT EXISTS crm_sync;

CREATE TABLE crm_sync.undecodable_records (
  id bigserial PRIMARY KEY,
  -- The warehouse resource (table name in schema crm) the record was meant for.
  resource text NOT NULL,
  -- The record's id when it had a usable one.
  record_id text,
  -- The record as received. Characters jsonb cannot hold (NUL, unpaired surrogates) are replaced
  -- with U+FFFD, and the error says so.
  raw jsonb NOT NULL,
  fingerprint text GENERATED ALWAYS AS (md5(raw::text)) STORED,
  error text NOT NULL,
  source text NOT NULL CHECK (source IN ('poll', 'crawl', 'webhook', 'write', 'backfill', 'reconcile')),
  occurrences integer NOT NULL DEFAULT 1,
  first_seen_at timestamptz NOT NULL DEFAULT now(),
  last_seen_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (resource, fingerprint)
);
CREATE INDEX undecodable_records_record ON crm_sync.undecodable_records (resource, record_id);
CREATE INDEX undecodable_records_last_seen ON crm_sync.undecodable_records (last_seen_at);
