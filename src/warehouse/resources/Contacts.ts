/** Contacts (spec §2.2), created by crm-sync's writes and seen in contact events, and their lists. */
import * as Models from "../../crm/Models.ts"
import { column, define } from "./Declaration.ts"
import { addressColumns, bookId, createdAt, elementsOf, emailColumns, numbered, phoneColumns } from "./Shared.ts"

export const contacts = define<Models.Contact>({
  table: "contacts",
  comment: "Contacts (spec §2.2): created by crm-sync's writes and seen in contact events.",
  schema: Models.Contact,
  fields: {
    book_id: bookId,
    first_name: column("text", "First name."),
    last_name: column("text", "Last name."),
    middle_name: column("text", "Middle name."),
    preferred_name: column("text", "Preferred name."),
    salutation: column("text", "Salutation."),
    suffix: column("text", "Name suffix."),
    gender: column("text", "One of female, male, nonbinary, other, prefer_not_to_say."),
    designations: column("text", "Professional designations as free text."),
    custom_fields: column("jsonb", "Custom field values by key (keys defined for the Contact entity type)."),
    created_at: createdAt
  },
  children: [
    {
      table: "contact_email_addresses",
      comment: elementsOf("the contact's email addresses (spec §2.2 `email_addresses`)", "contacts"),
      parentColumn: "contact_id",
      list: "email_addresses",
      columns: emailColumns,
      rows: (contact) => numbered(contact.email_addresses, (email) => email)
    },
    {
      table: "contact_phone_numbers",
      comment: elementsOf("the contact's phone numbers (spec §2.2 `phone_numbers`)", "contacts"),
      parentColumn: "contact_id",
      list: "phone_numbers",
      columns: phoneColumns,
      rows: (contact) => numbered(contact.phone_numbers, (phone) => phone)
    },
    {
      table: "contact_addresses",
      comment: elementsOf("the contact's postal addresses (spec §2.2 `addresses`)", "contacts"),
      parentColumn: "contact_id",
      list: "addresses",
      columns: addressColumns,
      rows: (contact) => numbered(contact.addresses, (address) => address)
    }
  ]
})
