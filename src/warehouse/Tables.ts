/**
 * What the warehouse stores for each resource: one descriptor per table of schema `crm`, declared
 * in `src/warehouse/resources/` (one module per resource) with its model, its typed columns (SQL
 * type, nullability and comment), its child tables and the reference records it reveals.
 * `BatchSql.ts` turns a descriptor into batch SQL; `Declarations` lists every table of schema
 * `crm` as the migrations must make it, from which the column comments (scripts/comments.ts) and
 * the ERD (scripts/erd.ts) are generated and against which the migrated database is checked
 * (test/warehouse/Declarations.integration.test.ts). Adding a resource is a migration plus one
 * module there (docs/warehouse.md, "How to add a resource").
 *
 * Column names are the spec's own (§2). The common columns (`id`, `updated_at`, `deleted_at`,
 * `synced_at`, `source`, `raw`) are declared once in `resources/Declaration.ts`: the SQL sets them.
 */
import { annuityContracts } from "./resources/AnnuityContracts.ts"
import { books } from "./resources/Books.ts"
import { businesses } from "./resources/Businesses.ts"
import { clientChanges, clients } from "./resources/Clients.ts"
import { contacts } from "./resources/Contacts.ts"
import type { TableDeclaration, TableDescriptor } from "./resources/Declaration.ts"
import { financialAccounts } from "./resources/FinancialAccounts.ts"
import { meetings } from "./resources/Meetings.ts"
import { meetingTranscripts } from "./resources/MeetingTranscripts.ts"
import { notes } from "./resources/Notes.ts"
import { projectTemplates } from "./resources/ProjectTemplates.ts"
import { prospects } from "./resources/Prospects.ts"
import { households, teams, users } from "./resources/References.ts"
import { tasks } from "./resources/Tasks.ts"

export type {
  ChildTable,
  PgType,
  ReferenceResource,
  Row,
  Sighting,
  TableDeclaration,
  TableDescriptor
} from "./resources/Declaration.ts"

/** Every table of schema `crm` that holds a resource, by its name (the contract's table names). */
export const Tables = {
  books,
  users,
  teams,
  households,
  businesses,
  contacts,
  prospects,
  clients,
  meetings,
  meeting_transcripts: meetingTranscripts,
  tasks,
  notes,
  project_templates: projectTemplates,
  annuity_contracts: annuityContracts,
  financial_accounts: financialAccounts
} as const

/** A resource of the warehouse: the name of its table in schema `crm`. */
export type Resource = keyof typeof Tables

export const Resources = Object.keys(Tables) as ReadonlyArray<Resource>

/** The decoded record type of a resource. */
export type ResourceRecord<R extends Resource> = (typeof Tables)[R] extends TableDescriptor<infer A> ? A : never

/**
 * Every table of schema `crm` (not its `current_*` views), declared: the resource tables, their
 * child tables and `client_changes`, in table-name order.
 */
export const Declarations: ReadonlyArray<TableDeclaration> = [
  ...(Object.values(Tables) as ReadonlyArray<TableDescriptor<unknown>>).flatMap((table) => [
    table.declaration,
    ...table.children.map((child) => child.declaration)
  ]),
  clientChanges
].toSorted((a, b) => (a.table < b.table ? -1 : a.table > b.table ? 1 : 0))

/** Where a write came from (the contract's `source` values). */
export const Sources = ["poll", "crawl", "webhook", "write", "backfill", "reconcile"] as const
export type Source = (typeof Sources)[number]

export const isResource = (value: string): value is Resource => Object.hasOwn(Tables, value)
