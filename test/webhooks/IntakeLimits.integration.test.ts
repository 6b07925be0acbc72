/**
 * The intake cannot be made to hold more body bytes at once than `webhooks.max_inflight_bytes`:
 * while slow bodies hold the reservation, a further delivery gets 503 with Retry-After before any
 * of its body is read; once they go, deliveries are taken again.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { HttpServer } from "effect/http"
import { connect } from "node:net"
import { AppConfig } from "../../src/config/AppConfig.ts"
import { TestDatabase } from "../support/TestDatabase.ts"
import { deliver, IntakeServer, makeSecret } from "./harness.ts"

const secret = makeSecret()
const config = AppConfig.layerFrom({
  webhooks: { endpoints: [{ name: "default", secrets: [secret] }], max_body_bytes: 800, max_inflight_bytes: 1000 }
})
const World = IntakeServer.pipe(Layer.provideMerge(config), Layer.provideMerge(TestDatabase))

const body = JSON.stringify({
  event_type: "task.deleted",
  id: "tsk_1",
  book_id: "bk_1",
  household_id: null,
  note: "x".repeat(300)
})

layer(World, { timeout: 60_000, excludeTestServices: true })("intake limits", (it) => {
  it.effect("slow bodies holding the in-flight bytes: the next delivery gets 503 with Retry-After", () =>
    Effect.gen(function* () {
      const server = yield* HttpServer.HttpServer
      const port = (server.address as { readonly port: number }).port
      // A client that declares 800 bytes and sends 10, then holds the connection.
      const slow = connect(port, "127.0.0.1")
      yield* Effect.promise(() => new Promise<void>((resolve) => slow.once("connect", () => resolve())))
      const timestamp = Math.floor(Date.now() / 1000)
      slow.write(
        `POST /webhooks/default HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 800\r\n` +
          `hook-id: msg_slow\r\nhook-timestamp: ${timestamp}\r\nhook-signature: v1,AAAA\r\n\r\n{"event_type`
      )
      yield* Effect.sleep("300 millis")
      const refused = yield* deliver("default", secret, body)
      assert.strictEqual(refused.status, 503)
      assert.include(refused.body, "busy")

      slow.destroy()
      yield* Effect.sleep("300 millis")
      const accepted = yield* deliver("default", secret, body)
      assert.strictEqual(accepted.status, 200)
    })
  )
})
