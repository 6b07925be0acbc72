/**
 * The checks every history table (crm_history, docs/history.md) must pass, as SQL: used by the
 * history's integration test and by the chaos verdict (test/chaos/verdict.ts). Each query returns
 * `{id, problem}` rows, none when the table is sound:
 * - versions of an id chain without gap or overlap (each ends where the next begins), and only the
 *   last is current, open-ended;
 * - (the current version is the current row by construction: the view shows the row itself);
 * - no version repeats the one before it (same content, same deletion).
 */
export const HISTORY_TABLES = [
  "annuity_contracts",
  "businesses",
  "clients",
  "financial_accounts",
  "households"
] as const

export const historyProblems = (table: (typeof HISTORY_TABLES)[number]) => `
  SELECT id, problem FROM (
    SELECT id,
      CASE
        WHEN valid_to IS DISTINCT FROM next_from THEN 'versions with a gap or an overlap at ' || valid_from::text
        WHEN is_current <> (next_from IS NULL) THEN 'a current flag on other than the last version'
        WHEN content_hash IS NOT DISTINCT FROM previous_hash AND deleted = previous_deleted
          THEN 'a version repeating the one before at ' || valid_from::text
      END AS problem
    FROM (
      SELECT id, valid_from, valid_to, is_current, deleted, content_hash,
        lead(valid_from) OVER w AS next_from,
        lag(content_hash) OVER w AS previous_hash,
        lag(deleted) OVER w AS previous_deleted
      FROM crm_history.${table}
      WINDOW w AS (PARTITION BY id ORDER BY valid_from)
    ) AS v
  ) AS p WHERE problem IS NOT NULL`
