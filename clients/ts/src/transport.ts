// The transport options shared by Decider and Admin.

import type { CallOptions, Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-web";

/** How a client reaches the decider. */
export interface ClientOptions {
  /** Sent as "Authorization: Bearer <token>" on every call. */
  token?: string;
  /** Bounds each attempt, in milliseconds; 0 means no bound. Default: 1000 (Decider), 5000 (Admin). */
  timeoutMs?: number;
  /**
   * With a base URL: "connect" (default) or "grpc-web", both over fetch, so in Node and in
   * browsers alike. For native gRPC in Node pass `grpcTransport(...)` from
   * "@sluice/client/node" instead of a URL.
   */
  protocol?: "connect" | "grpc-web";
  /** With a base URL: protobuf on the wire (default) or JSON (false; readable in devtools). */
  binary?: boolean;
  /** With a base URL: the fetch to use (default: globalThis.fetch). */
  fetch?: typeof globalThis.fetch;
}

/** Per-call options. */
export interface CallOpts {
  /** Overrides the client's timeoutMs for this call. */
  timeoutMs?: number;
  /** Cancels the call. */
  signal?: AbortSignal;
}

/** transportFor makes a fetch-based Connect or gRPC-Web transport for a base URL. */
export function transportFor(target: string | Transport, opts: ClientOptions): Transport {
  if (typeof target !== "string") {
    return target;
  }
  if (!/^https?:\/\//.test(target)) {
    throw new TypeError(
      `decider address ${JSON.stringify(target)}: want the decider's HTTP base URL, for example "http://localhost:7080", or a Transport`,
    );
  }
  const common = { baseUrl: target, useBinaryFormat: opts.binary ?? true, ...(opts.fetch ? { fetch: opts.fetch } : {}) };
  switch (opts.protocol ?? "connect") {
    case "connect":
      return createConnectTransport(common);
    case "grpc-web":
      return createGrpcWebTransport(common);
    default:
      throw new TypeError(`protocol ${JSON.stringify(opts.protocol)}: want "connect" or "grpc-web"`);
  }
}

/** callOptions builds the Connect call options of one attempt. */
export function callOptions(token: string | undefined, timeoutMs: number, call: CallOpts | undefined): CallOptions {
  const t = call?.timeoutMs ?? timeoutMs;
  const o: CallOptions = {};
  if (token) {
    o.headers = { authorization: `Bearer ${token}` };
  }
  if (t > 0) {
    o.timeoutMs = t;
  }
  if (call?.signal) {
    o.signal = call.signal;
  }
  return o;
}
