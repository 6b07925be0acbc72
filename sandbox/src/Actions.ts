/**
 * What the CRM's own users do: create, change and delete records, with the webhook events that
 * spec §3 and §6.4 attach to each change. The admin API and the API's write endpoints both go
 * through here, so a prospect created by `POST /v1/prospects` and one created through the admin
 * API emit the same `prospect.created`. The actions live with their kind (`TaskActions.ts`,
 * `MeetingActions.ts`, `NoteActions.ts`, `ClientActions.ts`, `SilentActions.ts`); their inputs
 * are the `Schema` structs of `ActionInputs.ts`. This layer only hands them their services.
 */
import { Context, Effect, Layer } from "effect"
import type {
  CreateAnnuityContractInput,
  CreateBusinessInput,
  CreateClientInput,
  CreateFinancialAccountInput,
  CreateMeetingInput,
  CreateNoteInput,
  CreateTaskInput,
  DriftAction,
  DriftTarget,
  PersonInput,
  ProspectInput,
  TranscriptInput,
  UpdateAnnuityContractInput,
  UpdateBusinessInput,
  UpdateClientInput,
  UpdateFinancialAccountInput,
  UpdateMeetingInput,
  UpdateNoteInput,
  UpdateTaskInput
} from "./ActionInputs.ts"
import type { ActionDeps } from "./ActionSupport.ts"
import { createClient, createContact, createProspect, updateClient } from "./ClientActions.ts"
import type { ApiError } from "./errors.ts"
import { createMeeting, deleteMeeting, setTranscript, updateMeeting } from "./MeetingActions.ts"
import { createNote, deleteNote, updateNote } from "./NoteActions.ts"
import type { Rng } from "./Prng.ts"
import type {
  AnnuityContractRow,
  BusinessRow,
  ContactRow,
  FinancialAccountRow,
  NoteRow,
  ProspectRow
} from "./Records.ts"
import { SandboxClock } from "./SandboxClock.ts"
import type { clientApi, meetingApi, taskApi } from "./Serializers.ts"
import {
  createAnnuityContract,
  createBusiness,
  createFinancialAccount,
  deleteProjectTemplate,
  drift,
  remover,
  updateAnnuityContract,
  updateBusiness,
  updateFinancialAccount
} from "./SilentActions.ts"
import { SandboxStore } from "./Store.ts"
import { completeTask, createTask, deleteTask, reopenTask, updateTask } from "./TaskActions.ts"
import { SandboxWebhooks } from "./Webhooks.ts"

type Api<A> = Effect.Effect<A, ApiError>

export class SandboxActions extends Context.Service<
  SandboxActions,
  {
    createTask(input: CreateTaskInput): Api<ReturnType<typeof taskApi>>
    updateTask(id: string, input: UpdateTaskInput): Api<ReturnType<typeof taskApi>>
    completeTask(id: string): Api<ReturnType<typeof taskApi>>
    reopenTask(id: string): Api<ReturnType<typeof taskApi>>
    deleteTask(id: string): Api<void>
    createMeeting(input: CreateMeetingInput): Api<ReturnType<typeof meetingApi>>
    updateMeeting(id: string, input: UpdateMeetingInput): Api<ReturnType<typeof meetingApi>>
    setTranscript(id: string, input: TranscriptInput): Api<ReturnType<typeof meetingApi>>
    deleteMeeting(id: string): Api<void>
    createNote(input: CreateNoteInput): Api<NoteRow>
    updateNote(id: string, input: UpdateNoteInput): Api<NoteRow>
    deleteNote(id: string): Api<void>
    createClient(input: CreateClientInput): Api<ReturnType<typeof clientApi>>
    updateClient(id: string, input: UpdateClientInput): Api<ReturnType<typeof clientApi>>
    /** Validates and stores a contact (`POST /v1/contacts`); no event (its shape is not in the spec). */
    createContact(input: PersonInput): Api<ContactRow>
    /** Validates and stores a prospect (`POST /v1/prospects`); emits `prospect.created`. */
    createProspect(input: ProspectInput): Api<ProspectRow>
    createBusiness(input: CreateBusinessInput): Api<BusinessRow>
    updateBusiness(id: string, input: UpdateBusinessInput): Api<BusinessRow>
    deleteBusiness(id: string): Api<void>
    createFinancialAccount(input: CreateFinancialAccountInput): Api<FinancialAccountRow>
    updateFinancialAccount(id: string, input: UpdateFinancialAccountInput): Api<FinancialAccountRow>
    deleteFinancialAccount(id: string): Api<void>
    createAnnuityContract(input: CreateAnnuityContractInput): Api<AnnuityContractRow>
    updateAnnuityContract(id: string, input: UpdateAnnuityContractInput): Api<AnnuityContractRow>
    deleteAnnuityContract(id: string): Api<void>
    /** A project template (book or company-wide) disappears from the listings (no event). */
    deleteProjectTemplate(id: string): Api<void>
    /**
     * One page-drift mutation among the books a crawl sees: `insert` a record, `update` one, or
     * `delete` one from before `offset` (so the crawl's later pages shift and it skips a record).
     */
    drift(
      target: DriftTarget,
      action: DriftAction,
      books: ReadonlyArray<number>,
      offset: number,
      rng: Rng
    ): Effect.Effect<{ readonly action: DriftAction; readonly id: string } | undefined>
  }
>()("crm-sync/sandbox/SandboxActions") {
  static readonly layer = Layer.effect(
    SandboxActions,
    Effect.gen(function* () {
      const deps: ActionDeps = {
        store: yield* SandboxStore,
        clock: yield* SandboxClock,
        webhooks: yield* SandboxWebhooks
      }
      return SandboxActions.of({
        createTask: (input) => createTask(deps, input),
        updateTask: (id, input) => updateTask(deps, id, input),
        completeTask: (id) => completeTask(deps, id),
        reopenTask: (id) => reopenTask(deps, id),
        deleteTask: (id) => deleteTask(deps, id),
        createMeeting: (input) => createMeeting(deps, input),
        updateMeeting: (id, input) => updateMeeting(deps, id, input),
        setTranscript: (id, input) => setTranscript(deps, id, input),
        deleteMeeting: (id) => deleteMeeting(deps, id),
        createNote: (input) => createNote(deps, input),
        updateNote: (id, input) => updateNote(deps, id, input),
        deleteNote: (id) => deleteNote(deps, id),
        createClient: (input) => createClient(deps, input),
        updateClient: (id, input) => updateClient(deps, id, input),
        createContact: (input) => createContact(deps, input),
        createProspect: (input) => createProspect(deps, input),
        createBusiness: (input) => createBusiness(deps, input),
        updateBusiness: (id, input) => updateBusiness(deps, id, input),
        deleteBusiness: remover(deps, (world) => world.businesses, "deleteBusiness"),
        createFinancialAccount: (input) => createFinancialAccount(deps, input),
        updateFinancialAccount: (id, input) => updateFinancialAccount(deps, id, input),
        deleteFinancialAccount: remover(deps, (world) => world.financialAccounts, "deleteFinancialAccount"),
        createAnnuityContract: (input) => createAnnuityContract(deps, input),
        updateAnnuityContract: (id, input) => updateAnnuityContract(deps, id, input),
        deleteAnnuityContract: remover(deps, (world) => world.annuityContracts, "deleteAnnuityContract"),
        deleteProjectTemplate: (id) => deleteProjectTemplate(deps, id),
        drift: (target, action, books, offset, rng) => drift(deps, target, action, books, offset, rng)
      })
    })
  )
}
