// The running decider the tests are pointed at (tests/clients sets these; see
// tests/clients/clients_test.go for the seeded buckets and engines).
function need(name) {
  const v = process.env[name];
  if (!v) {
    throw new Error(
      `${name} is not set: these tests need a running decider; run them through ` +
        "`scripts/test.sh -run TestClients ./tests/clients`, which starts one",
    );
  }
  return v;
}

export const env = {
  http: need("SLUICE_CLIENTS_HTTP"),
  grpc: "http://" + need("SLUICE_CLIENTS_GRPC"),
  closed: "http://" + need("SLUICE_CLIENTS_CLOSED"),
  decideToken: need("SLUICE_CLIENTS_DECIDE_TOKEN"),
  adminToken: need("SLUICE_CLIENTS_ADMIN_TOKEN"),
  viewerToken: need("SLUICE_CLIENTS_VIEWER_TOKEN"),
  maxTokenIds: Number(need("SLUICE_CLIENTS_MAX_TOKEN_IDS")),
  // The model-sharded deciders (tests/clients shardSeed): an unsharded one and shard a's two,
  // listed in this order under shard a's deciders.
  shardHome: need("SLUICE_CLIENTS_SHARD_HOME"), // host:port of its gRPC port
  shardHomeHttp: need("SLUICE_CLIENTS_SHARD_HOME_HTTP"),
  shardA: need("SLUICE_CLIENTS_SHARD_A"), // host:port, as the shards list names it
  shardAHttp: need("SLUICE_CLIENTS_SHARD_A_HTTP"),
  shardA2: need("SLUICE_CLIENTS_SHARD_A2"),
  shardA2Http: need("SLUICE_CLIENTS_SHARD_A2_HTTP"),
};
env.shardADeciders = [env.shardA, env.shardA2];
