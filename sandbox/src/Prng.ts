/**
 * Seeded pseudo-random numbers for the sandbox. Every generated record draws from its own stream,
 * derived by hashing (seed, kind, index, salt), so record 734 of a kind is the same whether or not
 * records 0..733 were ever generated: this is what lets `--records 1000000` generate lazily.
 * Effect's `Random` is a service with one shared stream, which cannot give that per-record
 * addressing; hence this small module (mulberry32 seeded by a murmur3-style mix).
 */

const mix = (h: number): number => {
  h ^= h >>> 16
  h = Math.imul(h, 0x85ebca6b)
  h ^= h >>> 13
  h = Math.imul(h, 0xc2b2ae35)
  h ^= h >>> 16
  return h >>> 0
}

/** Hashes a tuple of 32-bit integers to an unsigned 32-bit integer. */
export const hash = (...parts: ReadonlyArray<number>): number => {
  let h = 0x9e3779b9
  for (const part of parts) {
    h = mix((h ^ (part | 0)) + 0x7f4a7c15 + (h << 6) + (h >>> 2))
  }
  return h
}

/** Hashes a string (a kind name, a rule id) to an unsigned 32-bit integer. */
export const hashString = (value: string): number => {
  let h = 0x811c9dc5
  for (let i = 0; i < value.length; i++) {
    h = Math.imul(h ^ value.charCodeAt(i), 0x01000193)
  }
  return mix(h)
}

/** A uniform float in [0, 1) from a hash. */
export const unit = (h: number): number => h / 4294967296

/** A sequential stream of draws (mulberry32). */
export class Rng {
  private state: number

  constructor(seed: number) {
    this.state = seed >>> 0
  }

  /** Unsigned 32-bit integer. */
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0
    let t = this.state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return (t ^ (t >>> 14)) >>> 0
  }

  /** Float in [0, 1). */
  float(): number {
    return this.next() / 4294967296
  }

  /** Integer in [min, max]. */
  int(min: number, max: number): number {
    return min + Math.floor(this.float() * (max - min + 1))
  }

  bool(probability = 0.5): boolean {
    return this.float() < probability
  }

  pick<A>(items: ReadonlyArray<A>): A {
    return items[Math.floor(this.float() * items.length)]!
  }

  /** Up to `count` distinct items, in their original order. */
  sample<A>(items: ReadonlyArray<A>, count: number): Array<A> {
    const picked = new Set<number>()
    const wanted = Math.min(count, items.length)
    while (picked.size < wanted) picked.add(Math.floor(this.float() * items.length))
    return [...picked].toSorted((a, b) => a - b).map((i) => items[i]!)
  }

  digits(length: number): string {
    let out = ""
    for (let i = 0; i < length; i++) out += String(this.next() % 10)
    return out
  }
}
