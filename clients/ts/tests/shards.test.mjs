// WRONG_SHARD and ShardedDecider against real model-sharded deciders: tests/clients runs an
// unsharded decider ("home") and two deciders of shard a on one Postgres store (shardSeed).
// a-ts and move-ts belong to shard a, which lists both; b-only to shard b, which lists none;
// un-ts to no shard. A lease lives on the replica that granted it, so a Release sent to the
// other one would answer false.
import assert from "node:assert/strict";
import { describe, it } from "node:test";

import {
  Admin,
  Code,
  Decider,
  FailedPreconditionError,
  Reason,
  ShardedDecider,
  shardRoutes,
  WrongShardError,
} from "@sluice/client";
import { grpcShardTarget, grpcTransport } from "@sluice/client/node";
import { env } from "./env.mjs";

async function wrongShardRefusals(owner) {
  const text = await (await fetch(env.shardHomeHttp + "/metrics")).text();
  const line = text.split("\n").find((l) => l.startsWith(`sluice_decider_wrong_shard_total{owner="${owner}"} `));
  return line ? Number(line.split(" ")[1]) : 0;
}

async function wrongShard(promise) {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof WrongShardError, `want WrongShardError, got ${err?.constructor?.name}: ${err}`);
    return err;
  }
  assert.fail("want WrongShardError, the call succeeded");
}

// Each way of reaching shard a's decider from the address the shards list names.
const ways = {
  "grpc (node http2)": { home: () => grpcTransport("http://" + env.shardHome), shardTarget: grpcShardTarget },
  "connect (fetch), the address mapped to its HTTP port": {
    home: () => env.shardHomeHttp,
    shardTarget: (addr) => {
      const http = { [env.shardA]: env.shardAHttp, [env.shardA2]: env.shardA2Http }[addr];
      assert.ok(http, `shardTarget(${addr}): not one of shard a's deciders`);
      return http;
    },
  },
};

describe("WrongShardError", () => {
  it("names the owning shard and its deciders", async () => {
    const home = new Decider(env.shardHomeHttp, { token: env.decideToken, timeoutMs: 5000 });
    const err = await wrongShard(home.dryRun({ model: "a-ts", inputTokens: 10 }));
    assert.ok(err instanceof FailedPreconditionError);
    assert.equal(err.code, Code.FailedPrecondition);
    assert.equal(err.reason, Reason.WRONG_SHARD);
    assert.deepEqual([err.model, err.shard, err.replicaShard], ["a-ts", "a", ""]);
    assert.deepEqual(err.deciders, env.shardADeciders);
    assert.match(err.message, /^FAILED_PRECONDITION WRONG_SHARD: /);
    const b = await wrongShard(home.dryRun({ model: "b-only", inputTokens: 10 }));
    assert.deepEqual([b.shard, b.deciders], ["b", []]);
    const a = new Decider(grpcTransport("http://" + env.shardA), { token: env.decideToken, timeoutMs: 5000 });
    const un = await wrongShard(a.dryRun({ model: "un-ts", inputTokens: 10 }));
    assert.deepEqual([un.model, un.shard, un.replicaShard, un.deciders], ["un-ts", "", "a", []]);
  });

  it("shardRoutes reads the shards list", async () => {
    const viewer = new Admin(env.shardHomeHttp, { token: env.viewerToken });
    const routes = shardRoutes((await viewer.getConfig()).documentJson);
    assert.deepEqual(routes.get("a-ts"), env.shardADeciders);
    assert.equal(routes.has("b-only"), false);
    assert.equal(routes.has("un-ts"), false);
    assert.equal(shardRoutes("{}").size, 0);
    assert.equal(shardRoutes('{"shards": [{"id": "x", "models": ["m"]}]}').size, 0);
  });
});

for (const [name, way] of Object.entries(ways)) {
  describe(`ShardedDecider, ${name}`, { concurrency: false }, () => {
    const opts = { token: env.decideToken, timeoutMs: 5000, shardTarget: way.shardTarget };

    it("routes by the shard map: no call reaches the wrong shard", async () => {
      const before = await wrongShardRefusals("a");
      const d = new ShardedDecider(way.home(), { ...opts, mapToken: env.viewerToken });
      const leases = [];
      for (let i = 0; i < 3; i++) {
        const resp = await d.decide({ model: "a-ts", inputTokens: 10 });
        assert.equal(resp.pick?.kind.value?.engineId, "sh-1");
        leases.push(resp.leaseId);
      }
      // Each lease lives on the shard a replica that granted it (round robin spread them over both;
      // an odd count, so a Release sent round robin would miss every one):
      // released there, not on the other one nor on home.
      for (const l of leases) {
        assert.equal(await d.release(l), true);
      }
      assert.deepEqual(d.routeOf("a-ts"), env.shardADeciders);
      assert.ok(d.shardMapVersion >= 1n);
      const un = await d.decide({ model: "un-ts", inputTokens: 10 });
      assert.deepEqual(d.routeOf("un-ts"), []);
      assert.equal(await d.release(un.leaseId), true);
      const b = await wrongShard(d.dryRun({ model: "b-only", inputTokens: 10 }));
      assert.equal(b.shard, "b");
      assert.equal(await wrongShardRefusals("a"), before);
    });

    it("follows WRONG_SHARD when it cannot read the map", async () => {
      // The decide token may not read the admin API (the decider has viewer tokens).
      const before = await wrongShardRefusals("a");
      const d = new ShardedDecider(way.home(), opts);
      const leases = [];
      for (let i = 0; i < 3; i++) {
        leases.push((await d.decide({ model: "a-ts", inputTokens: 10 })).leaseId);
      }
      assert.equal(d.shardMapVersion, 0n);
      assert.equal(d.shardMapFailing, true);
      assert.deepEqual(d.routeOf("a-ts"), env.shardADeciders);
      for (const l of leases) {
        assert.equal(await d.release(l), true);
      }
      assert.equal(await wrongShardRefusals("a"), before + 1);
    });
  });
}

describe("ShardedDecider, a moved model", () => {
  it("follows the map when its model leaves the shard", async () => {
    const d = new ShardedDecider(grpcTransport("http://" + env.shardHome), {
      token: env.decideToken, mapToken: env.viewerToken, timeoutMs: 5000, shardTarget: grpcShardTarget, refreshIntervalMs: 200,
    });
    assert.equal((await d.dryRun({ model: "move-ts", inputTokens: 10 })).bucketId, "sharded");
    assert.deepEqual(d.routeOf("move-ts"), env.shardADeciders);
    const admin = new Admin(env.shardHomeHttp, { token: env.adminToken });
    const cfg = await admin.getConfig();
    const doc = JSON.parse(cfg.documentJson);
    for (const sh of doc.shards) {
      sh.models = sh.models.filter((m) => m !== "move-ts");
    }
    const applied = await admin.applyConfig(doc, { basedOnVersion: cfg.version });
    const deadline = Date.now() + 20000;
    while (d.routeOf("move-ts").length > 0 || d.shardMapVersion < applied.version) {
      assert.ok(Date.now() < deadline, `move-ts still routed to ${d.routeOf("move-ts")} at map version ${d.shardMapVersion}`);
      await d.dryRun({ model: "un-ts", inputTokens: 1 }); // a call makes a due read start
      await new Promise((r) => setTimeout(r, 100));
    }
    const resp = await d.decide({ model: "move-ts", inputTokens: 10 });
    assert.deepEqual(d.routeOf("move-ts"), []);
    assert.equal(await d.release(resp.leaseId), true);
  });

  it("checks its arguments", () => {
    assert.throws(() => new ShardedDecider(env.shardHomeHttp, {}), /shardTarget is required/);
    assert.throws(
      () => new ShardedDecider(env.shardHomeHttp, { shardTarget: grpcShardTarget, refreshIntervalMs: -1 }),
      /must not be negative/,
    );
  });
});
