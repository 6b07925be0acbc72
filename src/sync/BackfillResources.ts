/**
 * The names `crm-sync backfill --resource` accepts. Kept apart from the backfill itself so that the
 * command line can offer them without loading the sync modules.
 */

/** What `--resource` accepts, in the order a full backfill reads them. */
export const BackfillResources = ["reference", "businesses", "annuity_contracts", "financial_accounts"] as const
export type BackfillResource = (typeof BackfillResources)[number]

/** Tables filled by the reference step, accepted as `--resource` names for it. */
const referenceAliases = ["me", "books", "users", "teams", "project_templates"] as const

/** Every name `--resource` accepts: the resources, and the reference step's tables. */
export const BackfillResourceNames = [...BackfillResources, ...referenceAliases] as const

export const parseBackfillResource = (name: string): BackfillResource | undefined =>
  (BackfillResources as ReadonlyArray<string>).includes(name)
    ? (name as BackfillResource)
    : (referenceAliases as ReadonlyArray<string>).includes(name)
      ? "reference"
      : undefined

export type BackfillResourceName = (typeof BackfillResourceNames)[number]
