-- Client history field times (issue 29, docs/history.md): each version of crm_history.clients
-- keeps the field times (crm.clients.field_signed_at) it was ordered by, so a late client.updated
-- can be placed in the middle of the chain: a field it names is written into a later version only
-- when no later delivery named it (src/warehouse/ClientHistory.ts). The current versions take
-- their row's; older versions have none (every named field is taken as not named later).
-- Forward-only: never edit once landed.
ALTER TABLE crm_history.clients ADD COLUMN field_signed_at jsonb;

COMMENT ON COLUMN crm_history.clients.field_signed_at IS 'Per field, the first signed time of the client.updated that last wrote it as of this version (crm.clients.field_signed_at then); null for versions written before migration 0027.';

UPDATE crm_history.clients AS h SET field_signed_at = c.field_signed_at
FROM crm.clients AS c WHERE h.id = c.id AND h.is_current AND c.field_signed_at IS NOT NULL;
