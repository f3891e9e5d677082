// Node-only transports: native gRPC (HTTP/2) to the decider's gRPC port, or Connect and
// gRPC-Web over Node's own http/http2 instead of fetch. Needs @connectrpc/connect-node.
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
/**
 * grpcTransport speaks native gRPC over HTTP/2 to a decider's gRPC port (-grpc-addr, 7070),
 * for example grpcTransport("http://localhost:7070").
 */
export function grpcTransport(baseUrl, opts = {}) {
    return createGrpcTransport({ baseUrl, useBinaryFormat: opts.binary ?? true });
}
/** nodeTransport speaks Connect or gRPC-Web to the decider's HTTP port over Node's http modules. */
export function nodeTransport(baseUrl, protocol = "connect", opts = {}) {
    const o = { baseUrl, useBinaryFormat: opts.binary ?? true, httpVersion: opts.httpVersion ?? "1.1" };
    return protocol === "grpc-web" ? createGrpcWebTransport(o) : createConnectTransport(o);
}
/**
 * grpcShardTarget is ShardedDecider's `shardTarget` for Node: native gRPC to the address a
 * shard lists (host:port of a decider's gRPC port), e.g.
 * `new ShardedDecider(grpcTransport("http://localhost:7070"), { shardTarget: grpcShardTarget })`.
 */
export function grpcShardTarget(address) {
    return grpcTransport(`http://${address}`);
}
