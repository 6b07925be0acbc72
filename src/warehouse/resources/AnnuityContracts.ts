/** Annuity contracts (spec §2.5): financial terms and values only, numbers masked; parties, placements, values. */
import * as Models from "../../crm/Models.ts"
import { column, define } from "./Declaration.ts"
import { businessId, createdAt, elementsOf, household, householdId, numbered, ordinal, versionFrom } from "./Shared.ts"

const ofContract = (what: string) => elementsOf(what, "annuity_contracts")

export const annuityContracts = define<Models.AnnuityContract>({
  table: "annuity_contracts",
  comment: "Annuity contracts (spec §2.5): financial terms and values only, numbers masked.",
  schema: Models.AnnuityContract,
  other: versionFrom("annuity_contracts"),
  fields: {
    carrier_key: column("text", "The carrier's key."),
    carrier_name: column("text", "The carrier's name."),
    contract_number: column("text", "Contract number, masked by the CRM."),
    product_code: column("text", "The product's code."),
    product_name: column("text", "The product's name."),
    status: column("text", "Contract status (values not shown in the spec)."),
    tax_status: column("text", "Tax status (values not shown in the spec)."),
    registration_type: column("text", "Registration type."),
    data_provider: column("text", "Where the contract data comes from."),
    notes: column("text", "Notes (the one editable field of imported contracts)."),
    contract_type: column("text", "Contract type, e.g. a variable annuity type."),
    established_on: column("date", "Date established."),
    issued_on: column("date", "Date issued."),
    anniversary_on: column("date", "Contract anniversary date."),
    matures_on: column("date", "Maturity date."),
    last_synced_at: column("timestamptz", "When the CRM last synced the contract from its provider."),
    term_authority: column("text", "Who may change the terms, e.g. advisor."),
    current_values: column("jsonb", "Current values, as the object the CRM sends."),
    created_at: createdAt
  },
  children: [
    {
      table: "annuity_contract_parties",
      comment: ofContract("the contract's parties (spec §2.5 `parties`)"),
      parentColumn: "annuity_contract_id",
      list: "parties",
      columns: {
        ordinal,
        id: column("text", "The party entry's own id."),
        role: column("text", "The party's role on the contract."),
        display_name: column("text", "The party's name as displayed."),
        participant_type: column("text", "Kind of participant, e.g. Person."),
        participant_id: column("text", "Id of the participant record.")
      },
      rows: (contract) => numbered(contract.parties, (party) => party)
    },
    {
      table: "annuity_contract_placements",
      comment: ofContract("where the contract is placed: book, household, business or trust (spec §2.5 `placements`)"),
      parentColumn: "annuity_contract_id",
      list: "placements",
      columns: {
        ordinal,
        id: column("text", "The placement's own id."),
        book_id: column("text", "The book the contract is placed in: books.id."),
        household_id: householdId(),
        business_id: businessId(),
        trust_id: column("text", "The trust the contract is placed with, if any."),
        placement_authority: column("text", "Who may change the placement (e.g. advisor).")
      },
      rows: (contract) => numbered(contract.placements, (placement) => placement)
    },
    {
      table: "annuity_contract_values",
      comment: ofContract("the contract's valuations (spec §2.5 `values`)"),
      parentColumn: "annuity_contract_id",
      list: "values",
      columns: {
        ordinal,
        id: column("text", "The valuation's own id."),
        kind: column("text", "Kind of value (values not shown in the spec)."),
        amount: column(
          "numeric",
          "Amount in dollars (the API sends it as a string; spec §2.5: values are in dollars)."
        ),
        as_of_date: column("date", "Date the value is as of."),
        created_at: column("timestamptz", "When the valuation was created, as the CRM reports it."),
        updated_at: column("timestamptz", "When the valuation last changed, as the CRM reports it."),
        source_kind: column("text", "Where the value came from (only advisor valuations can be edited).")
      },
      // The element's annuity_contract_id is the parent column (it is the parent's id).
      rows: (contract) =>
        numbered(contract.values, (value) => ({
          id: value.id,
          kind: value.kind,
          amount: value.amount,
          as_of_date: value.as_of_date,
          created_at: value.created_at,
          updated_at: value.updated_at,
          source_kind: value.source_kind
        }))
    }
  ],
  sightings: (contract) => contract.placements.flatMap((placement) => household(placement.household_id))
})
