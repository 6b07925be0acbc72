/**
 * The floors of src/ (STYLE.md, docs/architecture.md): a file imports only from its own folder or a
 * folder on a lower floor; sync/, webhooks/ and outbound/ stand side by side and never import each
 * other. No files of src/ or sandbox/src/ import each other in a loop (type imports and import()
 * included). The sandbox is a package of its own: no relative import crosses between it and src/.
 */
import { assert, describe, it } from "@effect/vitest"
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { dirname, join, normalize } from "node:path"

const root = new URL("../../", import.meta.url).pathname

/** The floor of each folder of src/ (its first path segment), from the ground up. */
const FLOORS: Readonly<Record<string, number>> = {
  config: 0,
  observability: 0,
  budget: 1,
  crm: 2,
  warehouse: 3,
  sync: 4,
  webhooks: 4,
  outbound: 4,
  admin: 5,
  cli: 6,
  "main.ts": 7
}

const sources = (folder: string): ReadonlyArray<string> =>
  readdirSync(join(root, folder), { recursive: true, encoding: "utf8" })
    .filter((path) => path.endsWith(".ts"))
    .map((path) => join(folder, path))

/** A file's source without its comments (block comments, and lines that are a `//` comment). */
const codeOf = (path: string) =>
  readFileSync(join(root, path), "utf8")
    .replace(/\/\*[\s\S]*?\*\//g, "")
    .replace(/^\s*\/\/.*$/gm, "")

/** The files of this repository a file imports (`import`, `import type`, `export … from`, `import()`). */
const importsOf = (path: string): ReadonlyArray<string> =>
  [...codeOf(path).matchAll(/(?:\bfrom|\bimport)\s*\(?\s*["']([^"']+)["']/g)]
    .map((match) => match[1]!)
    .filter((target) => target.startsWith("."))
    .map((target) => normalize(join(dirname(path), target)))

const graphOf = (files: ReadonlyArray<string>): ReadonlyMap<string, ReadonlyArray<string>> =>
  new Map(files.map((file) => [file, importsOf(file)]))

/** `src/sync/Scheduler.ts` → `sync`; `src/main.ts` → `main.ts`. */
const folderOf = (path: string) => path.split("/")[1]!

/** Every import of src/ that runs up a floor or across to a side-by-side folder. */
const upward = (graph: ReadonlyMap<string, ReadonlyArray<string>>): ReadonlyArray<string> =>
  [...graph].flatMap(([file, targets]) =>
    targets
      .filter((target) => target.startsWith("src/"))
      .filter((target) => {
        const from = folderOf(file)
        const to = folderOf(target)
        return from !== to && !(FLOORS[to]! < FLOORS[from]!)
      })
      .map(
        (target) =>
          `${file} (${folderOf(file)}, floor ${FLOORS[folderOf(file)]}) imports ${target} ` +
          `(${folderOf(target)}, floor ${FLOORS[folderOf(target)]})`
      )
  )

/** Every import circle (Tarjan's strongly connected components of two files or more), as `a -> b -> a`. */
const circles = (graph: ReadonlyMap<string, ReadonlyArray<string>>): ReadonlyArray<string> => {
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: Array<string> = []
  const found: Array<string> = []
  const visit = (file: string) => {
    index.set(file, index.size)
    low.set(file, index.get(file)!)
    stack.push(file)
    for (const target of graph.get(file) ?? []) {
      if (!graph.has(target)) continue
      if (!index.has(target)) {
        visit(target)
        low.set(file, Math.min(low.get(file)!, low.get(target)!))
      } else if (stack.includes(target)) low.set(file, Math.min(low.get(file)!, index.get(target)!))
    }
    if (low.get(file) !== index.get(file)) return
    const component: Array<string> = []
    let member: string
    do {
      member = stack.pop()!
      component.push(member)
    } while (member !== file)
    if (component.length > 1) found.push(loopThrough(graph, new Set(component), file))
  }
  for (const file of graph.keys()) if (!index.has(file)) visit(file)
  return found
}

/** One loop of a circle, from `start` back to it (breadth first, so the shortest). */
const loopThrough = (
  graph: ReadonlyMap<string, ReadonlyArray<string>>,
  members: ReadonlySet<string>,
  start: string
) => {
  const previous = new Map<string, string>()
  const queue = [start]
  while (queue.length > 0) {
    const file = queue.shift()!
    for (const target of graph.get(file) ?? []) {
      if (!members.has(target)) continue
      if (target === start) {
        const path: Array<string> = []
        for (let at = file; at !== start; at = previous.get(at)!) path.unshift(at)
        return [start, ...path, start].join(" -> ")
      }
      if (!previous.has(target)) {
        previous.set(target, file)
        queue.push(target)
      }
    }
  }
  return [...members].join(", ")
}

describe("floors and circles", () => {
  const graph = graphOf([...sources("src"), ...sources("sandbox/src")])

  it("reads the imports of every source file", () => {
    assert.isAbove(graph.size, 150)
    assert.isAbove([...graph.values()].flat().length, 600)
    const missing = [...graph].flatMap(([file, targets]) =>
      targets.filter((target) => !existsSync(join(root, target))).map((target) => `${file} -> ${target}`)
    )
    assert.deepStrictEqual(missing, [])
  })

  it("every folder of src/ has its floor", () => {
    const folders = new Set(sources("src").map(folderOf))
    assert.deepStrictEqual(
      [...folders].filter((folder) => FLOORS[folder] === undefined),
      []
    )
  })

  it("no import of src/ runs up a floor or across to a folder beside it", () => {
    assert.deepStrictEqual(upward(graph), [])
  })

  it("no relative import crosses between src/ and the sandbox package", () => {
    const crossing = [...graph].flatMap(([file, targets]) =>
      targets
        .filter((target) => /^(src|sandbox)\//.test(target) && target.split("/")[0] !== file.split("/")[0])
        .map((target) => `${file} -> ${target}`)
    )
    assert.deepStrictEqual(crossing, [])
  })

  it("no files import each other in a loop", () => {
    assert.deepStrictEqual(circles(graph), [])
  })
})
