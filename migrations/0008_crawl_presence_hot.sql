-- Read-sync bookkeeping, lighter: every crawl sets `last_seen_run` on every record it reads, and an
-- index on that column made each of those updates write a new index entry (no heap-only update).
-- Its one reader, the end of a clean crawl, visits every row of its (connection, resource) anyway,
-- which the primary key's prefix serves. Forward-only: never edit once landed.
DROP INDEX crm_sync.crawl_presence_absent;
