// Decider against a real decider, over every transport: decisions, leases, every error family.
import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { create } from "@bufbuild/protobuf";

import {
  AdmissionRejectedError,
  Code,
  Decider,
  DeciderError,
  DecideRequestSchema,
  InvalidArgumentError,
  Reason,
  ResourceExhaustedError,
  UnauthenticatedError,
  UnavailableError,
} from "@sluice/client";
import { grpcTransport, nodeTransport } from "@sluice/client/node";
import { env } from "./env.mjs";

// Every way the package reaches a decider. Each transport gets its own tight model's lease
// only one at a time: the suites run these describe blocks one after the other.
const transports = {
  "connect (fetch, protobuf)": () => env.http,
  "connect (fetch, JSON)": () => env.http,
  "grpc-web (fetch)": () => env.http,
  "grpc (node http2)": () => grpcTransport(env.grpc),
  "connect (node http)": () => nodeTransport(env.http, "connect"),
  "grpc-web (node http)": () => nodeTransport(env.http, "grpc-web"),
};
const protocolOf = {
  "connect (fetch, protobuf)": { protocol: "connect" },
  "connect (fetch, JSON)": { protocol: "connect", binary: false },
  "grpc-web (fetch)": { protocol: "grpc-web" },
};

const TIGHT = "tight-ts"; // one engine, max_inflight_requests 1

async function rejects(promise, cls) {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof cls, `want ${cls.name}, got ${err?.constructor?.name}: ${err}`);
    assert.ok(err instanceof DeciderError);
    return err;
  }
  assert.fail(`want ${cls.name}, the call succeeded`);
}

for (const [name, target] of Object.entries(transports)) {
  describe(name, { concurrency: false }, () => {
    const opts = { token: env.decideToken, timeoutMs: 5000, ...(protocolOf[name] ?? {}) };
    const decider = () => new Decider(target(), opts);

    it("opens a plain lease and releases it", async () => {
      const d = decider();
      const resp = await d.decide({ model: "chat", inputTokens: 100, expectedPeakTokens: 300, requestId: "ts-1" });
      assert.equal(resp.bucketId, "chat");
      assert.equal(resp.pick?.kind.case, "plain");
      assert.ok(["chat-a", "chat-b"].includes(resp.pick.kind.value.engineId));
      assert.equal(resp.pick.kind.value.url, "http://127.0.0.1:9");
      assert.ok(resp.leaseId);
      assert.ok(resp.leaseExpiresAt);
      assert.equal(await d.release(resp.leaseId), true);
      assert.equal(await d.release(resp.leaseId), false);
    });

    it("picks a prefill/decode pair", async () => {
      const d = decider();
      const resp = await d.decide({ model: "pd", inputTokens: 50n });
      assert.equal(resp.pick?.kind.case, "pd");
      assert.equal(resp.pick.kind.value.prefill?.engineId, "prefill-1");
      assert.equal(resp.pick.kind.value.prefill?.bootstrapPort, 8998);
      assert.equal(resp.pick.kind.value.decode?.engineId, "decode-1");
      assert.equal(await d.release(resp.leaseId, "engine_failure", ["decode-1"]), true);
    });

    it("dry runs and explains without a lease", async () => {
      const d = decider();
      const dry = await d.dryRun({ model: "chat", inputTokens: 10 });
      assert.equal(dry.leaseId, "");
      assert.equal(dry.leaseExpiresAt, undefined);
      const ex = await d.explain({ model: "chat", inputTokens: 10 });
      assert.equal(ex.leaseId, "");
      const [attempt] = ex.explain?.attempts ?? [];
      assert.equal(attempt?.bucketId, "chat");
      assert.equal(attempt?.outcome, "picked");
      assert.equal(attempt?.stages[0]?.policy, "round_robin");
      // A whole generated request message is accepted too.
      const msg = await d.decide(create(DecideRequestSchema, { model: "chat", inputTokens: 8n, dryRun: true }));
      assert.equal(msg.leaseId, "");
    });

    it("round-trips a lease through admission", async () => {
      const d = decider();
      const held = await d.decide({ model: TIGHT, inputTokens: 10 });
      try {
        const err = await rejects(d.decide({ model: TIGHT, inputTokens: 10 }), AdmissionRejectedError);
        assert.ok(err instanceof UnavailableError);
        assert.equal(err.code, Code.Unavailable);
        assert.equal(err.codeName, "UNAVAILABLE");
        assert.equal(err.reason, Reason.ADMISSION_REJECTED);
        assert.equal(err.domain, "sluice.dev");
        assert.deepEqual(err.rejections, [
          { bucketId: "tight-ts", role: "plain", engineId: "tight-ts-1", limit: "max_inflight_requests" },
        ]);
        assert.match(err.message, /^UNAVAILABLE ADMISSION_REJECTED: .*max_inflight_requests/);
        // explain rides on the error.
        const ex = await rejects(d.explain({ model: TIGHT, inputTokens: 10 }), AdmissionRejectedError);
        assert.equal(ex.explain?.attempts[0]?.outcome, "admission_rejected");
        assert.equal(ex.explain?.attempts[0]?.stages[0]?.candidates[0]?.rejection, "max_inflight_requests");
      } finally {
        assert.equal(await d.release(held.leaseId), true);
      }
      const again = await d.decide({ model: TIGHT, inputTokens: 10 });
      assert.equal(again.pick?.kind.value?.engineId, "tight-ts-1");
      assert.equal(await d.release(again.leaseId, "cancelled"), true);
    });

    it("retries on Unavailable when asked", async () => {
      const d = decider();
      const held = await d.decide({ model: TIGHT, inputTokens: 10 });
      const timer = setTimeout(() => d.release(held.leaseId), 200);
      try {
        const patient = new Decider(target(), { ...opts, retryUnavailable: 50, retryBackoffMs: 20 });
        const resp = await patient.decide({ model: TIGHT, inputTokens: 10 });
        assert.equal(resp.pick?.kind.value?.engineId, "tight-ts-1");
        assert.equal(await patient.release(resp.leaseId), true);
      } finally {
        clearTimeout(timer);
      }
    });

    it("raises InvalidArgumentError for every request check", async () => {
      const d = decider();
      const cases = [
        [{ model: "", inputTokens: 1 }, Reason.EMPTY_MODEL],
        [{ model: "no-such-model", inputTokens: 1 }, Reason.UNKNOWN_MODEL],
        [{ model: "chat", inputTokens: -1 }, Reason.INVALID_INPUT_TOKENS],
        [{ model: "chat", inputTokens: 10, expectedPeakTokens: 5 }, Reason.PEAK_BELOW_INPUT],
        [{ model: "chat", inputTokens: 3, tokenIds: [1, 2] }, Reason.TOKEN_IDS_MISMATCH],
        [{ model: "chat", inputTokens: 5000 }, Reason.NO_MATCHING_BUCKET],
        [
          { model: "chat", inputTokens: env.maxTokenIds + 1, tokenIds: new Array(env.maxTokenIds + 1).fill(7) },
          Reason.TOO_MANY_TOKEN_IDS,
        ],
      ];
      for (const [input, reason] of cases) {
        const err = await rejects(d.decide(input), InvalidArgumentError);
        assert.equal(err.code, Code.InvalidArgument);
        assert.equal(err.reason, reason, JSON.stringify(input).slice(0, 200));
        assert.ok(err.rawMessage);
      }
    });

    it("names the stage when no engine is a candidate", async () => {
      const err = await rejects(
        decider().decide({ model: "chat", inputTokens: 10, excludeEngineIds: ["chat-a", "chat-b"] }),
        UnavailableError,
      );
      assert.ok(!(err instanceof AdmissionRejectedError));
      assert.equal(err.reason, Reason.NO_CANDIDATES);
      assert.equal(err.stage, "plain");
      assert.deepEqual(err.rejections, []);
    });

    it("checks Release", async () => {
      const d = decider();
      assert.equal((await rejects(d.release(""), InvalidArgumentError)).reason, Reason.EMPTY_LEASE_ID);
      assert.equal((await rejects(d.release("some-lease", 99), InvalidArgumentError)).reason, Reason.INVALID_OUTCOME);
      await assert.rejects(d.release("some-lease", "finished"), /want one of/);
    });

    it("refuses calls without a valid token", async () => {
      for (const [token, reason] of [
        [undefined, Reason.TOKEN_MISSING],
        ["wrong", Reason.TOKEN_INVALID],
      ]) {
        const d = new Decider(target(), { ...opts, token });
        const err = await rejects(d.decide({ model: "chat", inputTokens: 1 }), UnauthenticatedError);
        assert.equal(err.code, Code.Unauthenticated);
        assert.equal(err.reason, reason);
        await rejects(d.release("lease"), UnauthenticatedError);
      }
    });
  });
}

describe("transport failures", () => {
  it("an unreachable decider is Unavailable without a reason", async () => {
    const d = new Decider(env.closed, { timeoutMs: 2000, retryUnavailable: 2, retryBackoffMs: 10 });
    const err = await rejects(d.decide({ model: "chat", inputTokens: 1 }), UnavailableError);
    assert.equal(err.reason, "");
    assert.ok(err.cause);
  });

  it("a message above the decider's limit is ResourceExhausted", async () => {
    // About 1.1 MB of protobuf: above the decider's receive limit (1 MiB at least).
    const n = 220_000;
    const d = new Decider(grpcTransport(env.grpc), { token: env.decideToken, timeoutMs: 10000 });
    const err = await rejects(
      d.decide({ model: "chat", inputTokens: n, tokenIds: new Array(n).fill(2 ** 31) }),
      ResourceExhaustedError,
    );
    assert.equal(err.code, Code.ResourceExhausted);
  });

  it("checks its arguments", () => {
    assert.throws(() => new Decider("localhost:7080"), /want the decider's HTTP base URL/);
    assert.throws(() => new Decider(env.http, { retryBackoffMs: -1 }), /must not be negative/);
    assert.throws(() => new Decider(env.http, { protocol: "rest" }), /want "connect" or "grpc-web"/);
  });
});
