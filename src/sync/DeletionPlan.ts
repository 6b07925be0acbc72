/**
 * DeletionPlan: whether the records two clean crawls missed may be deleted, or the deletion is
 * refused as too large, and the notes a run keeps about it. Pure; CrawlRuns applies it.
 */
import { percent } from "../observability/Text.ts"

/** What a clean crawl's deletion candidates come to: delete them, or refuse, and the notes to keep. */
export interface DeletionPlan {
  readonly refuse: boolean
  readonly notes: ReadonlyArray<string>
}

/**
 * Whether the `ids` two clean crawls missed may go, of `tracked` records, `absent` of them missed
 * by this crawl: more than `threshold` of them at once is refused (beyond `allowAtOnce`), and a
 * large absence that deletes nothing yet is noted as a warning.
 */
export const planDeletion = (
  ids: ReadonlyArray<string>,
  tracked: number,
  absent: number,
  options: { readonly threshold: number; readonly allowAtOnce?: number }
): DeletionPlan => {
  const share = tracked === 0 ? 0 : ids.length / tracked
  const refuse = ids.length > (options.allowAtOnce ?? 0) && share > options.threshold
  const notes: Array<string> = []
  if (refuse) {
    notes.push(
      `deletion refused: ${ids.length} of ${tracked} records (${percent(share)}) missing from two clean crawls, ` +
        `more than the threshold of ${percent(options.threshold)}; nothing deleted`
    )
  }
  if (absent > 0 && tracked > 0 && absent / tracked > options.threshold && !refuse) {
    notes.push(
      `${absent} of ${tracked} tracked records (${percent(absent / tracked)}) were absent from this crawl; ` +
        `they are deleted only if the next clean crawl misses them too, and then only within the threshold`
    )
  }
  return { refuse, notes }
}
