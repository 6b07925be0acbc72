import { defineConfig } from "vitest/config"

// The emulator's own suite (`npm test -w sandbox`); the repository's `npm test` runs it too.
export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    pool: "forks",
    maxWorkers: 2
  }
})
