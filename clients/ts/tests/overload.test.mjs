// OverloadedError from a decider that sheds: its one Decide slot is held by a REST call whose
// body never completes.
import assert from "node:assert/strict";
import { connect } from "node:net";
import { describe, it } from "node:test";

import { Code, Decider, DeciderError, OverloadedError, Reason, ResourceExhaustedError } from "@sluice/client";
import { grpcTransport } from "@sluice/client/node";
import { env } from "./env.mjs";

const shedGrpc = "http://" + process.env.SLUICE_CLIENTS_SHED_GRPC;
const shedHttp = "http://" + process.env.SLUICE_CLIENTS_SHED_HTTP;

async function holdSlot() {
  const [host, port] = process.env.SLUICE_CLIENTS_SHED_HTTP.split(":");
  const sock = connect({ host, port: Number(port) });
  await new Promise((resolve, reject) => sock.once("connect", resolve).once("error", reject));
  sock.write(
    "POST /v1/decide HTTP/1.1\r\nHost: decider\r\nContent-Type: application/json\r\n" +
      `Authorization: Bearer ${env.decideToken}\r\nContent-Length: 100\r\n\r\n{`,
  );
  return sock;
}

// Polls until a dry-run Decide is shed: the slot is taken once the decider read the headers.
async function shedError(d) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      await d.dryRun({ model: "chat", inputTokens: 1 });
    } catch (err) {
      return err;
    }
    assert.ok(Date.now() < deadline, "no Decide was shed within 10 s while the slot was held");
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("overload", { concurrency: false }, () => {
  for (const [name, target] of [
    ["connect", () => shedHttp],
    ["grpc", () => grpcTransport(shedGrpc)],
  ]) {
    it(`sheds with a retry hint (${name})`, async () => {
      const sock = await holdSlot();
      try {
        const err = await shedError(new Decider(target(), { token: env.decideToken, retryUnavailable: 5 }));
        assert.ok(err instanceof OverloadedError, `got ${err}`);
        assert.ok(err instanceof ResourceExhaustedError && err instanceof DeciderError);
        assert.equal(err.code, Code.ResourceExhausted);
        assert.equal(err.reason, Reason.DECIDER_OVERLOADED);
        assert.equal(err.retryAfterMs, 1000);
        assert.deepEqual(err.metadata, { max_concurrent_decides: "1" });
      } finally {
        sock.destroy();
      }
      // The slot comes back once the held call is gone.
      const d = new Decider(target(), { token: env.decideToken });
      const deadline = Date.now() + 10_000;
      for (;;) {
        try {
          assert.equal((await d.dryRun({ model: "chat", inputTokens: 1 })).bucketId, "chat");
          break;
        } catch (err) {
          if (!(err instanceof OverloadedError) || Date.now() > deadline) throw err;
          await new Promise((r) => setTimeout(r, 20));
        }
      }
    });
  }
});
