-- What crm.clients.updated_at and the deleted_at of the evented resources (tasks, meetings, notes)
-- hold since deliveries are ordered in the CRM's time (docs/decisions.md, "Events in the CRM's
-- time"): the table's comment and its crm.current_<table> view's, which 0018 copied from it.
-- Comments only. Forward-only: never edit once landed.

DO $$
DECLARE
  client_updated text := 'For a client.updated snapshot, the first signed time (hook-timestamp) seen for its hook-id: '
    || 'client events carry no updated_at (spec §2.9), so a snapshot stands for that time and an older one never '
    || 'replaces a newer. Null while only a client.created was applied: a creation is older than every update.';
  deleted text := 'When the CRM deleted the record, in the CRM''s clock: the end of the second its deletion event was signed in; or when '
    || 'crm-sync learned it was gone (a 404 by id); never before updated_at. Null while it exists.';
  relation text;
BEGIN
  FOREACH relation IN ARRAY ARRAY['clients', 'current_clients'] LOOP
    EXECUTE format('COMMENT ON COLUMN crm.%I.updated_at IS %L', relation, client_updated);
  END LOOP;
  FOREACH relation IN ARRAY ARRAY['tasks', 'meetings', 'notes', 'current_tasks', 'current_meetings', 'current_notes'] LOOP
    EXECUTE format('COMMENT ON COLUMN crm.%I.deleted_at IS %L', relation, deleted);
  END LOOP;
END
$$;
