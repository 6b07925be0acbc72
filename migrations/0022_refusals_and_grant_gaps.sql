-- Two things an operator must see from any process (`crm-sync status` runs apart from the daemon):
--
-- Webhook deliveries refused before anything was stored, per endpoint and reason (a wrong signing
-- secret refuses every delivery with 401, and the sender gives up after its retry horizon). The
-- intake adds its counts every few seconds (WebhookRefusals); a refusal more than a day after the
-- previous one of its endpoint and reason starts the count again.
--
-- The time range in which a connection's OAuth grant was refused: the CRM removes the webhook
-- subscription with the grant, so the events of that range were never sent, and a reconciliation
-- must repair what it can. Forward-only: never edit once landed.
CREATE TABLE crm_sync.webhook_refusals (
  endpoint text NOT NULL,
  reason text NOT NULL,
  count bigint NOT NULL,
  first_at timestamptz NOT NULL,
  last_at timestamptz NOT NULL,
  PRIMARY KEY (endpoint, reason)
);
COMMENT ON TABLE crm_sync.webhook_refusals IS
  'Webhook deliveries refused before storing, per endpoint and reason (WebhookRefusals).';
COMMENT ON COLUMN crm_sync.webhook_refusals.endpoint IS 'The endpoint name (/webhooks/<name>); unknown for a path with no endpoint.';
COMMENT ON COLUMN crm_sync.webhook_refusals.reason IS 'Why: bad_signature, stale_timestamp, missing_header, malformed_header, body_too_large, unreadable_body, unknown_endpoint.';
COMMENT ON COLUMN crm_sync.webhook_refusals.count IS 'Refusals since first_at.';
COMMENT ON COLUMN crm_sync.webhook_refusals.first_at IS 'The first refusal counted (a day without one starts the count again).';
COMMENT ON COLUMN crm_sync.webhook_refusals.last_at IS 'The latest refusal.';

ALTER TABLE crm_sync.credentials
  ADD COLUMN refused_at timestamptz,
  ADD COLUMN reauthorized_at timestamptz;
COMMENT ON COLUMN crm_sync.credentials.refused_at IS
  'When the CRM last refused the grant (needs_reauthorization turned true): its webhook events stop then.';
COMMENT ON COLUMN crm_sync.credentials.reauthorized_at IS
  'When crm-sync connect stored a new grant after that refusal; null while it is still refused.';
