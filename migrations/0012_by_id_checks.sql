-- When reconciliation last read a record of a by-id resource (tasks, meetings, notes: the API has
-- no listing of them, spec §4) through its single-record read, per connection. A run checks the
-- least recently checked first, so successive runs within their allowance cover every known id.
-- Forward-only: never edit once landed.
CREATE TABLE crm_sync.by_id_checks (
  connection text NOT NULL,
  resource text NOT NULL,
  id text NOT NULL,
  checked_at timestamptz NOT NULL,
  -- What the last read found: 'current', 'repaired', 'deleted', 'rejected' or 'unreadable'.
  outcome text NOT NULL,
  PRIMARY KEY (connection, resource, id)
);
CREATE INDEX by_id_checks_oldest ON crm_sync.by_id_checks (connection, checked_at);
