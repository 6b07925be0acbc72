/**
 * Who owns which table (docs/architecture.md), and the scan that finds a module naming a table it
 * does not own: `src/` with comments and quoted strings removed (crm-sync writes its SQL in template
 * literals),
 * every `crm.<table>` and `crm_sync.<table>` they name (schema `crm` is named by src/warehouse/
 * alone, which builds its table names from Tables.ts; so is schema crm_history, its history).
 */
import { readdirSync, readFileSync } from "node:fs"
import { join, relative } from "node:path"

const root = new URL("../../", import.meta.url).pathname
const src = join(root, "src")

/** The owner of each table of schema crm_sync, and of schema crm as a whole. */
export const TableOwners: Readonly<Record<string, ReadonlyArray<string>>> = {
  "crm.*": ["src/warehouse/"],
  "crm_history.*": ["src/warehouse/"],
  "crm_sync.history_settings": ["src/warehouse/History.ts"],
  "crm_sync.webhook_inbox": ["src/webhooks/WebhookInbox.ts"],
  "crm_sync.webhook_subscriptions": ["src/webhooks/Subscriptions.ts"],
  "crm_sync.webhook_refusals": ["src/webhooks/WebhookRefusals.ts"],
  "crm_sync.outbox": ["src/outbound/Outbox.ts"],
  "crm_sync.job_runs": ["src/sync/JobRuns.ts"],
  "crm_sync.crawl_runs": ["src/sync/CrawlRuns.ts"],
  "crm_sync.crawl_sightings": ["src/sync/CrawlRuns.ts"],
  "crm_sync.crawl_misses": ["src/sync/CrawlRuns.ts"],
  "crm_sync.cursors": ["src/sync/Cursors.ts"],
  "crm_sync.reconciliation_reports": ["src/sync/Reconciler.ts"],
  "crm_sync.by_id_checks": ["src/sync/ByIdReconcile.ts"],
  "crm_sync.credentials": ["src/crm/Credentials.ts"],
  "crm_sync.rate_windows": ["src/budget/RateBudget.ts"],
  "crm_sync.rate_blocks": ["src/budget/RateBudget.ts"],
  "crm_sync.undecodable_records": ["src/warehouse/"]
}

export const sources = (folder: string): ReadonlyArray<string> =>
  readdirSync(folder, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory()
      ? sources(join(folder, entry.name))
      : entry.name.endsWith(".ts")
        ? [join(folder, entry.name)]
        : []
  )

/** The code of a file without its comments (a `//` inside a string or template is kept). */
const code = (text: string) =>
  text
    .replace(/\/\*[\s\S]*?\*\//g, "")
    .replace(/^\s*\/\/.*$/gm, "")
    .replace(/([;,{}()])\s*\/\/.*$/gm, "$1")

/**
 * A file's code without comments and without its '…' and "…" strings (names in a metric's
 * description are not SQL): what is left is code and template literals, where crm-sync writes SQL.
 */
const sqlText = (text: string) => code(text).replace(/"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'/g, '""')

/** Every table a file's SQL names, as `schema.table` (`crm.*` for any table of schema crm). */
export const tablesNamed = (text: string): ReadonlySet<string> => {
  const sql = sqlText(text)
  const names = new Set<string>()
  for (const match of sql.matchAll(/\bcrm_sync\.([a-z_]+)/g)) names.add(`crm_sync.${match[1]}`)
  if (/\bcrm\.["a-z_$]/.test(sql)) names.add("crm.*")
  if (/\bcrm_history\.["a-z_$]/.test(sql)) names.add("crm_history.*")
  return names
}

/** The modules that name a table they do not own, as `file: table`. */
export const strangers = (files: ReadonlyArray<{ readonly path: string; readonly text: string }>) =>
  files.flatMap(({ path, text }) =>
    [...tablesNamed(text)].flatMap((table) => {
      const owners = TableOwners[table]
      if (owners === undefined) return [`${path}: ${table} has no owner in TableOwners`]
      return owners.some((owner) => path === owner || (owner.endsWith("/") && path.startsWith(owner)))
        ? []
        : [`${path}: ${table}`]
    })
  )

/** Every module of src/, with its text. */
export const srcModules = () =>
  sources(src).map((path) => ({ path: relative(root, path), text: readFileSync(path, "utf8") }))
