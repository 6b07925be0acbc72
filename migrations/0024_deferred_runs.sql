-- A job run that gave its worker back to wait on the rate budget (a permit minutes off) ends
-- `deferred`: not a failure, not done. The scheduler puts the job back due when the permit is, and
-- the next run resumes a crawl where this one stopped. Forward-only: never edit once landed.
ALTER TABLE crm_sync.job_runs DROP CONSTRAINT job_runs_status_check;
ALTER TABLE crm_sync.job_runs ADD CONSTRAINT job_runs_status_check
  CHECK (status IN ('running', 'succeeded', 'failed', 'interrupted', 'deferred'));
COMMENT ON COLUMN crm_sync.job_runs.status IS
  'running, succeeded, failed, interrupted (SIGTERM, or its process died) or deferred (it gave its worker back to wait on the rate budget; the job resumes when the permit is due)';
