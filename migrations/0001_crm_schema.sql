-- The warehouse (schema crm): one table per CRM resource of spec §2, a typed column for every
-- scalar field under the spec's own name, and a child table `<parent>_<list>` for every nested
-- list, replaced atomically with its parent. Every resource table carries the contract's common
-- columns: id, updated_at (the record's own, null where the API gives none), deleted_at, synced_at,
-- source and raw (the record as received, unknown fields included). docs/warehouse.md is the
-- reference. Forward-only: never edit once landed; add a new numbered file instead.
--
-- Child rows carry their parent's id, their position in the list (`ordinal`, from 0) and the
-- element's own fields. A reference to another record is named `<kind>_id` (household_id,
-- user_id, tag_id); an element's own identity stays `id`.

CREATE SCHEMA IF NOT EXISTS crm;

-- Where a write came from (DESIGN.md contract).
CREATE DOMAIN crm.sync_source AS text CHECK (VALUE IN ('poll', 'crawl', 'webhook', 'write', 'backfill', 'reconcile'));

-- ---------------------------------------------------------------------------------------------
-- Books, users, teams, households. Fields beyond id and name are not shown (spec §2.1): users and
-- teams come from the books listing (and from meeting and task snapshots), households from the ids
-- seen in events, placements and accounts. These tables merge what each sighting adds.
-- ---------------------------------------------------------------------------------------------

CREATE TABLE crm.books (
  id text PRIMARY KEY,
  name text,
  updated_at timestamptz,
  deleted_at timestamptz,
  synced_at timestamptz NOT NULL DEFAULT now(),
  source crm.sync_source NOT NULL,
  raw jsonb
);
COMMENT ON TABLE crm.books IS 'Books (advisor workspaces) from GET /v1/books (spec §1, §4).';

CREATE TABLE crm.users (
  id text PRIMARY KEY,
  name text,
  email text,
  first_name text,
  last_name text,
  updated_at timestamptz,
  deleted_at timestamptz,
  synced_at timestamptz NOT NULL DEFAULT now(),
  source crm.sync_source NOT NULL,
  raw jsonb
);
COMMENT ON TABLE crm.users IS 'Users seen in the books listing, meeting snapshots and task assignments; raw merges every sighting.';

CREATE TABLE crm.teams (
  id text PRIMARY KEY,
  name text,
  updated_at timestamptz,
  deleted_at timestamptz,
  synced_at timestamptz NOT NULL DEFAULT now(),
  source crm.sync_source NOT NULL,
  raw jsonb
);
COMMENT ON TABLE crm.teams IS 'Teams seen in the books listing and task assignments; raw merges every sighting.';

CREATE TABLE crm.households (
  id text PRIMARY KEY,
  name text,
  updated_at timestamptz,
  deleted_at timestamptz,
  synced_at timestamptz NOT NULL DEFAULT now(),
  source crm.sync_source NOT NULL,
  raw jsonb
);
COMMENT ON TABLE crm.households IS 'Households whose ids were seen in events, meetings, notes, tasks, placements and accounts (no household endpoint exists).';

CREATE TABLE crm.book_users (
  book_id text NOT NULL REFERENCES crm.books (id) ON DELETE CASCADE,
  ordinal integer NOT NULL,
  user_id text NOT NULL,
  PRIMARY KEY (book_id, ordinal)
);
CREATE INDEX book_users_user ON crm.book_users (user_id);

CREATE TABLE crm.book_teams (
  book_id text NOT NULL REFERENCES crm.books (id) ON DELETE CASCADE,
  ordinal integer NOT NULL,
  team_id text NOT NULL,
  PRIMARY KEY (book_id, ordinal)
);
CREATE INDEX book_teams_team ON crm.book_teams (team_id);

-- ---------------------------------------------------------------------------------------------
-- Businesses (spec §2.3)
-- ---------------------------------------------------------------------------------------------

CREATE TABLE crm.businesses (
  id text PRIMARY KEY,
  book_id text,
  name text,
  industry text,
  website_url text,
  tax_id text,
  additional_info text,
  created_at timestamptz,
  updated_at timestamptz,
  deleted_at timestamptz,
  synced_at timestamptz NOT NULL DEFAULT now(),
  source crm.sync_source NOT NULL,
  raw jsonb
);
COMMENT ON TABLE crm.businesses IS 'Businesses (spec §2.3), polled with updated_since.';
CREATE INDEX businesses_updated_at ON crm.businesses (updated_at);
CREATE INDEX businesses_book ON crm.businesses (book_id);

CREATE TABLE crm.business_email_addresses (
  business_id text NOT NULL REFERENCES crm.businesses (id) ON DELETE CASCADE,
  ordinal integer NOT NULL,
  email text,
  email_type text,
  is_primary boolean,
  PRIMARY KEY (business_id, ordinal)
);
CREATE INDEX business_email_addresses_email ON crm.business_email_addresses (lower(email));

CREATE TABLE crm.business_phone_numbers (
  business_id text NOT NULL REFERENCES crm.businesses (id) ON DELETE CASCADE,
  ordinal integer NOT NULL,
  phone_number text,
  phone_type text,
  is_primary boolean,
  extension text,
  -- Spec §2.1 says E.164; a number that is not is stored as received, and flagged here.
  is_e164 boolean GENERATED ALWAYS AS (phone_number ~ '^\+[1-9][0-9]{1,14}$') STORED,
  PRIMARY KEY (business_id, ordinal)
);
CREATE INDEX business_phone_numbers_number ON crm.business_phone_numbers (phone_number);

CREATE TABLE crm.business_addresses (
  business_id text NOT NULL REFERENCES crm.businesses (id) ON DELETE CASCADE,
  ordinal integer NOT NULL,
  address_type text,
  is_primary boolean,
  line1 text,
  line2 text,
  city text,
  state text,
  zip text,
  country_code text,
  PRIMARY KEY (business_id, ordinal)
);

CREATE TABLE crm.business_tags (
  business_id text NOT NULL REFERENCES crm.businesses (id) ON DELETE CASCADE,
  ordinal integer NOT NULL,
  tag_id text NOT NULL,
  name text,
  PRIMARY KEY (business_id, ordinal)
);
CREATE INDEX business_tags_tag ON crm.business_tags (tag_id);

-- ---------------------------------------------------------------------------------------------
-- Contacts (spec §2.2), prospects, clients (spec §2.9)
-- ---------------------------------------------------------------------------------------------

CREATE TABLE crm.contacts (
  id text PRIMARY KEY,
  book_id text,
  first_name text,
  last_name text,
  middle_name text,
  preferred_name text,
  salutation text,
  suffix text,
  gender text,
  designations text,
  custom_fields jsonb,
  created_at timestamptz,
  updated_at timestamptz,
  deleted_at timestamptz,
  synced_at timestamptz NOT NULL DEFAULT now(),
  source crm.sync_source NOT NULL,
  raw jsonb
);
COMMENT ON TABLE crm.contacts IS 'Contacts (spec §2.2): created by crm-sync''s writes and seen in contact events.';
CREATE INDEX contacts_book ON crm.contacts (book_id);
CREATE INDEX contacts_updated_at ON crm.contacts (updated_at);

CREATE TABLE crm.contact_email_addresses (
  contact_id text NOT NULL REFERENCES crm.contacts (id) ON DELETE CASCADE,
  ordinal integer NOT NULL,
  email text,
  email_type text,
  is_primary boolean,
  PRIMARY KEY (contact_id, ordinal)
);
CREATE INDEX contact_email_addresses_email ON crm.contact_email_addresses (lower(email));

CREATE TABLE crm.contact_phone_numbers (
  contact_id text NOT NULL REFERENCES crm.contacts (id) ON DELETE CASCADE,
  ordinal integer NOT NULL,
  phone_number text,
  phone_type text,
  is_primary boolean,
  extension text,
  is_e164 boolean GENERATED ALWAYS AS (phone_number ~ '^\+[1-9][0-9]{1,14}$') STORED,
  PRIMARY KEY (contact_id, ordinal)
);
CREATE INDEX contact_phone_numbers_number ON crm.contact_phone_numbers (phone_number);

CREATE TABLE crm.contact_addresses (
  contact_id text NOT NULL REFERENCES crm.contacts (id) ON DELETE CASCADE,
  ordinal integer NOT NULL,
  address_type text,
  is_primary boolean,
  line1 text,
  line2 text,
  city text,
  state text,
  zip text,
  country_code text,
  PRIMARY KEY (contact_id, ordinal)
);

CREATE TABLE crm.prospects (
  id text PRIMARY KEY,
  book_id text,
  first_name text,
  last_name text,
  updated_at timestamptz,
  deleted_at timestamptz,
  synced_at timestamptz NOT NULL DEFAULT now(),
  source crm.sync_source NOT NULL,
  raw jsonb
);
COMMENT ON TABLE crm.prospects IS 'Prospects (spec §4, §6.4): fields beyond id, book_id and names are not shown and live in raw.';
CREATE INDEX prospects_book ON crm.prospects (book_id);

CREATE TABLE crm.clients (
  id text PRIMARY KEY,
  book_id text,
  name text,
  status text,
  tier text,
  aum numeric,
  became_client_at timestamptz,
  type text,
  updated_at timestamptz,
  deleted_at timestamptz,
  synced_at timestamptz NOT NULL DEFAULT now(),
  source crm.sync_source NOT NULL,
  raw jsonb
);
COMMENT ON TABLE crm.clients IS 'Clients as delivered in client.created and client.updated events (spec §2.9, §6.3).';
CREATE INDEX clients_book ON crm.clients (book_id);

-- One row per client.updated delivery: which fields changed during the 60-second debounce window
-- (spec §6.3: names only, no previous values). Keyed by hook-id so a redelivery adds nothing.
CREATE TABLE crm.client_changes (
  hook_id text PRIMARY KEY,
  client_id text NOT NULL,
  changed_fields text[] NOT NULL,
  subscription_id text,
  book_id text,
  received_at timestamptz NOT NULL,
  synced_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE crm.client_changes IS 'History of client.updated events: changed_fields per delivery (spec §6.3).';
CREATE INDEX client_changes_client ON crm.client_changes (client_id, received_at);

-- ---------------------------------------------------------------------------------------------
-- Meetings and transcripts (spec §2.6)
-- ---------------------------------------------------------------------------------------------

CREATE TABLE crm.meetings (
  id text PRIMARY KEY,
  book_id text,
  title text,
  start_time timestamptz,
  end_time timestamptz,
  duration_seconds integer,
  meeting_link text,
  meeting_source text,
  meeting_type text,
  has_transcript boolean,
  has_recordings boolean,
  quick_summary text,
  ai_summary text,
  notepad text,
  -- Element fields not shown (spec §2.6): kept as JSON.
  event_participants jsonb,
  created_at timestamptz,
  updated_at timestamptz,
  deleted_at timestamptz,
  synced_at timestamptz NOT NULL DEFAULT now(),
  source crm.sync_source NOT NULL,
  raw jsonb
);
COMMENT ON TABLE crm.meetings IS 'Meetings (spec §2.6) from meeting events and GET /v1/meetings/{id}.';
CREATE INDEX meetings_book ON crm.meetings (book_id);
CREATE INDEX meetings_start_time ON crm.meetings (start_time);
CREATE INDEX meetings_updated_at ON crm.meetings (updated_at);

CREATE TABLE crm.meeting_households (
  meeting_id text NOT NULL REFERENCES crm.meetings (id) ON DELETE CASCADE,
  ordinal integer NOT NULL,
  household_id text NOT NULL,
  name text,
  PRIMARY KEY (meeting_id, ordinal)
);
CREATE INDEX meeting_households_household ON crm.meeting_households (household_id);

CREATE TABLE crm.meeting_contacts (
  meeting_id text NOT NULL REFERENCES crm.meetings (id) ON DELETE CASCADE,
  ordinal integer NOT NULL,
  contact_id text NOT NULL,
  name text,
  PRIMARY KEY (meeting_id, ordinal)
);
CREATE INDEX meeting_contacts_contact ON crm.meeting_contacts (contact_id);

CREATE TABLE crm.meeting_businesses (
  meeting_id text NOT NULL REFERENCES crm.meetings (id) ON DELETE CASCADE,
  ordinal integer NOT NULL,
  business_id text NOT NULL,
  name text,
  PRIMARY KEY (meeting_id, ordinal)
);
CREATE INDEX meeting_businesses_business ON crm.meeting_businesses (business_id);

CREATE TABLE crm.meeting_users (
  meeting_id text NOT NULL REFERENCES crm.meetings (id) ON DELETE CASCADE,
  ordinal integer NOT NULL,
  user_id text NOT NULL,
  email text,
  first_name text,
  last_name text,
  PRIMARY KEY (meeting_id, ordinal)
);
CREATE INDEX meeting_users_user ON crm.meeting_users (user_id);

-- GET /v1/meetings/{meeting_id}/transcript. The response has no id of its own: the row is keyed
-- by the meeting's id, also exposed under the spec's name meeting_id.
CREATE TABLE crm.meeting_transcripts (
  id text PRIMARY KEY,
  meeting_id text GENERATED ALWAYS AS (id) STORED,
  -- false when the response's transcript is null (the meeting has none).
  has_transcript boolean NOT NULL DEFAULT false,
  updated_at timestamptz,
  deleted_at timestamptz,
  synced_at timestamptz NOT NULL DEFAULT now(),
  source crm.sync_source NOT NULL,
  raw jsonb
);
COMMENT ON TABLE crm.meeting_transcripts IS 'Meeting transcripts (spec §2.6), one row per meeting; segments in meeting_transcript_segments.';

CREATE TABLE crm.meeting_transcript_segments (
  meeting_id text NOT NULL REFERENCES crm.meeting_transcripts (id) ON DELETE CASCADE,
  ordinal integer NOT NULL,
  text text,
  participant_name text,
  participant jsonb,
  -- Format not shown (spec §2.6): the JSON value as received (a string or a number).
  start_timestamp jsonb,
  end_timestamp jsonb,
  PRIMARY KEY (meeting_id, ordinal)
);

-- ---------------------------------------------------------------------------------------------
-- Tasks (spec §2.7) and notes (spec §2.8)
-- ---------------------------------------------------------------------------------------------

CREATE TABLE crm.tasks (
  id text PRIMARY KEY,
  book_id text,
  title text,
  description text,
  deadline_at timestamptz,
  completed_at timestamptz,
  all_day boolean,
  is_private boolean,
  status text,
  priority text,
  assigned_to jsonb,
  -- assigned_to.id and assigned_team.id, under the names the API's write side uses (spec §2.7).
  assigned_to_id text,
  assigned_team jsonb,
  assigned_team_id text,
  record jsonb,
  record_id text,
  record_type text,
  record_name text,
  created_at timestamptz,
  updated_at timestamptz,
  deleted_at timestamptz,
  synced_at timestamptz NOT NULL DEFAULT now(),
  source crm.sync_source NOT NULL,
  raw jsonb
);
COMMENT ON TABLE crm.tasks IS 'Tasks (spec §2.7) from task events and GET /v1/tasks/{id}.';
CREATE INDEX tasks_book ON crm.tasks (book_id);
CREATE INDEX tasks_record ON crm.tasks (record_id);
CREATE INDEX tasks_assigned_to ON crm.tasks (assigned_to_id);

CREATE TABLE crm.task_tags (
  task_id text NOT NULL REFERENCES crm.tasks (id) ON DELETE CASCADE,
  ordinal integer NOT NULL,
  tag_id text NOT NULL,
  name text,
  PRIMARY KEY (task_id, ordinal)
);
CREATE INDEX task_tags_tag ON crm.task_tags (tag_id);

CREATE TABLE crm.notes (
  id text PRIMARY KEY,
  book_id text,
  household_id text,
  created_by_id text,
  notable_id text,
  notable_type text,
  pinned boolean,
  hidden boolean,
  tag_ids text[],
  content text,
  -- Element fields not shown (spec §2.8): kept as JSON. A reserved word, hence the quotes.
  "references" jsonb,
  created_at timestamptz,
  updated_at timestamptz,
  deleted_at timestamptz,
  synced_at timestamptz NOT NULL DEFAULT now(),
  source crm.sync_source NOT NULL,
  raw jsonb
);
COMMENT ON TABLE crm.notes IS 'Notes (spec §2.8) under a household, contact or business, from note events and the parent-path reads.';
CREATE INDEX notes_book ON crm.notes (book_id);
CREATE INDEX notes_notable ON crm.notes (notable_id);
CREATE INDEX notes_household ON crm.notes (household_id);

-- ---------------------------------------------------------------------------------------------
-- Project templates (spec §2.4)
-- ---------------------------------------------------------------------------------------------

CREATE TABLE crm.project_templates (
  id text PRIMARY KEY,
  guid text,
  title text,
  description text,
  projectable_kind text,
  enable_kanban_view boolean,
  book_id text,
  book_name text,
  book_initials text,
  order_index integer,
  created_at timestamptz,
  updated_at timestamptz,
  deleted_at timestamptz,
  synced_at timestamptz NOT NULL DEFAULT now(),
  source crm.sync_source NOT NULL,
  raw jsonb
);
COMMENT ON TABLE crm.project_templates IS 'Project templates (spec §2.4), crawled page by page.';
CREATE INDEX project_templates_book ON crm.project_templates (book_id);

-- An element's project_template_id is its parent's id, so the parent column holds it.
CREATE TABLE crm.project_template_milestones (
  project_template_id text NOT NULL REFERENCES crm.project_templates (id) ON DELETE CASCADE,
  ordinal integer NOT NULL,
  id text NOT NULL,
  title text,
  guid text,
  color text,
  sort_order integer,
  auto_advance_trigger text,
  created_at timestamptz,
  updated_at timestamptz,
  PRIMARY KEY (project_template_id, ordinal)
);
CREATE INDEX project_template_milestones_id ON crm.project_template_milestones (id);

-- Outcomes and form fields belong to a milestone: its position and its id identify it.
CREATE TABLE crm.project_template_milestone_outcomes (
  project_template_id text NOT NULL REFERENCES crm.project_templates (id) ON DELETE CASCADE,
  milestone_ordinal integer NOT NULL,
  ordinal integer NOT NULL,
  milestone_id text NOT NULL,
  id text NOT NULL,
  label text,
  destination text,
  default_comment text,
  target_project_milestone_id text,
  sort_order integer,
  PRIMARY KEY (project_template_id, milestone_ordinal, ordinal)
);

CREATE TABLE crm.project_template_milestone_form_fields (
  project_template_id text NOT NULL REFERENCES crm.project_templates (id) ON DELETE CASCADE,
  milestone_ordinal integer NOT NULL,
  ordinal integer NOT NULL,
  milestone_id text NOT NULL,
  id text NOT NULL,
  label text,
  field_type text,
  guid text,
  placeholder text,
  household_record_source text,
  required boolean,
  sort_order integer,
  select_options text[],
  PRIMARY KEY (project_template_id, milestone_ordinal, ordinal)
);

CREATE TABLE crm.project_template_attachments (
  project_template_id text NOT NULL REFERENCES crm.project_templates (id) ON DELETE CASCADE,
  ordinal integer NOT NULL,
  file_name text,
  file_type text,
  file_size bigint,
  source text,
  signed_id text,
  download_url text,
  view_url text,
  PRIMARY KEY (project_template_id, ordinal)
);

-- ---------------------------------------------------------------------------------------------
-- Annuity contracts (spec §2.5) and financial accounts (spec §2.5a). Dollars are numeric, cents
-- bigint, contract and account numbers masked text.
-- ---------------------------------------------------------------------------------------------

CREATE TABLE crm.annuity_contracts (
  id text PRIMARY KEY,
  carrier_key text,
  carrier_name text,
  contract_number text,
  product_code text,
  product_name text,
  status text,
  tax_status text,
  registration_type text,
  data_provider text,
  notes text,
  contract_type text,
  established_on date,
  issued_on date,
  anniversary_on date,
  matures_on date,
  last_synced_at timestamptz,
  term_authority text,
  current_values jsonb,
  created_at timestamptz,
  updated_at timestamptz,
  deleted_at timestamptz,
  synced_at timestamptz NOT NULL DEFAULT now(),
  source crm.sync_source NOT NULL,
  raw jsonb
);
COMMENT ON TABLE crm.annuity_contracts IS 'Annuity contracts (spec §2.5): financial terms and values only, numbers masked.';
CREATE INDEX annuity_contracts_updated_at ON crm.annuity_contracts (updated_at);

CREATE TABLE crm.annuity_contract_parties (
  annuity_contract_id text NOT NULL REFERENCES crm.annuity_contracts (id) ON DELETE CASCADE,
  ordinal integer NOT NULL,
  id text,
  role text,
  display_name text,
  participant_type text,
  participant_id text,
  PRIMARY KEY (annuity_contract_id, ordinal)
);
CREATE INDEX annuity_contract_parties_participant ON crm.annuity_contract_parties (participant_id);

CREATE TABLE crm.annuity_contract_placements (
  annuity_contract_id text NOT NULL REFERENCES crm.annuity_contracts (id) ON DELETE CASCADE,
  ordinal integer NOT NULL,
  id text,
  book_id text,
  household_id text,
  business_id text,
  trust_id text,
  placement_authority text,
  PRIMARY KEY (annuity_contract_id, ordinal)
);
CREATE INDEX annuity_contract_placements_book ON crm.annuity_contract_placements (book_id);
CREATE INDEX annuity_contract_placements_household ON crm.annuity_contract_placements (household_id);

-- An element's annuity_contract_id is its parent's id, so the parent column holds it.
CREATE TABLE crm.annuity_contract_values (
  annuity_contract_id text NOT NULL REFERENCES crm.annuity_contracts (id) ON DELETE CASCADE,
  ordinal integer NOT NULL,
  id text,
  kind text,
  amount numeric,
  as_of_date date,
  created_at timestamptz,
  updated_at timestamptz,
  source_kind text,
  PRIMARY KEY (annuity_contract_id, ordinal)
);

CREATE TABLE crm.financial_accounts (
  id text PRIMARY KEY,
  name text,
  institution_name text,
  account_number text,
  notes text,
  other_tax_advantaged_type_label text,
  book_id text,
  household_id text,
  account_type text,
  tax_advantaged_type text,
  balance_in_cents bigint,
  balance_as_of timestamptz,
  -- A list of plain ids, so an array (GIN-indexed: owner_ids @> ARRAY['...']) rather than a child table.
  owner_ids text[],
  custom_fields jsonb,
  created_at timestamptz,
  updated_at timestamptz,
  deleted_at timestamptz,
  synced_at timestamptz NOT NULL DEFAULT now(),
  source crm.sync_source NOT NULL,
  raw jsonb
);
COMMENT ON TABLE crm.financial_accounts IS 'Financial accounts (spec §2.5a): balances in cents, numbers masked.';
CREATE INDEX financial_accounts_book ON crm.financial_accounts (book_id);
CREATE INDEX financial_accounts_household ON crm.financial_accounts (household_id);
CREATE INDEX financial_accounts_owners ON crm.financial_accounts USING gin (owner_ids);
CREATE INDEX financial_accounts_updated_at ON crm.financial_accounts (updated_at);
