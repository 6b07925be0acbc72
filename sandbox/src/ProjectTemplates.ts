/**
 * The generated project templates (spec §2, `GET /v1/project_templates`): two company-wide
 * templates per company plus one per book, each with three to five milestones that advance in
 * order (the last completes the project), optional form fields and an optional attachment.
 * Built eagerly and deterministically from the seed, like the rest of the world's directory.
 */
import { hash, hashString, Rng } from "./Prng.ts"
import type {
  Attachment,
  BookRow,
  CompanyRow,
  Milestone,
  MilestoneFormField,
  MilestoneOutcome,
  ProjectTemplateRow
} from "./Records.ts"
import { DAY, ordinalId, RANGE_START, slug } from "./RecordBuilders.ts"
import { iso } from "./SandboxClock.ts"
import * as V from "./Vocabulary.ts"

/** A version-4-shaped UUID derived from a hash, for `guid` fields. */
const guidOf = (...parts: ReadonlyArray<number>): string => {
  const hex = [1, 2, 3, 4]
    .map((salt) =>
      hash(...parts, salt)
        .toString(16)
        .padStart(8, "0")
    )
    .join("")
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-4${hex.slice(13, 16)}-a${hex.slice(17, 20)}-${hex.slice(20, 32)}`
}

/** Where milestone `m` leads: the last completes the project, the others advance (and, after the first, can send back). */
const outcomesOf = (milestoneIds: ReadonlyArray<string>, m: number): Array<MilestoneOutcome> => {
  const prefix = `out_${milestoneIds[m]!.slice(3)}`
  if (m === milestoneIds.length - 1) {
    return [
      {
        id: `${prefix}_1`,
        label: "Complete",
        destination: "complete_project",
        default_comment: null,
        target_project_milestone_id: null,
        sort_order: 1
      }
    ]
  }
  const advance: MilestoneOutcome = {
    id: `${prefix}_1`,
    label: "Advance",
    destination: "next_milestone",
    default_comment: "Moving forward.",
    target_project_milestone_id: milestoneIds[m + 1]!,
    sort_order: 1
  }
  if (m === 0) return [advance]
  return [
    advance,
    {
      id: `${prefix}_2`,
      label: "Send back",
      destination: "specific_milestone",
      default_comment: "Needs rework.",
      target_project_milestone_id: milestoneIds[m - 1]!,
      sort_order: 2
    }
  ]
}

const formFieldsOf = (
  rng: Rng,
  seed: number,
  ordinal: number,
  m: number,
  milestoneId: string,
  kind: ProjectTemplateRow["projectable_kind"]
): Array<MilestoneFormField> =>
  Array.from({ length: rng.int(0, 3) }, (_, f) => {
    const fieldType = rng.pick(V.FORM_FIELD_TYPES)
    return {
      id: `ff_${milestoneId.slice(3)}_${f + 1}`,
      label: ["Target date", "Documents received", "Risk profile", "Funding amount"][f % 4]!,
      field_type: fieldType,
      guid: guidOf(seed, ordinal, m, f, 2),
      placeholder: fieldType === "text" || fieldType === "textarea" ? "Type here" : null,
      household_record_source: f === 0 && kind === "household" ? "household.name" : null,
      required: rng.bool(0.5),
      sort_order: f + 1,
      select_options: fieldType === "select" ? ["Conservative", "Moderate", "Aggressive"] : []
    }
  })

/** The milestones of template `ordinal` (`id`), in order; PRNG draws go milestone by milestone. */
const milestonesOf = (
  rng: Rng,
  seed: number,
  ordinal: number,
  id: string,
  kind: ProjectTemplateRow["projectable_kind"],
  times: { readonly created: number; readonly updated: number }
): Array<Milestone> => {
  const milestoneCount = rng.int(3, 5)
  const milestoneIds = Array.from({ length: milestoneCount }, (_, m) => `ms_${id.slice(4)}_${m + 1}`)
  return milestoneIds.map((milestoneId, m) => ({
    id: milestoneId,
    title: V.MILESTONE_TITLES[m % V.MILESTONE_TITLES.length]!,
    project_template_id: id,
    guid: guidOf(seed, ordinal, m, 1),
    color: V.MILESTONE_COLORS[m % V.MILESTONE_COLORS.length]!,
    sort_order: m + 1,
    auto_advance_trigger:
      m === milestoneCount - 1 ? "none" : rng.pick(["none", "all_tasks_completed", "form_completed"]),
    created_at: iso(times.created),
    updated_at: iso(times.updated),
    project_milestone_outcomes: outcomesOf(milestoneIds, m),
    project_milestone_form_fields: formFieldsOf(rng, seed, ordinal, m, milestoneId, kind)
  }))
}

const attachmentsOf = (rng: Rng, title: string, id: string): Array<Attachment> =>
  rng.bool(0.4)
    ? [
        {
          file_name: `${slug(title)}-checklist.pdf`,
          file_type: "application/pdf",
          file_size: rng.int(20_000, 900_000),
          source: "upload",
          signed_id: `sid_${rng.digits(12)}`,
          download_url: `https://files.example.com/templates/${id}/download`,
          view_url: `https://files.example.com/templates/${id}/view`
        }
      ]
    : []

/** Template `ordinal`, the `orderIndex`-th of its company: company-wide when `book` is null. */
const templateOf = (
  seed: number,
  company: CompanyRow,
  book: BookRow | null,
  orderIndex: number,
  ordinal: number
): ProjectTemplateRow => {
  const rng = new Rng(hash(seed, hashString("project_template"), ordinal))
  const [title, kind, description] = V.TEMPLATE_SPECS[(company.ordinal * 2 + orderIndex) % V.TEMPLATE_SPECS.length]!
  const id = ordinalId("tpl", ordinal)
  const created = RANGE_START + Math.floor(rng.float() * 180 * DAY)
  const updated = created + Math.floor(rng.float() * 365 * DAY)
  const milestones = milestonesOf(rng, seed, ordinal, id, kind, { created, updated })
  return {
    id,
    guid: guidOf(seed, ordinal, 0),
    title: book === null ? title : `${title} (${book.initials})`,
    description,
    projectable_kind: kind,
    enable_kanban_view: rng.bool(0.5),
    book_id: book?.id ?? null,
    book_name: book?.name ?? null,
    book_initials: book?.initials ?? null,
    order_index: orderIndex + 1,
    created_at: iso(created),
    updated_at: iso(updated),
    project_milestones: milestones,
    attachments: attachmentsOf(rng, title, id),
    company: company.ordinal
  }
}

/** Two company-wide templates per company plus one per book. */
export const buildTemplates = (
  seed: number,
  companies: ReadonlyArray<CompanyRow>,
  books: ReadonlyArray<BookRow>
): Array<ProjectTemplateRow> => {
  const templates: Array<ProjectTemplateRow> = []
  for (const company of companies) {
    const companyBooks = books.filter((book) => book.company === company.ordinal)
    const owners: Array<BookRow | null> = [null, null, ...companyBooks]
    owners.forEach((book, orderIndex) => {
      templates.push(templateOf(seed, company, book, orderIndex, templates.length))
    })
  }
  return templates
}
