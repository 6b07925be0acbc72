-- Transcripts (issue 32): a transcript's updated_at now orders its reads (when crm-sync started
-- the read, by the database's clock), and a transcript is retired (deleted_at set, raw and
-- segments removed) when its meeting is deleted or a read answers none. Rows written before this
-- are brought in line: the transcripts of meetings already deleted, and those stored from a read
-- that answered null, are retired now, their text removed (docs/warehouse.md, "Transcripts: order
-- and retirement"). Forward-only: never edit once landed.
UPDATE crm.meeting_transcripts AS t
SET deleted_at = now(), updated_at = GREATEST(t.updated_at, now()), has_transcript = false, raw = NULL, synced_at = now()
WHERE t.deleted_at IS NULL
  AND (NOT t.has_transcript
       OR EXISTS (SELECT 1 FROM crm.meetings AS m WHERE m.id = t.id AND m.deleted_at IS NOT NULL));

DELETE FROM crm.meeting_transcript_segments AS s
USING crm.meeting_transcripts AS t
WHERE t.id = s.meeting_id AND t.deleted_at IS NOT NULL;

COMMENT ON COLUMN crm.meeting_transcripts."updated_at" IS 'When crm-sync started the read that wrote the row (the database''s clock): of two reads of one transcript, the one started later is kept. Not a time the CRM reports.';
COMMENT ON COLUMN crm.meeting_transcripts."deleted_at" IS 'When the transcript was retired: its meeting was deleted, or a read answered no transcript (none, or hidden). Its text (raw, segments) is removed then. Null while live.';
COMMENT ON COLUMN crm.meeting_transcripts."raw" IS 'The transcript response exactly as last received; null once retired.';

SELECT crm_sync.refresh_current_views();
