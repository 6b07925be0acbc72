/**
 * JsonBody: a delivery body read as JSON the one way both the intake and the processor read it —
 * strict UTF-8, its nesting checked (JsonDepth) before anything parses it. It never throws: a body
 * that cannot be read says why, and each caller words the reason it stores.
 */
import * as Result from "effect/Result"
import { nestsDeeperThan, tooDeep } from "./JsonDepth.ts"

/** Why a body is not JSON crm-sync reads; `detail` is the parser's own message. */
export type BodyProblem =
  { readonly _tag: "NotUtf8" } | { readonly _tag: "NotJson"; readonly detail: string } | { readonly _tag: "TooDeep" }

const utf8 = new TextDecoder("utf-8", { fatal: true })

export const parseJsonBody = (body: Uint8Array): Result.Result<unknown, BodyProblem> =>
  Result.try({
    try: () => {
      const text = utf8.decode(body)
      if (nestsDeeperThan(text)) throw new RangeError(tooDeep)
      return JSON.parse(text) as unknown
    },
    catch: (cause): BodyProblem =>
      cause instanceof SyntaxError
        ? { _tag: "NotJson", detail: cause.message }
        : cause instanceof RangeError && cause.message === tooDeep
          ? { _tag: "TooDeep" }
          : { _tag: "NotUtf8" }
  })
