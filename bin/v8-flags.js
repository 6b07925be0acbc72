// V8 flags by command (docs/decisions.md: "Memory"). V8's young generation is fixed when Node
// starts. A backfill allocates fast and writes ~15% more records per CPU second with 32 MB
// semi-spaces; every other command, the daemon above all, spends most of its life idle, and a
// young generation of 32 MB semi-spaces stays resident (about 35 MB more) while it waits.
export const SEMI_SPACE = "--max-semi-space-size"

/** The flags Node should start with for these command-line arguments. */
export const v8FlagsFor = (args) => [`${SEMI_SPACE}=${args.includes("backfill") ? 32 : 8}`]

/** Whether Node was started with a young-generation size of its own (an operator's choice is kept). */
export const hasSemiSpaceFlag = (execArgv) => execArgv.some((arg) => arg.startsWith(SEMI_SPACE))
