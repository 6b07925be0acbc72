/**
 * The environment variables of the contract, by the config field each fills: read by AppConfig and
 * listed by `crm-sync --help`. No imports, so the command line can show them without loading the
 * config's schema.
 */

/**
 * An environment variable of the contract: `CRM_SYNC_*` for crm-sync's own settings, `CRM_*` for
 * the CRM connection it talks to. `alias` is the older name, still read when the name is unset.
 */
export interface Variable {
  readonly name: string
  readonly alias?: string
  /** The document key it fills (`mergeEnv`). */
  readonly key: string
  readonly about: string
}

/** The contract's variables by the field they fill; each overrides the file's key. */
export const Variables = {
  file: { name: "CRM_SYNC_CONFIG", key: "(file)", about: "JSON config file; the variables below override its keys" },
  databaseUrl: {
    name: "CRM_SYNC_DATABASE_URL",
    alias: "DATABASE_URL",
    key: "database_url",
    about: "PostgreSQL URL (default: embedded PostgreSQL in the data dir)"
  },
  dataDir: { name: "CRM_SYNC_DATA_DIR", key: "data_dir", about: "Local state directory (default: .crm-sync)" },
  encryptionKey: {
    name: "CRM_SYNC_ENCRYPTION_KEY",
    key: "encryption_key",
    about: "Key that encrypts stored OAuth tokens (base64, 32 bytes)"
  },
  webhookPort: {
    name: "CRM_SYNC_WEBHOOK_PORT",
    alias: "WEBHOOK_PORT",
    key: "webhook_port",
    about: "Webhook intake port (default: 8080)"
  },
  adminPort: {
    name: "CRM_SYNC_ADMIN_PORT",
    alias: "ADMIN_PORT",
    key: "admin_port",
    about: "Status page, metrics and probes port (default: 9090)"
  },
  adminToken: {
    name: "CRM_SYNC_ADMIN_TOKEN",
    key: "admin_token",
    about: "Token the admin port asks for (Bearer, or a browser's password)"
  },
  openMetrics: {
    name: "CRM_SYNC_OPEN_METRICS",
    key: "open_metrics",
    about: "true: /metrics answers without the admin token (default: false)"
  },
  logLevel: {
    name: "CRM_SYNC_LOG_LEVEL",
    alias: "LOG_LEVEL",
    key: "log_level",
    about: "debug, info, warn or error (default: info)"
  },
  logFormat: {
    name: "CRM_SYNC_LOG_FORMAT",
    key: "log_format",
    about: "json or text (default: text on a terminal, else json)"
  },
  migrations: {
    name: "CRM_SYNC_MIGRATIONS",
    key: "migrations",
    about: "apply: migrate first; check: stop if one is pending (default: apply)"
  },
  reconcileSchedule: {
    name: "CRM_SYNC_RECONCILE_SCHEDULE",
    alias: "RECONCILE_SCHEDULE",
    key: "schedules.reconcile",
    about: "Reconciliation cron, UTC (default: 0 3 * * *)"
  },
  baseUrl: { name: "CRM_BASE_URL", key: "connections[0].base_url", about: "The CRM's API address" },
  token: { name: "CRM_TOKEN", key: "connections[0].token", about: "The CRM token of the first connection" },
  tokenKind: {
    name: "CRM_TOKEN_KIND",
    key: "connections[0].credential",
    about: "personal or oauth (default: personal)"
  },
  webhookSecret: {
    name: "CRM_WEBHOOK_SECRET",
    key: "webhooks.endpoints.default",
    about: "Signing secret of POST /webhooks/default"
  }
} as const satisfies Record<string, Variable>

/** Every environment variable crm-sync reads, aliases included (besides those a config file names as `{"env": NAME}`). */
export const EnvironmentVariables: ReadonlyArray<string> = Object.values(Variables).flatMap((variable: Variable) =>
  variable.alias === undefined ? [variable.name] : [variable.name, variable.alias]
)
