import type { Transport } from "@connectrpc/connect";
/** Options of the Node transports. */
export interface NodeTransportOptions {
    /** protobuf on the wire (default) or JSON (false). */
    binary?: boolean;
    /** "2" (default for gRPC) or "1.1" (default for Connect and gRPC-Web). */
    httpVersion?: "1.1" | "2";
}
/**
 * grpcTransport speaks native gRPC over HTTP/2 to a decider's gRPC port (-grpc-addr, 7070),
 * for example grpcTransport("http://localhost:7070").
 */
export declare function grpcTransport(baseUrl: string, opts?: NodeTransportOptions): Transport;
/** nodeTransport speaks Connect or gRPC-Web to the decider's HTTP port over Node's http modules. */
export declare function nodeTransport(baseUrl: string, protocol?: "connect" | "grpc-web", opts?: NodeTransportOptions): Transport;
/**
 * grpcShardTarget is ShardedDecider's `shardTarget` for Node: native gRPC to the address a
 * shard lists (host:port of a decider's gRPC port), e.g.
 * `new ShardedDecider(grpcTransport("http://localhost:7070"), { shardTarget: grpcShardTarget })`.
 */
export declare function grpcShardTarget(address: string): Transport;
