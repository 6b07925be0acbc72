-- Least-privilege roles for crm-sync's warehouse on an external PostgreSQL (13 or later). Run it as
-- a superuser or the database's owner, connected to the warehouse database, before the first
-- `crm-sync migrate` (and again after upgrades: it is idempotent):
--
--   psql "postgres://admin@db.internal/warehouse" -f ops/sql/roles.sql
--
-- It creates three roles, without passwords (set them afterwards: `\password crm_sync_runtime` in
-- psql, or ALTER ROLE ... PASSWORD):
--
--   crm_sync_owner    runs `crm-sync migrate`: owns the schemas crm and crm_sync and everything
--                     the migrations create in them (and crm_sync_migrations, in schema public).
--   crm_sync_runtime  runs `crm-sync run`, `backfill`, `reconcile` and the rest with
--                     CRM_SYNC_MIGRATIONS=check: reads and writes rows, runs no DDL. (With
--                     `apply` and nothing pending it starts too: apply looks before it locks.)
--
-- The shipped Kubernetes manifests follow this: the Deployment's init container `migrate` runs as
-- crm_sync_owner (Secret crm-sync-owner), every other container as crm_sync_runtime with `check`.
--   crm_reader        for analysts and BI tools: reads schemas crm and crm_history, nothing in
--                     crm_sync (credentials, inbox, outbox, rate windows).
--
-- A warehouse migrated earlier by another role keeps that role as its tables' owner; hand them
-- over first with `REASSIGN OWNED BY <that role> TO crm_sync_owner` (in this database).

DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'crm_sync_owner') THEN
    CREATE ROLE crm_sync_owner LOGIN;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'crm_sync_runtime') THEN
    CREATE ROLE crm_sync_runtime LOGIN;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'crm_reader') THEN
    CREATE ROLE crm_reader LOGIN;
  END IF;
  EXECUTE format('GRANT CONNECT ON DATABASE %I TO crm_sync_owner, crm_sync_runtime, crm_reader', current_database());
  EXECUTE format('GRANT CREATE ON DATABASE %I TO crm_sync_owner', current_database());
END
$$;

-- The migrations' bookkeeping table lives in schema public.
GRANT USAGE, CREATE ON SCHEMA public TO crm_sync_owner;
GRANT USAGE ON SCHEMA public TO crm_sync_runtime;

-- The schemas exist before the first migration, owned by the migration owner, so that the
-- privileges below can name them.
CREATE SCHEMA IF NOT EXISTS crm AUTHORIZATION crm_sync_owner;
CREATE SCHEMA IF NOT EXISTS crm_sync AUTHORIZATION crm_sync_owner;
CREATE SCHEMA IF NOT EXISTS crm_history AUTHORIZATION crm_sync_owner;

-- The runtime: rows in both schemas, sequences for their ids, and reading which migrations ran.
GRANT USAGE ON SCHEMA crm, crm_sync, crm_history TO crm_sync_runtime;
ALTER DEFAULT PRIVILEGES FOR ROLE crm_sync_owner IN SCHEMA crm, crm_sync, crm_history
  GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO crm_sync_runtime;
ALTER DEFAULT PRIVILEGES FOR ROLE crm_sync_owner IN SCHEMA crm, crm_sync, crm_history
  GRANT USAGE, SELECT ON SEQUENCES TO crm_sync_runtime;
ALTER DEFAULT PRIVILEGES FOR ROLE crm_sync_owner IN SCHEMA public
  GRANT SELECT ON TABLES TO crm_sync_runtime;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA crm, crm_sync, crm_history TO crm_sync_runtime;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA crm, crm_sync, crm_history TO crm_sync_runtime;

-- Analysts: the warehouse and its history only.
GRANT USAGE ON SCHEMA crm, crm_history TO crm_reader;
ALTER DEFAULT PRIVILEGES FOR ROLE crm_sync_owner IN SCHEMA crm, crm_history GRANT SELECT ON TABLES TO crm_reader;
GRANT SELECT ON ALL TABLES IN SCHEMA crm, crm_history TO crm_reader;

-- Tables of an earlier run of this script's migrations (crm_sync_migrations, once it exists).
DO $$
BEGIN
  IF to_regclass('public.crm_sync_migrations') IS NOT NULL THEN
    GRANT SELECT ON public.crm_sync_migrations TO crm_sync_runtime;
  END IF;
END
$$;
