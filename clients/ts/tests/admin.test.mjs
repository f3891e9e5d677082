// Admin against a real decider on Postgres: buckets, engines, configuration, versions.
import assert from "node:assert/strict";
import { describe, it } from "node:test";

import {
  Admin,
  AlreadyExistsError,
  ConfigInvalidError,
  DeciderError,
  InvalidArgumentError,
  NotFoundError,
  PermissionDeniedError,
  Reason,
  Role,
  UnauthenticatedError,
  VersionConflictError,
} from "@sluice/client";
import { env } from "./env.mjs";

const EXTRA = {
  id: "ts-extra",
  rank: 95,
  models: ["chat"],
  limits: { min: 0, max: 100000 },
  groups: { plain: { worker_ids: ["chat-a"], policy: { type: "round_robin" } } },
};

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

describe("admin", { concurrency: false }, () => {
  const admin = new Admin(env.http, { token: env.adminToken });
  const viewer = new Admin(env.http, { token: env.viewerToken, protocol: "grpc-web" });

  it("reads buckets as JSON objects", async () => {
    const buckets = await viewer.listBuckets();
    const ids = buckets.map((b) => b.id);
    for (const id of ["chat", "tight-py", "tight-ts", "pd"]) assert.ok(ids.includes(id), id);
    const chat = await viewer.getBucket("chat");
    assert.equal(chat.rank, 10);
    assert.equal(chat.max_context_tokens, 8192);
  });

  it("refuses writes by a viewer and calls without a token", async () => {
    const denied = await rejects(viewer.deleteBucket("chat"), PermissionDeniedError);
    assert.equal(denied.reason, Reason.ROLE_NOT_ALLOWED);
    const anonymous = new Admin(env.http);
    assert.equal((await rejects(anonymous.listBuckets(), UnauthenticatedError)).reason, Reason.TOKEN_MISSING);
  });

  it("says what is not found", async () => {
    assert.equal((await rejects(admin.getBucket("no-such-bucket"), NotFoundError)).reason, Reason.BUCKET_NOT_FOUND);
    assert.equal((await rejects(admin.getEngine("no-such-engine"), NotFoundError)).reason, Reason.ENGINE_NOT_FOUND);
    assert.equal((await rejects(admin.getVersion(10 ** 9), NotFoundError)).reason, Reason.CONFIG_VERSION_NOT_FOUND);
  });

  it("creates, conflicts on a stale version, replaces and deletes a bucket", async () => {
    const created = await admin.createBucket(EXTRA);
    assert.match(created.summary, /ts-extra/);
    try {
      assert.equal((await rejects(admin.createBucket(EXTRA), AlreadyExistsError)).reason, Reason.BUCKET_EXISTS);
      const conflict = await rejects(
        admin.replaceBucket("ts-extra", { ...EXTRA, rank: 96 }, { basedOnVersion: created.version - 1n }),
        VersionConflictError,
      );
      assert.equal(conflict.reason, Reason.CONFIG_VERSION_CONFLICT);
      assert.equal(conflict.currentVersion, created.version);
      const replaced = await admin.replaceBucket("ts-extra", { ...EXTRA, rank: 96 }, { basedOnVersion: conflict.currentVersion });
      assert.equal(replaced.version, created.version + 1n);
      assert.equal((await admin.getBucket("ts-extra")).rank, 96);
      const mismatch = await rejects(admin.replaceBucket("ts-extra", { ...EXTRA, id: "other" }), InvalidArgumentError);
      assert.equal(mismatch.reason, Reason.BUCKET_ID_MISMATCH);
    } finally {
      await admin.deleteBucket("ts-extra");
    }
    await rejects(admin.getBucket("ts-extra"), NotFoundError);
  });

  it("lists every problem of an invalid configuration", async () => {
    const cfg = await admin.getConfig();
    const doc = JSON.parse(cfg.documentJson);
    doc.buckets[0].groups.plain.policy.type = "no_such_policy";
    doc.buckets[1].rank = "high";
    const err = await rejects(admin.validateConfig(doc), ConfigInvalidError);
    assert.equal(err.reason, Reason.CONFIG_INVALID);
    const fields = err.fieldViolations.map((v) => v.field);
    assert.ok(fields.includes("buckets[0].groups.plain.policy.type"), fields.join());
    assert.ok(fields.some((f) => f.startsWith("buckets[1].rank")), fields.join());
    assert.equal((await admin.getConfig()).version, cfg.version);
  });

  it("validates, applies and rolls back", async () => {
    const before = await admin.getConfig();
    const doc = JSON.parse(before.documentJson);
    const checked = await admin.validateConfig(doc);
    assert.equal(checked.applied, false);
    assert.equal(checked.version, before.version);
    doc.buckets.push({ ...EXTRA, id: "ts-rollback" });
    const applied = await admin.applyConfig(doc, { basedOnVersion: before.version });
    assert.equal(applied.applied, true);
    assert.equal(applied.version, before.version + 1n);
    const versions = await admin.listVersions(2);
    assert.equal(versions.currentVersion, applied.version);
    assert.deepEqual(versions.versions.map((v) => v.version), [applied.version, before.version]);
    assert.match((await admin.getVersion(applied.version)).documentJson, /ts-rollback/);
    const back = await admin.rollback(before.version);
    assert.equal(back.version, applied.version + 1n);
    assert.equal((await admin.listVersions(1)).versions[0]?.rollbackOf, before.version);
    await rejects(admin.getBucket("ts-rollback"), NotFoundError);
  });

  it("registers, updates, drains and removes an engine", async () => {
    assert.deepEqual((await viewer.listEngines("chat")).map((e) => e.id), ["chat-a", "chat-b"]);
    const spec = { id: "ts-engine", url: "http://127.0.0.1:9", models: ["chat"], role: Role.PLAIN };
    await admin.registerEngine(spec);
    try {
      assert.equal((await rejects(admin.registerEngine(spec), AlreadyExistsError)).reason, Reason.ENGINE_EXISTS);
      await admin.updateEngine("ts-engine", { ...spec, url: "http://127.0.0.1:10", labels: { zone: "a" } });
      const eng = await admin.getEngine("ts-engine");
      assert.equal(eng?.url, "http://127.0.0.1:10");
      assert.deepEqual(eng?.labels, { zone: "a" });
      await admin.drainEngine("ts-engine");
      assert.equal((await admin.getEngine("ts-engine"))?.labels["sluice.dev/drained"], "true");
    } finally {
      await admin.removeEngine("ts-engine");
    }
    await rejects(admin.getEngine("ts-engine"), NotFoundError);
  });
});
