-- What crm-sync knows of each connection's webhook subscription (spec §2.10, §3), for the daily
-- check that it still exists: `crm-sync webhooks subscribe` records it, `unsubscribe` marks it
-- 'unsubscribed' (the check then leaves it alone), and the check compares the id that
-- POST /v1/webhook_subscription returns with the stored one. A different id means the subscription
-- was removed (an administrative disconnect, another unsubscribe) and created again by the check:
-- events in between were never sent. Forward-only: never edit once landed.
CREATE TABLE crm_sync.webhook_subscriptions (
  connection text PRIMARY KEY,
  subscription_id text,
  user_id text,
  -- 'present' (the last check found the stored id), 'replaced' (it found another: events were
  -- lost in between), 'unreachable' (the check could not ask: the grant was revoked),
  -- 'unsubscribed' (removed on purpose).
  state text NOT NULL CHECK (state IN ('present', 'replaced', 'unreachable', 'unsubscribed')),
  previous_id text,
  detail text,
  changed_at timestamptz NOT NULL DEFAULT now(),
  checked_at timestamptz NOT NULL DEFAULT now()
);

-- The latest delivery per endpoint, once a minute for /metrics, without reading the whole inbox.
CREATE INDEX webhook_inbox_endpoint_received ON crm_sync.webhook_inbox (endpoint, received_at);
