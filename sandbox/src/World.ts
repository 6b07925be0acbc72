/** The generated CRM data the sandbox serves: its companies, users, books and every record collection. */
import type { Collection } from "./Collection.ts"
import type {
  AnnuityContractRow,
  BookRow,
  BusinessRow,
  ClientRow,
  CompanyRow,
  ContactRow,
  FinancialAccountRow,
  HouseholdRow,
  MeetingRow,
  NoteRow,
  ProjectTemplateRow,
  ProspectRow,
  TagRow,
  TaskRow,
  TeamRow,
  UserRow
} from "./Records.ts"

export interface World {
  readonly seed: number
  readonly companies: ReadonlyArray<CompanyRow>
  readonly users: ReadonlyArray<UserRow>
  readonly usersById: ReadonlyMap<string, UserRow>
  readonly teams: ReadonlyArray<TeamRow>
  readonly teamsById: ReadonlyMap<string, TeamRow>
  readonly books: ReadonlyArray<BookRow>
  readonly booksById: ReadonlyMap<string, BookRow>
  /** Tags per company ordinal. */
  readonly tags: ReadonlyArray<ReadonlyArray<TagRow>>
  readonly tagsById: ReadonlyMap<string, TagRow>
  readonly customFields: { readonly contact: ReadonlyArray<string>; readonly financial_account: ReadonlyArray<string> }
  readonly templates: Array<ProjectTemplateRow>
  readonly households: Collection<HouseholdRow>
  readonly contacts: Collection<ContactRow>
  readonly prospects: Collection<ProspectRow>
  readonly clients: Collection<ClientRow>
  readonly businesses: Collection<BusinessRow>
  readonly annuityContracts: Collection<AnnuityContractRow>
  readonly financialAccounts: Collection<FinancialAccountRow>
  readonly meetings: Collection<MeetingRow>
  readonly tasks: Collection<TaskRow>
  readonly notes: Collection<NoteRow>
}
