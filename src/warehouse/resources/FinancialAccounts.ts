/** Financial accounts (spec §2.5a): balances in cents, numbers masked. */
import * as Models from "../../crm/Models.ts"
import { column, define } from "./Declaration.ts"
import { bookId, createdAt, household, householdId, versionFrom } from "./Shared.ts"

export const financialAccounts = define<Models.FinancialAccount>({
  table: "financial_accounts",
  comment: "Financial accounts (spec §2.5a): balances in cents, numbers masked.",
  schema: Models.FinancialAccount,
  other: versionFrom("financial_accounts"),
  fields: {
    name: column("text", "The account's name."),
    institution_name: column("text", "The institution holding the account."),
    account_number: column("text", "Account number, masked by the CRM."),
    notes: column("text", "Notes."),
    other_tax_advantaged_type_label: column("text", 'Label of the tax-advantaged type when it is "other".'),
    book_id: bookId,
    household_id: householdId(),
    account_type: column("text", "Account type (values not shown in the spec)."),
    tax_advantaged_type: column("text", "Tax-advantaged type (values not shown in the spec)."),
    balance_in_cents: column("bigint", "Balance in cents (spec §2.5: balances are in cents)."),
    balance_as_of: column("timestamptz", "When the balance was taken."),
    // A list of plain ids, so an array (GIN-indexed: owner_ids @> ARRAY['...']) rather than a child table.
    owner_ids: column("text[]", "Ids of the account's owners."),
    custom_fields: column("jsonb", "Custom field values by key."),
    created_at: createdAt
  },
  sightings: (account) => household(account.household_id)
})
