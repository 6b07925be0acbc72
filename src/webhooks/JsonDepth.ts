/**
 * How deeply a JSON text nests, found by one pass over its characters before anything parses it.
 * No event of the spec nests more than a handful of levels; a body nested thousands deep is an
 * attack or a broken sender, and PostgreSQL's `jsonb` (and any recursive decoder) would fail on it
 * again at every retry. Such a delivery is set aside once, `dead`, with its reason.
 */

/** Deeper than this, a delivery is refused as undecodable. */
export const MAX_JSON_DEPTH = 100

/** Whether `text` nests arrays and objects deeper than `max` (strings and escapes skipped). */
export const nestsDeeperThan = (text: string, max: number = MAX_JSON_DEPTH): boolean => {
  let depth = 0
  let inString = false
  for (let index = 0; index < text.length; index++) {
    const char = text.charCodeAt(index)
    if (inString) {
      if (char === 0x5c)
        index++ // a backslash escapes the next character
      else if (char === 0x22) inString = false
      continue
    }
    if (char === 0x22) inString = true
    else if (char === 0x7b || char === 0x5b) {
      if (++depth > max) return true
    } else if (char === 0x7d || char === 0x5d) depth--
  }
  return false
}

export const tooDeep = `the body nests deeper than ${MAX_JSON_DEPTH} levels`
