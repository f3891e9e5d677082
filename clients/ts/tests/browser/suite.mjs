// The browser suite: what tests/clients (TestClients/browser) runs in headless Chromium, from
// a bundle of this file (esbuild, as a browser app would bundle the package), against a
// decider proxied on the page's own origin. Each check is reported by name; the Go test fails
// on any that did not pass.
import {
  Admin,
  AdmissionRejectedError,
  Code,
  Decider,
  DeciderError,
  InvalidArgumentError,
  Reason,
  UnauthenticatedError,
  UnavailableError,
} from "@sluice/client";

function eq(got, want, what) {
  const g = JSON.stringify(got, (_, v) => (typeof v === "bigint" ? `${v}n` : v));
  const w = JSON.stringify(want, (_, v) => (typeof v === "bigint" ? `${v}n` : v));
  if (g !== w) throw new Error(`${what}: got ${g}, want ${w}`);
}

async function refused(promise, cls) {
  try {
    await promise;
  } catch (err) {
    if (!(err instanceof cls) || !(err instanceof DeciderError)) {
      throw new Error(`want ${cls.name}, got ${err?.constructor?.name}: ${err}`);
    }
    return err;
  }
  throw new Error(`want ${cls.name}, the call succeeded`);
}

/** run performs every check and returns [{name, ok, error?}]. */
export async function run({ base, token, viewerToken }) {
  const results = [];
  async function check(name, f) {
    try {
      await f();
      results.push({ name, ok: true });
    } catch (err) {
      results.push({ name, ok: false, error: String(err?.stack ?? err) });
    }
  }
  for (const protocol of ["connect", "grpc-web"]) {
    const d = new Decider(base, { token, protocol, timeoutMs: 5000 });
    await check(`${protocol}: decide and release`, async () => {
      const resp = await d.decide({ model: "chat", inputTokens: 64 });
      eq(resp.bucketId, "chat", "bucket");
      eq(resp.pick?.kind.case, "plain", "pick kind");
      eq(await d.release(resp.leaseId), true, "released");
      eq(await d.release(resp.leaseId), false, "released twice");
    });
    await check(`${protocol}: prefill/decode pair`, async () => {
      const resp = await d.dryRun({ model: "pd", inputTokens: 64 });
      eq(resp.pick?.kind.case, "pd", "pick kind");
      eq(resp.pick?.kind.value.prefill?.bootstrapPort, 8998, "bootstrap port");
    });
    await check(`${protocol}: admission rejections`, async () => {
      const held = await d.decide({ model: "tight-ts", inputTokens: 10 });
      try {
        const err = await refused(d.decide({ model: "tight-ts", inputTokens: 10 }), AdmissionRejectedError);
        eq(err instanceof UnavailableError, true, "an UnavailableError");
        eq(err.code, Code.Unavailable, "code");
        eq(err.reason, Reason.ADMISSION_REJECTED, "reason");
        eq(err.rejections, [{ bucketId: "tight-ts", role: "plain", engineId: "tight-ts-1", limit: "max_inflight_requests" }], "rejections");
      } finally {
        await d.release(held.leaseId);
      }
    });
    await check(`${protocol}: invalid argument`, async () => {
      const err = await refused(d.decide({ model: "no-such-model", inputTokens: 1 }), InvalidArgumentError);
      eq(err.reason, Reason.UNKNOWN_MODEL, "reason");
    });
    await check(`${protocol}: unauthenticated`, async () => {
      const anonymous = new Decider(base, { protocol });
      eq((await refused(anonymous.decide({ model: "chat", inputTokens: 1 }), UnauthenticatedError)).reason, Reason.TOKEN_MISSING, "reason");
    });
  }
  await check("admin: a viewer lists buckets", async () => {
    const ids = (await new Admin(base, { token: viewerToken }).listBuckets()).map((b) => b.id);
    eq(ids.includes("chat") && ids.includes("pd"), true, `bucket ids ${ids}`);
  });
  return results;
}
