/** Businesses (spec §2.3), polled with updated_since, and their lists. */
import * as Models from "../../crm/Models.ts"
import { column, define } from "./Declaration.ts"
import {
  addressColumns,
  bookId,
  createdAt,
  elementsOf,
  emailColumns,
  numbered,
  phoneColumns,
  tagColumns,
  tagRow,
  versionFrom
} from "./Shared.ts"

export const businesses = define<Models.Business>({
  table: "businesses",
  comment: "Businesses (spec §2.3), polled with updated_since.",
  schema: Models.Business,
  other: versionFrom("businesses"),
  fields: {
    book_id: bookId,
    name: column("text", "The business's name."),
    industry: column("text", "Industry."),
    website_url: column("text", "Website address."),
    tax_id: column("text", "Tax id."),
    additional_info: column("text", "Free-text additional information."),
    created_at: createdAt
  },
  children: [
    {
      table: "business_email_addresses",
      comment: elementsOf("the business's email addresses (spec §2.3 `email_addresses`)", "businesses"),
      parentColumn: "business_id",
      list: "email_addresses",
      columns: emailColumns,
      rows: (business) => numbered(business.email_addresses, (email) => email)
    },
    {
      table: "business_phone_numbers",
      comment: elementsOf("the business's phone numbers (spec §2.3 `phone_numbers`)", "businesses"),
      parentColumn: "business_id",
      list: "phone_numbers",
      columns: phoneColumns,
      rows: (business) => numbered(business.phone_numbers, (phone) => phone)
    },
    {
      table: "business_addresses",
      comment: elementsOf("the business's postal addresses (spec §2.3 `addresses`)", "businesses"),
      parentColumn: "business_id",
      list: "addresses",
      columns: addressColumns,
      rows: (business) => numbered(business.addresses, (address) => address)
    },
    {
      table: "business_tags",
      comment: elementsOf("the business's tags (spec §2.3 `tags`)", "businesses"),
      parentColumn: "business_id",
      list: "tags",
      columns: tagColumns,
      rows: (business) => numbered(business.tags, tagRow)
    }
  ]
})
