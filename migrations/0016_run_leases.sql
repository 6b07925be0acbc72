-- The lease a job run or crawl run was taken under. A run still `running` whose lease nobody holds
-- belongs to a process that died (kill -9, a lost host, a database restart that dropped its
-- session): the daemon's orphan sweep takes that lease and marks such runs `interrupted` within a
-- minute, and the next crawl of the resource (scheduled or backfill) resumes the crawl run where it
-- stopped. Forward-only: never edit once landed.
ALTER TABLE crm_sync.job_runs ADD COLUMN lease text;
ALTER TABLE crm_sync.crawl_runs ADD COLUMN lease text;
ALTER TABLE crm_sync.crawl_runs DROP CONSTRAINT crawl_runs_status_check;
ALTER TABLE crm_sync.crawl_runs ADD CONSTRAINT crawl_runs_status_check
  CHECK (status IN ('running', 'complete', 'failed', 'aborted', 'interrupted'));
CREATE INDEX job_runs_running ON crm_sync.job_runs (lease) WHERE status = 'running';
