-- History (issue 29, docs/history.md): schema crm_history keeps every version of the records of
-- financial accounts, annuity contracts (with their values), businesses, clients and households,
-- type 2: one row per version, [valid_from, valid_to) by the record's own updated_at (the CRM's
-- clock), valid_to NULL and is_current true for the latest, deleted true for a tombstone. The
-- warehouse writes them in the same transaction as crm.<table> (src/warehouse/History.ts).
-- Each table starts with one version per live row, as of its updated_at (its synced_at where it
-- has none). Forward-only: never edit once landed.
CREATE SCHEMA IF NOT EXISTS crm_history;

COMMENT ON SCHEMA crm_history IS 'Every version of the records of crm (type-2 history), written by crm-sync with the current rows (docs/history.md).';

CREATE TABLE crm_history.annuity_contracts (
  id text NOT NULL,
  valid_from timestamptz NOT NULL,
  valid_to timestamptz,
  is_current boolean NOT NULL,
  deleted boolean NOT NULL DEFAULT false,
  "carrier_key" text,
  "carrier_name" text,
  "contract_number" text,
  "product_code" text,
  "product_name" text,
  "status" text,
  "tax_status" text,
  "registration_type" text,
  "data_provider" text,
  "notes" text,
  "contract_type" text,
  "established_on" date,
  "issued_on" date,
  "anniversary_on" date,
  "matures_on" date,
  "last_synced_at" timestamptz,
  "term_authority" text,
  "current_values" jsonb,
  "created_at" timestamptz,
  "parties" jsonb,
  "placements" jsonb,
  "values" jsonb,
  updated_at timestamptz,
  raw jsonb,
  content_hash text,
  source crm.sync_source NOT NULL,
  synced_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (id, valid_from),
  CHECK (valid_to IS NULL OR valid_to > valid_from)
);

INSERT INTO crm_history.annuity_contracts (id, valid_from, valid_to, is_current, deleted, "carrier_key", "carrier_name", "contract_number", "product_code", "product_name", "status", "tax_status", "registration_type", "data_provider", "notes", "contract_type", "established_on", "issued_on", "anniversary_on", "matures_on", "last_synced_at", "term_authority", "current_values", "created_at", "parties", "placements", "values", updated_at, raw, content_hash, source, synced_at)
SELECT id, COALESCE(updated_at, synced_at), NULL, true, false, "carrier_key", "carrier_name", "contract_number", "product_code", "product_name", "status", "tax_status", "registration_type", "data_provider", "notes", "contract_type", "established_on", "issued_on", "anniversary_on", "matures_on", "last_synced_at", "term_authority", "current_values", "created_at", raw -> 'parties', raw -> 'placements', raw -> 'values', updated_at, raw, md5(raw::text), source, synced_at
FROM crm.annuity_contracts WHERE deleted_at IS NULL ORDER BY id;

CREATE TABLE crm_history.businesses (
  id text NOT NULL,
  valid_from timestamptz NOT NULL,
  valid_to timestamptz,
  is_current boolean NOT NULL,
  deleted boolean NOT NULL DEFAULT false,
  "book_id" text,
  "name" text,
  "industry" text,
  "website_url" text,
  "tax_id" text,
  "additional_info" text,
  "created_at" timestamptz,
  "email_addresses" jsonb,
  "phone_numbers" jsonb,
  "addresses" jsonb,
  "tags" jsonb,
  updated_at timestamptz,
  raw jsonb,
  content_hash text,
  source crm.sync_source NOT NULL,
  synced_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (id, valid_from),
  CHECK (valid_to IS NULL OR valid_to > valid_from)
);

INSERT INTO crm_history.businesses (id, valid_from, valid_to, is_current, deleted, "book_id", "name", "industry", "website_url", "tax_id", "additional_info", "created_at", "email_addresses", "phone_numbers", "addresses", "tags", updated_at, raw, content_hash, source, synced_at)
SELECT id, COALESCE(updated_at, synced_at), NULL, true, false, "book_id", "name", "industry", "website_url", "tax_id", "additional_info", "created_at", raw -> 'email_addresses', raw -> 'phone_numbers', raw -> 'addresses', raw -> 'tags', updated_at, raw, md5(raw::text), source, synced_at
FROM crm.businesses WHERE deleted_at IS NULL ORDER BY id;

CREATE TABLE crm_history.clients (
  id text NOT NULL,
  valid_from timestamptz NOT NULL,
  valid_to timestamptz,
  is_current boolean NOT NULL,
  deleted boolean NOT NULL DEFAULT false,
  "book_id" text,
  "name" text,
  "status" text,
  "tier" text,
  "aum" numeric,
  "became_client_at" timestamptz,
  "type" text,
  updated_at timestamptz,
  raw jsonb,
  content_hash text,
  source crm.sync_source NOT NULL,
  synced_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (id, valid_from),
  CHECK (valid_to IS NULL OR valid_to > valid_from)
);

INSERT INTO crm_history.clients (id, valid_from, valid_to, is_current, deleted, "book_id", "name", "status", "tier", "aum", "became_client_at", "type", updated_at, raw, content_hash, source, synced_at)
SELECT id, COALESCE(updated_at, synced_at), NULL, true, false, "book_id", "name", "status", "tier", "aum", "became_client_at", "type", updated_at, raw, md5(raw::text), source, synced_at
FROM crm.clients WHERE deleted_at IS NULL ORDER BY id;

CREATE TABLE crm_history.financial_accounts (
  id text NOT NULL,
  valid_from timestamptz NOT NULL,
  valid_to timestamptz,
  is_current boolean NOT NULL,
  deleted boolean NOT NULL DEFAULT false,
  "name" text,
  "institution_name" text,
  "account_number" text,
  "notes" text,
  "other_tax_advantaged_type_label" text,
  "book_id" text,
  "household_id" text,
  "account_type" text,
  "tax_advantaged_type" text,
  "balance_in_cents" bigint,
  "balance_as_of" timestamptz,
  "owner_ids" text[],
  "custom_fields" jsonb,
  "created_at" timestamptz,
  updated_at timestamptz,
  raw jsonb,
  content_hash text,
  source crm.sync_source NOT NULL,
  synced_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (id, valid_from),
  CHECK (valid_to IS NULL OR valid_to > valid_from)
);

INSERT INTO crm_history.financial_accounts (id, valid_from, valid_to, is_current, deleted, "name", "institution_name", "account_number", "notes", "other_tax_advantaged_type_label", "book_id", "household_id", "account_type", "tax_advantaged_type", "balance_in_cents", "balance_as_of", "owner_ids", "custom_fields", "created_at", updated_at, raw, content_hash, source, synced_at)
SELECT id, COALESCE(updated_at, synced_at), NULL, true, false, "name", "institution_name", "account_number", "notes", "other_tax_advantaged_type_label", "book_id", "household_id", "account_type", "tax_advantaged_type", "balance_in_cents", "balance_as_of", "owner_ids", "custom_fields", "created_at", updated_at, raw, md5(raw::text), source, synced_at
FROM crm.financial_accounts WHERE deleted_at IS NULL ORDER BY id;

CREATE TABLE crm_history.households (
  id text NOT NULL,
  valid_from timestamptz NOT NULL,
  valid_to timestamptz,
  is_current boolean NOT NULL,
  deleted boolean NOT NULL DEFAULT false,
  "name" text,
  updated_at timestamptz,
  raw jsonb,
  content_hash text,
  source crm.sync_source NOT NULL,
  synced_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (id, valid_from),
  CHECK (valid_to IS NULL OR valid_to > valid_from)
);

INSERT INTO crm_history.households (id, valid_from, valid_to, is_current, deleted, "name", updated_at, raw, content_hash, source, synced_at)
SELECT id, COALESCE(updated_at, synced_at), NULL, true, false, "name", updated_at, raw, md5(raw::text), source, synced_at
FROM crm.households WHERE deleted_at IS NULL ORDER BY id;


-- A version of one id at one moment: the primary key (id, valid_from). All ids at one moment:
-- the GiST index on the validity range.
CREATE INDEX annuity_contracts_valid ON crm_history.annuity_contracts USING gist (tstzrange(valid_from, valid_to));
CREATE INDEX businesses_valid ON crm_history.businesses USING gist (tstzrange(valid_from, valid_to));
CREATE INDEX clients_valid ON crm_history.clients USING gist (tstzrange(valid_from, valid_to));
CREATE INDEX financial_accounts_valid ON crm_history.financial_accounts USING gist (tstzrange(valid_from, valid_to));
CREATE INDEX households_valid ON crm_history.households USING gist (tstzrange(valid_from, valid_to));
-- Status counts the versions written in the last day (a BRIN index: synced_at grows with the table).
CREATE INDEX annuity_contracts_synced ON crm_history.annuity_contracts USING brin (synced_at);
CREATE INDEX businesses_synced ON crm_history.businesses USING brin (synced_at);
CREATE INDEX clients_synced ON crm_history.clients USING brin (synced_at);
CREATE INDEX financial_accounts_synced ON crm_history.financial_accounts USING brin (synced_at);
CREATE INDEX households_synced ON crm_history.households USING brin (synced_at);
-- Retention prunes closed versions by valid_to.
CREATE INDEX annuity_contracts_closed ON crm_history.annuity_contracts (valid_to) WHERE valid_to IS NOT NULL;
CREATE INDEX businesses_closed ON crm_history.businesses (valid_to) WHERE valid_to IS NOT NULL;
CREATE INDEX clients_closed ON crm_history.clients (valid_to) WHERE valid_to IS NOT NULL;
CREATE INDEX financial_accounts_closed ON crm_history.financial_accounts (valid_to) WHERE valid_to IS NOT NULL;
CREATE INDEX households_closed ON crm_history.households (valid_to) WHERE valid_to IS NOT NULL;

-- The state of every record at one moment: the version valid then, tombstones left out.
CREATE FUNCTION crm_history.annuity_contracts_as_of(at timestamptz) RETURNS SETOF crm_history.annuity_contracts
LANGUAGE sql STABLE AS $$
  SELECT * FROM crm_history.annuity_contracts WHERE tstzrange(valid_from, valid_to) @> at AND NOT deleted
$$;
CREATE FUNCTION crm_history.businesses_as_of(at timestamptz) RETURNS SETOF crm_history.businesses
LANGUAGE sql STABLE AS $$
  SELECT * FROM crm_history.businesses WHERE tstzrange(valid_from, valid_to) @> at AND NOT deleted
$$;
CREATE FUNCTION crm_history.clients_as_of(at timestamptz) RETURNS SETOF crm_history.clients
LANGUAGE sql STABLE AS $$
  SELECT * FROM crm_history.clients WHERE tstzrange(valid_from, valid_to) @> at AND NOT deleted
$$;
CREATE FUNCTION crm_history.financial_accounts_as_of(at timestamptz) RETURNS SETOF crm_history.financial_accounts
LANGUAGE sql STABLE AS $$
  SELECT * FROM crm_history.financial_accounts WHERE tstzrange(valid_from, valid_to) @> at AND NOT deleted
$$;
CREATE FUNCTION crm_history.households_as_of(at timestamptz) RETURNS SETOF crm_history.households
LANGUAGE sql STABLE AS $$
  SELECT * FROM crm_history.households WHERE tstzrange(valid_from, valid_to) @> at AND NOT deleted
$$;

-- One row per account and UTC day from the day of its first version to today: the last version
-- of the day (carried forward over days without one); days on which the account stood deleted
-- at the day's end are left out. Driven by crm.financial_accounts (every account with a version
-- has a row there), so a filter on financial_account_id, or on the accounts of a household through
-- crm.financial_accounts, reaches its indexes; each day is one probe of the primary key.
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

-- Comments: the record's columns keep those of crm.<table>; the history's own are below.
DO $$
DECLARE
  t text;
  col record;
BEGIN
  FOREACH t IN ARRAY ARRAY['annuity_contracts', 'businesses', 'clients', 'financial_accounts', 'households'] LOOP
    EXECUTE format('COMMENT ON TABLE crm_history.%I IS %L', t, format(
      'Every version of the records of crm.%s, one row per version (type 2): valid from valid_from until valid_to. Written with crm.%s, in the same transaction.', t, t));
    FOR col IN
      SELECT a.attname, col_description(a.attrelid, a.attnum) AS description
      FROM pg_attribute a
      WHERE a.attrelid = format('crm.%I', t)::regclass AND a.attnum > 0 AND NOT a.attisdropped
        AND col_description(a.attrelid, a.attnum) IS NOT NULL
        AND EXISTS (SELECT 1 FROM pg_attribute h WHERE h.attrelid = format('crm_history.%I', t)::regclass
                    AND h.attname = a.attname AND NOT h.attisdropped)
    LOOP
      EXECUTE format('COMMENT ON COLUMN crm_history.%I.%I IS %L', t, col.attname, col.description);
    END LOOP;
    EXECUTE format('COMMENT ON COLUMN crm_history.%I.id IS %L', t, format('The record''s id: crm.%s.id.', t));
    EXECUTE format('COMMENT ON COLUMN crm_history.%I.valid_from IS %L', t,
      'When this version took effect: the record''s updated_at (the CRM''s clock); for a tombstone, when it was deleted; where neither is known or a later version would not follow the one before, the time crm-sync wrote it.');
    EXECUTE format('COMMENT ON COLUMN crm_history.%I.valid_to IS %L', t,
      'When the next version took effect (this one is valid up to, not including, it); NULL for the current version.');
    EXECUTE format('COMMENT ON COLUMN crm_history.%I.is_current IS %L', t,
      'true for the latest version (valid_to NULL): the one crm.' || t || ' holds.');
    EXECUTE format('COMMENT ON COLUMN crm_history.%I.deleted IS %L', t,
      'true for a tombstone: from valid_from the record was deleted in the CRM or vanished from its listings (its last known fields are kept).');
    EXECUTE format('COMMENT ON COLUMN crm_history.%I.content_hash IS %L', t,
      'md5 of raw as text: a new version is added only when it differs from the version before.');
    EXECUTE format('COMMENT ON COLUMN crm_history.%I.source IS %L', t,
      'What brought this version: poll, crawl, webhook, write, backfill or reconcile.');
    EXECUTE format('COMMENT ON COLUMN crm_history.%I.synced_at IS %L', t, 'When crm-sync wrote this version.');
    EXECUTE format('COMMENT ON COLUMN crm_history.%I.raw IS %L', t, 'The record as received for this version.');
    EXECUTE format('COMMENT ON COLUMN crm_history.%I.updated_at IS %L', t, 'The record''s own updated_at in this version.');
  END LOOP;
END
$$;

COMMENT ON COLUMN crm_history.annuity_contracts."parties" IS 'The contract''s parties in this version, as received (crm.annuity_contract_parties holds only the current ones).';
COMMENT ON COLUMN crm_history.annuity_contracts."placements" IS 'The contract''s placements in this version, as received (crm.annuity_contract_placements holds only the current ones).';
COMMENT ON COLUMN crm_history.annuity_contracts."values" IS 'The contract''s values in this version, as received (crm.annuity_contract_values holds only the current ones).';
COMMENT ON COLUMN crm_history.businesses."email_addresses" IS 'The business''s email addresses in this version, as received.';
COMMENT ON COLUMN crm_history.businesses."phone_numbers" IS 'The business''s phone numbers in this version, as received.';
COMMENT ON COLUMN crm_history.businesses."addresses" IS 'The business''s addresses in this version, as received.';
COMMENT ON COLUMN crm_history.businesses."tags" IS 'The business''s tags in this version, as received.';
COMMENT ON FUNCTION crm_history.annuity_contracts_as_of(timestamptz) IS 'The annuity contracts as they stood at the given moment (the version valid then; deleted ones left out).';
COMMENT ON FUNCTION crm_history.businesses_as_of(timestamptz) IS 'The businesses as they stood at the given moment (the version valid then; deleted ones left out).';
COMMENT ON FUNCTION crm_history.clients_as_of(timestamptz) IS 'The clients as they stood at the given moment (the version valid then; deleted ones left out).';
COMMENT ON FUNCTION crm_history.financial_accounts_as_of(timestamptz) IS 'The financial accounts as they stood at the given moment (the version valid then; deleted ones left out).';
COMMENT ON FUNCTION crm_history.households_as_of(timestamptz) IS 'The households as they stood at the given moment (the version valid then; deleted ones left out).';
COMMENT ON VIEW crm_history.financial_account_balances_daily IS 'One row per financial account and UTC day, from its first version''s day to today: the last version of that day, carried forward over days without one; days the account ended deleted are left out. Filter on financial_account_id (e.g. IN (SELECT id FROM crm.financial_accounts WHERE household_id = ...)).';
COMMENT ON COLUMN crm_history.financial_account_balances_daily.financial_account_id IS 'The account: crm.financial_accounts.id.';
COMMENT ON COLUMN crm_history.financial_account_balances_daily.day IS 'The day (UTC).';
COMMENT ON COLUMN crm_history.financial_account_balances_daily.household_id IS 'The account''s household at the end of the day.';
COMMENT ON COLUMN crm_history.financial_account_balances_daily.book_id IS 'The account''s book at the end of the day.';
COMMENT ON COLUMN crm_history.financial_account_balances_daily.balance_in_cents IS 'The balance in cents at the end of the day (the last version of the day or before).';
COMMENT ON COLUMN crm_history.financial_account_balances_daily.balance_as_of IS 'When the CRM says that balance was taken.';
COMMENT ON COLUMN crm_history.financial_account_balances_daily.version_valid_from IS 'valid_from of the version the row shows.';

-- Where ops/sql/roles.sql made the least-privilege roles, they reach the new schema as they reach
-- crm: the runtime writes the versions, analysts read them (a schema made by an earlier run of
-- roles.sql, or by this migration, is owned by the migrating role, which may grant on it).
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'crm_sync_runtime') THEN
    GRANT USAGE ON SCHEMA crm_history TO crm_sync_runtime;
    GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA crm_history TO crm_sync_runtime;
  END IF;
  IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'crm_reader') THEN
    GRANT USAGE ON SCHEMA crm_history TO crm_reader;
    GRANT SELECT ON ALL TABLES IN SCHEMA crm_history TO crm_reader;
  END IF;
END
$$;
