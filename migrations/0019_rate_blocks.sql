-- A 429's block, kept apart from its bucket's window row. Every permit locks that row, and under
-- load many permits queue on its lock: a block written there waited behind them, and the permits
-- ahead of it were granted and sent into the block (the chaos suite, seed 2246914551: requests
-- up to a second into a block another replica had received). Written here, it waits for no one,
-- and a permit reads it once it holds the row (docs/client-and-budget.md). rate_windows keeps its
-- own blocked_until too (status, the learned ceiling). Forward-only: never edit once landed.
CREATE TABLE crm_sync.rate_blocks (
  bucket text PRIMARY KEY,
  blocked_until timestamptz NOT NULL
);
COMMENT ON TABLE crm_sync.rate_blocks IS
  'The latest 429 block of each rate bucket, written at once for every process (RateBudget).';
COMMENT ON COLUMN crm_sync.rate_blocks.bucket IS 'The bucket key, as in rate_windows.';
COMMENT ON COLUMN crm_sync.rate_blocks.blocked_until IS 'No permit of the bucket is granted before this (the database''s clock).';
