-- Whether an outbox row's outcome proves that no record was created under its idempotency key:
-- its payload was refused before anything was sent, or the CRM itself refused the request (a
-- validation error, an unknown book). Only such a row may be given a new key by `outbox retry`
-- without the operator's explicit --new-key: for any other, an earlier attempt may have created
-- the record. Forward-only: never edit once landed.
ALTER TABLE crm_sync.outbox ADD COLUMN created_nothing boolean NOT NULL DEFAULT false;
