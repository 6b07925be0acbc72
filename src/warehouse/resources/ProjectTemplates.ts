/** Project templates (spec §2.4), crawled page by page, with their milestones and attachments. */
import * as Models from "../../crm/Models.ts"
import { column, define } from "./Declaration.ts"
import { bookId, createdAt, elementsOf, numbered, ordinal } from "./Shared.ts"

const ofTemplate = (what: string) => elementsOf(what, "project_templates")

// Outcomes and form fields belong to a milestone: its position and its id identify it.
const milestonePosition = column(
  "integer",
  "Position of the milestone in the template (project_template_milestones.ordinal).",
  { notNull: true }
)
const milestoneId = column("text", "The milestone's id.", { notNull: true })

export const projectTemplates = define<Models.ProjectTemplate>({
  table: "project_templates",
  comment: "Project templates (spec §2.4), crawled page by page.",
  schema: Models.ProjectTemplate,
  fields: {
    guid: column("text", "The template's guid."),
    title: column("text", "The template's title."),
    description: column("text", "Description."),
    projectable_kind: column("text", "What projects of this template are for: household, contact or business."),
    enable_kanban_view: column("boolean", "Whether the kanban view is on."),
    book_id: bookId,
    book_name: column("text", "Name of the owning book (company-wide templates are listed under every book)."),
    book_initials: column("text", "Initials of the owning book."),
    order_index: column("integer", "Order among templates."),
    created_at: createdAt
  },
  children: [
    {
      table: "project_template_milestones",
      comment: ofTemplate("the milestones of a project template, in order (spec §2.4 `project_milestones`)"),
      parentColumn: "project_template_id",
      list: "project_milestones",
      columns: {
        ordinal,
        id: column("text", "The milestone's own id.", { notNull: true }),
        title: column("text", "The milestone's title."),
        guid: column("text", "The milestone's guid."),
        color: column("text", "Display colour."),
        sort_order: column("integer", "Order as the CRM gives it."),
        auto_advance_trigger: column(
          "text",
          "What advances the milestone automatically (values not shown in the spec)."
        ),
        created_at: column("timestamptz", "When the milestone was created, as the CRM reports it."),
        updated_at: column("timestamptz", "When the milestone last changed, as the CRM reports it.")
      },
      rows: (template) =>
        numbered(template.project_milestones, (m) => ({
          id: m.id,
          title: m.title,
          guid: m.guid,
          color: m.color,
          sort_order: m.sort_order,
          auto_advance_trigger: m.auto_advance_trigger,
          created_at: m.created_at,
          updated_at: m.updated_at
        }))
    },
    {
      table: "project_template_milestone_outcomes",
      comment: ofTemplate(
        "the outcomes of each milestone of a project template (spec §2.4 milestone `project_milestone_outcomes`)"
      ),
      parentColumn: "project_template_id",
      list: "project_milestones",
      key: ["milestone_ordinal", "ordinal"],
      columns: {
        milestone_ordinal: milestonePosition,
        ordinal,
        milestone_id: milestoneId,
        id: column("text", "The outcome's own id.", { notNull: true }),
        label: column("text", "The outcome's label."),
        destination: column("text", "Where the outcome leads (values not shown in the spec)."),
        default_comment: column("text", "Comment filled in by default."),
        target_project_milestone_id: column("text", "The milestone the outcome moves to."),
        sort_order: column("integer", "Order among the milestone's outcomes.")
      },
      rows: (template) =>
        template.project_milestones.flatMap((milestone, milestoneOrdinal) =>
          numbered(milestone.project_milestone_outcomes, (outcome) => ({
            ...outcome,
            milestone_ordinal: milestoneOrdinal,
            milestone_id: milestone.id
          }))
        )
    },
    {
      table: "project_template_milestone_form_fields",
      comment: ofTemplate(
        "the form fields of each milestone of a project template (spec §2.4 milestone `project_milestone_form_fields`)"
      ),
      parentColumn: "project_template_id",
      list: "project_milestones",
      key: ["milestone_ordinal", "ordinal"],
      columns: {
        milestone_ordinal: milestonePosition,
        ordinal,
        milestone_id: milestoneId,
        id: column("text", "The form field's own id.", { notNull: true }),
        label: column("text", "The field's label."),
        field_type: column("text", "Kind of input."),
        guid: column("text", "The field's guid."),
        placeholder: column("text", "Placeholder text."),
        household_record_source: column("text", "Which household record fills it, if any."),
        required: column("boolean", "Whether the field is required."),
        sort_order: column("integer", "Order among the milestone's fields."),
        select_options: column("text[]", "Choices of a select field.")
      },
      rows: (template) =>
        template.project_milestones.flatMap((milestone, milestoneOrdinal) =>
          numbered(milestone.project_milestone_form_fields, (field) => ({
            ...field,
            milestone_ordinal: milestoneOrdinal,
            milestone_id: milestone.id
          }))
        )
    },
    {
      table: "project_template_attachments",
      comment: ofTemplate("files attached to a project template (spec §2.4 `attachments`)"),
      parentColumn: "project_template_id",
      list: "attachments",
      columns: {
        ordinal,
        file_name: column("text", "File name."),
        file_type: column("text", "File type."),
        file_size: column("bigint", "File size in bytes."),
        source: column(
          "text",
          "Where the attachment comes from, as the CRM names it (spec §2.4 attachment source; not crm-sync's write source)."
        ),
        signed_id: column("text", "Signed id of the stored file."),
        download_url: column("text", "Where to download the file."),
        view_url: column("text", "Where to view the file.")
      },
      rows: (template) => numbered(template.attachments, (attachment) => attachment)
    }
  ]
})
