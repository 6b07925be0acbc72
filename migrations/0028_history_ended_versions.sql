-- History, stored once (issue 29, docs/history.md, docs/decisions.md "The history keeps what the
-- rows no longer hold"): the current version of a record is its row in crm.<table>, so the history
-- stores only the versions that ended, in crm_history.<table>_ended, and crm_history.<table> becomes
-- a view of both with the same columns as before. A first crawl writes no version at all; a change
-- writes one (the version it ends), from a trigger on the row's UPDATE, in the same statement.
-- crm.<table>.version_from holds when the row's current version began (null until the row is first
-- updated: then deleted_at for a tombstone, else updated_at, else synced_at).
-- Forward-only: never edit once landed.

-- Which resources keep their ended versions (config history.resources, written by the warehouse
-- when a command starts); a resource without a row keeps them.
CREATE TABLE crm_sync.history_settings (
  resource text PRIMARY KEY,
  kept boolean NOT NULL
);
COMMENT ON TABLE crm_sync.history_settings IS 'Which resources keep the versions their rows no longer hold (config history.resources, written by crm-sync when a command starts); a resource without a row keeps them.';
COMMENT ON COLUMN crm_sync.history_settings.resource IS 'The resource: the table name in crm and crm_history.';
COMMENT ON COLUMN crm_sync.history_settings.kept IS 'false: a change of the row writes no version into crm_history.<resource>_ended.';

DROP VIEW crm_history.financial_account_balances_daily;

DO $$
DECLARE
  t text;
  col record;
  record_columns text;
  old_values text;
  view_columns text;
  current_values text;
  start text := 'COALESCE(r.version_from, CASE WHEN r.deleted_at IS NOT NULL THEN r.deleted_at ELSE COALESCE(r.updated_at, r.synced_at) END)';
BEGIN
  FOREACH t IN ARRAY ARRAY['annuity_contracts', 'businesses', 'clients', 'financial_accounts', 'households'] LOOP
    EXECUTE format('DROP FUNCTION crm_history.%I(timestamptz)', t || '_as_of');
    EXECUTE format('ALTER TABLE crm.%I ADD COLUMN version_from timestamptz', t);

    -- The current version of each row becomes the row itself: its start is kept in version_from.
    -- A current version that is not its row (history turned off while the row changed) ends where
    -- the row's own version begins.
    EXECUTE format($q$
      UPDATE crm.%1$I AS r SET version_from = CASE
          WHEN h.deleted = (r.deleted_at IS NOT NULL) AND (r.deleted_at IS NOT NULL OR h.content_hash IS NOT DISTINCT FROM md5(r.raw::text))
          THEN h.valid_from
          ELSE GREATEST(CASE WHEN r.deleted_at IS NOT NULL THEN r.deleted_at ELSE COALESCE(r.updated_at, r.synced_at) END,
                        h.valid_from + interval '1 microsecond')
        END
      FROM crm_history.%1$I AS h WHERE h.id = r.id AND h.is_current$q$, t);
    EXECUTE format($q$
      UPDATE crm_history.%1$I AS h SET valid_to = r.version_from, is_current = false
      FROM crm.%1$I AS r WHERE h.id = r.id AND h.is_current AND r.version_from <> h.valid_from$q$, t);
    EXECUTE format('DELETE FROM crm_history.%1$I AS h WHERE h.is_current AND EXISTS (SELECT FROM crm.%1$I AS r WHERE r.id = h.id)', t);
    EXECUTE format($q$UPDATE crm_history.%I SET valid_to = GREATEST(now(), valid_from + interval '1 microsecond'), is_current = false
      WHERE is_current$q$, t);

    EXECUTE format('ALTER TABLE crm_history.%I RENAME TO %I', t, t || '_ended');
    -- Fewer indexes to write per version: retention and status (versions ended in the last day)
    -- read the BRIN index on valid_to (0026), so the btree on valid_to and the BRIN on synced_at go.
    EXECUTE format('DROP INDEX crm_history.%I, crm_history.%I', t || '_closed', t || '_synced');
    -- Clients change with every client.updated and their history is read by id: their versions
    -- keep the primary key and BRIN, not the GiST index the as-of reads of large tables need.
    IF t = 'clients' THEN
      DROP INDEX crm_history.clients_valid;
    END IF;
    EXECUTE format('ALTER TABLE crm_history.%I DROP COLUMN is_current, ALTER COLUMN valid_to SET NOT NULL', t || '_ended');

    -- The record's columns of a version, in the table's order: from the row, or (a child list) from its raw.
    SELECT string_agg(quote_ident(h.attname), ', ' ORDER BY h.attnum),
           string_agg(CASE WHEN r.attname IS NULL THEN format('OLD.raw -> %L', h.attname) ELSE 'OLD.' || quote_ident(h.attname) END, ', ' ORDER BY h.attnum),
           string_agg(CASE WHEN r.attname IS NULL THEN format('r.raw -> %L AS %I', h.attname, h.attname) ELSE 'r.' || quote_ident(h.attname) END, ', ' ORDER BY h.attnum)
      INTO record_columns, old_values, current_values
    FROM pg_attribute AS h
    LEFT JOIN pg_attribute AS r ON r.attrelid = format('crm.%I', t)::regclass AND r.attname = h.attname AND NOT r.attisdropped
    WHERE h.attrelid = format('crm_history.%I', t || '_ended')::regclass AND h.attnum > 0 AND NOT h.attisdropped
      AND h.attname NOT IN ('id', 'valid_from', 'valid_to', 'deleted', 'content_hash', 'source', 'synced_at', 'updated_at', 'raw', 'field_signed_at');
    view_columns := record_columns;

    -- The row's update ends its version when its content or its deletion changes: the version it
    -- held goes into <table>_ended (where kept) and the row's next one begins. A write into a
    -- deleted row (a snapshot no newer than the deletion) leaves the tombstone current.
    EXECUTE format($f$
      CREATE FUNCTION crm_history.%1$I() RETURNS trigger LANGUAGE plpgsql AS $body$
      DECLARE
        previous timestamptz := COALESCE(OLD.version_from, CASE WHEN OLD.deleted_at IS NOT NULL THEN OLD.deleted_at ELSE COALESCE(OLD.updated_at, OLD.synced_at) END);
        off text;
      BEGIN
        IF (OLD.deleted_at IS NULL) = (NEW.deleted_at IS NULL)
           AND (NEW.deleted_at IS NOT NULL OR OLD.raw IS NOT DISTINCT FROM NEW.raw) THEN
          NEW.version_from := COALESCE(NEW.version_from, previous);
          RETURN NEW;
        END IF;
        NEW.version_from := GREATEST(
          CASE
            WHEN NEW.deleted_at IS NOT NULL THEN NEW.deleted_at
            WHEN OLD.deleted_at IS NOT NULL AND (NEW.updated_at IS NULL OR NEW.updated_at <= previous) THEN now()
            ELSE COALESCE(NEW.updated_at, now())
          END,
          previous + interval '1 microsecond');
        -- The resources whose history is off, read once a transaction (a setting of its own).
        off := current_setting('crm_sync.history_off', true);
        IF off IS NULL OR off = '' THEN
          SELECT ',' || COALESCE(string_agg(s.resource, ','), '') || ',' INTO off
          FROM crm_sync.history_settings AS s WHERE NOT s.kept;
          PERFORM set_config('crm_sync.history_off', off, true);
        END IF;
        IF position(%2$L IN off) = 0 THEN
          INSERT INTO crm_history.%3$I (id, valid_from, valid_to, deleted, %4$s, updated_at, raw, content_hash, source, synced_at%5$s)
          VALUES (OLD.id, previous, NEW.version_from, OLD.deleted_at IS NOT NULL, %6$s, OLD.updated_at, OLD.raw,
                  md5(OLD.raw::text), OLD.source, OLD.synced_at%7$s);
        END IF;
        RETURN NEW;
      END
      $body$ $f$,
      t || '_version_ends', ',' || t || ',', t || '_ended', record_columns,
      CASE WHEN t = 'clients' THEN ', field_signed_at' ELSE '' END,
      old_values,
      CASE WHEN t = 'clients' THEN ', OLD.field_signed_at' ELSE '' END);
    EXECUTE format('COMMENT ON FUNCTION crm_history.%I() IS %L', t || '_version_ends', format(
      'Trigger on crm.%s: when a row''s content or deletion changes, the version it held goes into crm_history.%s_ended and version_from moves to the new one.', t, t));
    EXECUTE format($q$
      CREATE TRIGGER version_ends BEFORE UPDATE ON crm.%1$I FOR EACH ROW
      WHEN (OLD.version_from IS NULL OR (OLD.deleted_at IS NULL) <> (NEW.deleted_at IS NULL)
            OR (NEW.deleted_at IS NULL AND OLD.raw IS DISTINCT FROM NEW.raw))
      EXECUTE FUNCTION crm_history.%2$I()$q$, t, t || '_version_ends');

    EXECUTE format($v$
      CREATE VIEW crm_history.%1$I AS
      SELECT id, valid_from, valid_to, false AS is_current, deleted, %3$s, updated_at, raw, content_hash, source, synced_at%4$s
      FROM crm_history.%2$I
      UNION ALL
      SELECT r.id, %5$s AS valid_from, NULL::timestamptz AS valid_to, true AS is_current, r.deleted_at IS NOT NULL AS deleted,
             %6$s, r.updated_at, r.raw, md5(r.raw::text) AS content_hash, r.source, r.synced_at%7$s
      FROM crm.%1$I AS r$v$,
      t, t || '_ended', view_columns,
      CASE WHEN t = 'clients' THEN ', field_signed_at' ELSE '' END,
      start, current_values,
      CASE WHEN t = 'clients' THEN ', r.field_signed_at' ELSE '' END);

    EXECUTE format($q$
      CREATE FUNCTION crm_history.%1$I(at timestamptz) RETURNS SETOF crm_history.%2$I
      LANGUAGE sql STABLE AS $body$
        SELECT * FROM crm_history.%2$I
        WHERE valid_from <= at AND coalesce(valid_to, 'infinity'::timestamptz) > at
          AND tstzrange(valid_from, valid_to) @> at AND NOT deleted
      $body$ $q$, t || '_as_of', t);

    -- Comments: the view's columns are the closed table's (renamed, comments kept), and is_current.
    EXECUTE format('COMMENT ON TABLE crm_history.%I IS %L', t || '_ended', format(
      'The versions of the records of crm.%s that ended (valid_to set), written when the row changed, in the same statement. crm_history.%s shows them with the current rows.', t, t));
    EXECUTE format('COMMENT ON COLUMN crm_history.%I.valid_to IS %L', t || '_ended',
      'When the next version took effect (this one is valid up to, not including, it).');
    EXECUTE format('COMMENT ON VIEW crm_history.%I IS %L', t, format(
      'Every version of the records of crm.%s, one row per version (type 2): valid from valid_from until valid_to. The ended ones are crm_history.%s_ended; the current one is the row of crm.%s.', t, t, t));
    FOR col IN
      SELECT a.attname, col_description(a.attrelid, a.attnum) AS description
      FROM pg_attribute AS a
      WHERE a.attrelid = format('crm_history.%I', t || '_ended')::regclass AND a.attnum > 0 AND NOT a.attisdropped
        AND col_description(a.attrelid, a.attnum) IS NOT NULL
    LOOP
      EXECUTE format('COMMENT ON COLUMN crm_history.%I.%I IS %L', t, col.attname, col.description);
    END LOOP;
    EXECUTE format('COMMENT ON COLUMN crm_history.%I.valid_to IS %L', t,
      'When the next version took effect (this one is valid up to, not including, it); NULL for the current version.');
    EXECUTE format('COMMENT ON COLUMN crm_history.%I.is_current IS %L', t,
      'true for the latest version (valid_to NULL): the row of crm.' || t || '.');
    EXECUTE format('COMMENT ON FUNCTION crm_history.%I(timestamptz) IS %L', t || '_as_of', format(
      'The %s as they stood at the given moment (the version valid then; deleted ones left out).', replace(t, '_', ' ')));
  END LOOP;
END
$$;

COMMENT ON COLUMN crm.annuity_contracts.version_from IS 'When the row''s current version began (its valid_from in crm_history.annuity_contracts); null until the row is first updated, the version then beginning at deleted_at for a tombstone, else updated_at, else synced_at.';
COMMENT ON COLUMN crm.businesses.version_from IS 'When the row''s current version began (its valid_from in crm_history.businesses); null until the row is first updated, the version then beginning at deleted_at for a tombstone, else updated_at, else synced_at.';
COMMENT ON COLUMN crm.clients.version_from IS 'When the row''s current version began (its valid_from in crm_history.clients); null until the row is first updated, the version then beginning at deleted_at for a tombstone, else updated_at, else synced_at.';
COMMENT ON COLUMN crm.financial_accounts.version_from IS 'When the row''s current version began (its valid_from in crm_history.financial_accounts); null until the row is first updated, the version then beginning at deleted_at for a tombstone, else updated_at, else synced_at.';
COMMENT ON COLUMN crm.households.version_from IS 'When the row''s current version began (its valid_from in crm_history.households); null until the row is first updated, the version then beginning at deleted_at for a tombstone, else updated_at, else synced_at.';

-- crm.current_<table> shows the new column too (migration 0018).
SELECT crm_sync.refresh_current_views();

-- As in migration 0025, over the view: each day is one probe of the closed versions' primary key
-- and of the row.
CREATE VIEW crm_history.financial_account_balances_daily AS
SELECT a.id AS financial_account_id,
       d.day::date AS day,
       v.household_id,
       v.book_id,
       v.balance_in_cents,
       v.balance_as_of,
       v.valid_from AS version_valid_from
FROM crm.financial_accounts AS a
CROSS JOIN LATERAL (
  SELECT f.valid_from AS first_from FROM crm_history.financial_accounts AS f
  WHERE f.id = a.id ORDER BY f.valid_from LIMIT 1
) AS first
CROSS JOIN LATERAL generate_series(
  date_trunc('day', first.first_from AT TIME ZONE 'UTC'),
  date_trunc('day', now() AT TIME ZONE 'UTC'),
  interval '1 day'
) AS d(day)
CROSS JOIN LATERAL (
  SELECT h.household_id, h.book_id, h.balance_in_cents, h.balance_as_of, h.valid_from, h.deleted
  FROM crm_history.financial_accounts AS h
  WHERE h.id = a.id AND h.valid_from < (d.day + interval '1 day') AT TIME ZONE 'UTC'
  ORDER BY h.valid_from DESC
  LIMIT 1
) AS v
WHERE NOT v.deleted;

COMMENT ON VIEW crm_history.financial_account_balances_daily IS 'One row per financial account and UTC day, from its first version''s day to today: the last version of that day, carried forward over days without one; days the account ended deleted are left out. Filter on financial_account_id (e.g. IN (SELECT id FROM crm.financial_accounts WHERE household_id = ...)).';
COMMENT ON COLUMN crm_history.financial_account_balances_daily.financial_account_id IS 'The account: crm.financial_accounts.id.';
COMMENT ON COLUMN crm_history.financial_account_balances_daily.day IS 'The day (UTC).';
COMMENT ON COLUMN crm_history.financial_account_balances_daily.household_id IS 'The account''s household at the end of the day.';
COMMENT ON COLUMN crm_history.financial_account_balances_daily.book_id IS 'The account''s book at the end of the day.';
COMMENT ON COLUMN crm_history.financial_account_balances_daily.balance_in_cents IS 'The balance in cents at the end of the day (the last version of the day or before).';
COMMENT ON COLUMN crm_history.financial_account_balances_daily.balance_as_of IS 'When the CRM says that balance was taken.';
COMMENT ON COLUMN crm_history.financial_account_balances_daily.version_valid_from IS 'valid_from of the version the row shows.';

DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'crm_sync_runtime') THEN
    GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA crm_history TO crm_sync_runtime;
    GRANT SELECT, INSERT, UPDATE, DELETE ON crm_sync.history_settings TO crm_sync_runtime;
  END IF;
  IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'crm_reader') THEN
    GRANT SELECT ON ALL TABLES IN SCHEMA crm_history TO crm_reader;
  END IF;
END
$$;
