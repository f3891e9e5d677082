// The transport options shared by Decider and Admin.
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-web";
/** transportFor makes a fetch-based Connect or gRPC-Web transport for a base URL. */
export function transportFor(target, opts) {
    if (typeof target !== "string") {
        return target;
    }
    if (!/^https?:\/\//.test(target)) {
        throw new TypeError(`decider address ${JSON.stringify(target)}: want the decider's HTTP base URL, for example "http://localhost:7080", or a Transport`);
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
export function callOptions(token, timeoutMs, call) {
    const t = call?.timeoutMs ?? timeoutMs;
    const o = {};
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
