-- Read-sync bookkeeping (src/sync, docs/sync.md): which crawl last saw each record, so that a
-- record absent from two consecutive clean crawls can be marked deleted, and a little more detail
-- per crawl run. Forward-only: never edit once landed; add a new numbered file instead.

-- One row per (connection, resource, record) that a crawl of that connection has seen. A sighting
-- (in any crawl, even one that later fails) sets `last_seen_run` and clears `misses`; a crawl that
-- read every page without error adds one to `misses` of every row it did not see. A row whose
-- misses reach 2 is a deletion candidate; once its record is marked deleted the row goes, and a
-- later sighting starts it afresh (and undeletes the record).
CREATE TABLE crm_sync.crawl_presence (
  connection text NOT NULL,
  resource text NOT NULL,
  id text NOT NULL,
  last_seen_run bigint NOT NULL,
  misses integer NOT NULL DEFAULT 0,
  PRIMARY KEY (connection, resource, id)
);
-- The end of a clean crawl looks up the rows it did not see: last_seen_run < this run.
CREATE INDEX crawl_presence_absent ON crm_sync.crawl_presence (connection, resource, last_seen_run);
CREATE INDEX crawl_presence_candidates ON crm_sync.crawl_presence (connection, resource) WHERE misses >= 2;

-- Per crawl run: requests spent, records seen twice within the run (pages that drifted under the
-- crawl), pages read again to recover records shifted across a page boundary, records absent,
-- and when it last made progress (the page written last).
ALTER TABLE crm_sync.crawl_runs
  ADD COLUMN requests integer NOT NULL DEFAULT 0,
  ADD COLUMN duplicates integer NOT NULL DEFAULT 0,
  ADD COLUMN rechecks integer NOT NULL DEFAULT 0,
  ADD COLUMN absent integer NOT NULL DEFAULT 0,
  ADD COLUMN progressed_at timestamptz;
-- A resumed crawl looks for its source's unfinished run.
CREATE INDEX crawl_runs_running ON crm_sync.crawl_runs (connection, resource, source) WHERE status = 'running';
