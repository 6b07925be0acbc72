-- Deletion-by-absence bookkeeping by the batch instead of by the record (src/sync/CrawlRuns.ts,
-- docs/sync.md). `crawl_presence` took one row write per record per crawl, a fifth of the database
-- time of a crawl; now a stored batch adds one row holding its ids, and the set arithmetic runs
-- once, when a clean crawl finishes. Forward-only: never edit once landed.

-- The ids each stored batch of a crawl received, one row per batch. A clean finish keeps its own
-- run's rows (what the next clean finish compares with) and drops those of every earlier run.
CREATE TABLE crm_sync.crawl_sightings (
  run_id bigint NOT NULL REFERENCES crm_sync.crawl_runs (id) ON DELETE CASCADE,
  ids text[] NOT NULL
);
CREATE INDEX crawl_sightings_run ON crm_sync.crawl_sightings (run_id);

-- Tracked records that clean crawls of a connection missed, and how many clean crawls in a row
-- missed them: at 2 a record is a deletion candidate. A record listed again leaves this table.
CREATE TABLE crm_sync.crawl_misses (
  connection text NOT NULL,
  resource text NOT NULL,
  id text NOT NULL,
  misses integer NOT NULL CHECK (misses > 0),
  PRIMARY KEY (connection, resource, id)
);

-- What `crawl_presence` knew, carried over: a record not missed since it was last seen becomes a
-- sighting of the run that saw it (of the newest run of its connection and resource if that run
-- is gone), a missed one keeps its count.
INSERT INTO crm_sync.crawl_sightings (run_id, ids)
SELECT run_id, array_agg(id ORDER BY id)
FROM (
  SELECT p.id, COALESCE(
    (SELECT r.id FROM crm_sync.crawl_runs r WHERE r.id = p.last_seen_run),
    (SELECT max(r.id) FROM crm_sync.crawl_runs r WHERE r.connection = p.connection AND r.resource = p.resource)
  ) AS run_id
  FROM crm_sync.crawl_presence p
  WHERE p.misses = 0
) AS seen
WHERE run_id IS NOT NULL
GROUP BY run_id;

INSERT INTO crm_sync.crawl_misses (connection, resource, id, misses)
SELECT connection, resource, id, misses FROM crm_sync.crawl_presence WHERE misses > 0;

DROP TABLE crm_sync.crawl_presence;

-- A crawl undeletes the records of each batch that are marked deleted: these indexes hold only
-- those (few) rows, so asking costs next to nothing.
CREATE INDEX businesses_deleted ON crm.businesses (id) WHERE deleted_at IS NOT NULL;
CREATE INDEX annuity_contracts_deleted ON crm.annuity_contracts (id) WHERE deleted_at IS NOT NULL;
CREATE INDEX financial_accounts_deleted ON crm.financial_accounts (id) WHERE deleted_at IS NOT NULL;
CREATE INDEX books_deleted ON crm.books (id) WHERE deleted_at IS NOT NULL;
CREATE INDEX project_templates_deleted ON crm.project_templates (id) WHERE deleted_at IS NOT NULL;
