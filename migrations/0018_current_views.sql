-- Views of current rows, for analysts: crm.current_<table> is crm.<table> without the rows marked
-- deleted, for every table that has deleted_at, with the table's comments on its columns.
-- `SELECT *` is expanded when a view is created, so a later migration that changes such a table
-- ends with `SELECT crm_sync.refresh_current_views();` (test/warehouse/CurrentViews checks that
-- every view has its table's columns).
CREATE FUNCTION crm_sync.refresh_current_views() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  t record;
  col record;
  view_name text;
BEGIN
  FOR t IN
    SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
    WHERE c.relnamespace = 'crm'::regnamespace AND c.relkind = 'r'
      AND a.attname = 'deleted_at' AND NOT a.attisdropped
    ORDER BY c.relname
  LOOP
    view_name := 'current_' || t.relname;
    EXECUTE format('DROP VIEW IF EXISTS crm.%I', view_name);
    EXECUTE format('CREATE VIEW crm.%I AS SELECT * FROM crm.%I WHERE deleted_at IS NULL', view_name, t.relname);
    EXECUTE format('COMMENT ON VIEW crm.%I IS %L', view_name,
      format('The rows of crm.%s that are not deleted (deleted_at IS NULL).', t.relname));
    FOR col IN
      SELECT a.attname, col_description(a.attrelid, a.attnum) AS description
      FROM pg_attribute a
      WHERE a.attrelid = format('crm.%I', t.relname)::regclass AND a.attnum > 0 AND NOT a.attisdropped
        AND col_description(a.attrelid, a.attnum) IS NOT NULL
    LOOP
      EXECUTE format('COMMENT ON COLUMN crm.%I.%I IS %L', view_name, col.attname, col.description);
    END LOOP;
  END LOOP;
END
$$;

SELECT crm_sync.refresh_current_views();
