-- History: a version's content_hash is computed when it is read, not when the row's trigger ends
-- the version (docs/history.md). The md5 of every ended version's raw was a fifth of what a version
-- cost to write (each client.updated writes one), and the view already hashed the current rows at
-- read time. The trigger now leaves content_hash NULL; a late placement (History.placeLate,
-- ClientHistory.ts) still stores the hash it compared; crm_history.<table> shows
-- COALESCE(content_hash, md5(raw::text)), so every reader sees the same values as before.
-- Forward-only: never edit once landed.

DO $$
DECLARE
  t text;
  record_columns text;
  old_values text;
  view_columns text;
  current_values text;
  start text := 'COALESCE(r.version_from, CASE WHEN r.deleted_at IS NOT NULL THEN r.deleted_at ELSE COALESCE(r.updated_at, r.synced_at) END)';
BEGIN
  FOREACH t IN ARRAY ARRAY['annuity_contracts', 'businesses', 'clients', 'financial_accounts', 'households'] LOOP
    -- The record's columns of a version, in the table's order (as in 0028).
    SELECT string_agg(quote_ident(h.attname), ', ' ORDER BY h.attnum),
           string_agg(CASE WHEN r.attname IS NULL THEN format('OLD.raw -> %L', h.attname) ELSE 'OLD.' || quote_ident(h.attname) END, ', ' ORDER BY h.attnum),
           string_agg(CASE WHEN r.attname IS NULL THEN format('r.raw -> %L AS %I', h.attname, h.attname) ELSE 'r.' || quote_ident(h.attname) END, ', ' ORDER BY h.attnum)
      INTO record_columns, old_values, current_values
    FROM pg_attribute AS h
    LEFT JOIN pg_attribute AS r ON r.attrelid = format('crm.%I', t)::regclass AND r.attname = h.attname AND NOT r.attisdropped
    WHERE h.attrelid = format('crm_history.%I', t || '_ended')::regclass AND h.attnum > 0 AND NOT h.attisdropped
      AND h.attname NOT IN ('id', 'valid_from', 'valid_to', 'deleted', 'content_hash', 'source', 'synced_at', 'updated_at', 'raw', 'field_signed_at');
    view_columns := record_columns;

    -- 0028's trigger function, the ended version's content_hash left NULL.
    EXECUTE format($f$
      CREATE OR REPLACE FUNCTION crm_history.%1$I() RETURNS trigger LANGUAGE plpgsql AS $body$
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
          INSERT INTO crm_history.%3$I (id, valid_from, valid_to, deleted, %4$s, updated_at, raw, source, synced_at%5$s)
          VALUES (OLD.id, previous, NEW.version_from, OLD.deleted_at IS NOT NULL, %6$s, OLD.updated_at, OLD.raw,
                  OLD.source, OLD.synced_at%7$s);
        END IF;
        RETURN NEW;
      END
      $body$ $f$,
      t || '_version_ends', ',' || t || ',', t || '_ended', record_columns,
      CASE WHEN t = 'clients' THEN ', field_signed_at' ELSE '' END,
      old_values,
      CASE WHEN t = 'clients' THEN ', OLD.field_signed_at' ELSE '' END);

    -- 0028's view, the ended versions' content_hash computed where the trigger left none.
    EXECUTE format($v$
      CREATE OR REPLACE VIEW crm_history.%1$I AS
      SELECT id, valid_from, valid_to, false AS is_current, deleted, %3$s, updated_at, raw,
             COALESCE(content_hash, md5(raw::text)) AS content_hash, source, synced_at%4$s
      FROM crm_history.%2$I
      UNION ALL
      SELECT r.id, %5$s AS valid_from, NULL::timestamptz AS valid_to, true AS is_current, r.deleted_at IS NOT NULL AS deleted,
             %6$s, r.updated_at, r.raw, md5(r.raw::text) AS content_hash, r.source, r.synced_at%7$s
      FROM crm.%1$I AS r$v$,
      t, t || '_ended', view_columns,
      CASE WHEN t = 'clients' THEN ', field_signed_at' ELSE '' END,
      start, current_values,
      CASE WHEN t = 'clients' THEN ', r.field_signed_at' ELSE '' END);

    EXECUTE format('COMMENT ON COLUMN crm_history.%I.content_hash IS %L', t || '_ended',
      'md5 of raw where a late placement stored it; NULL where the row''s trigger ended the version (crm_history.' || t || ' computes it).');
  END LOOP;
END
$$;
