import { type MessageInitShape } from "@bufbuild/protobuf";
import { type Client, type Transport } from "@connectrpc/connect";
import { type DecideRequest, DecideRequestSchema, type DecideResponse, DeciderService, ReleaseOutcome } from "./gen/sluice/v1/decider_pb.js";
import { type CallOpts, type ClientOptions } from "./transport.js";
/**
 * The fields of a sluice.v1.DecideRequest (proto/sluice/v1/decider.proto), with the token
 * counts as numbers or bigints.
 */
export type DecideInput = Omit<MessageInitShape<typeof DecideRequestSchema>, "inputTokens" | "expectedPeakTokens"> & {
    inputTokens?: number | bigint;
    expectedPeakTokens?: number | bigint;
};
/** How a request ended, for Release: a name or a sluice.v1.ReleaseOutcome value. */
export type Outcome = "success" | "engine_failure" | "cancelled" | "unspecified" | ReleaseOutcome;
/** Options of a Decider. */
export interface DeciderOptions extends ClientOptions {
    /**
     * Decide attempts in total on Unavailable (every bucket exhausted, or the decider
     * unreachable); a Decide that failed so opened no lease, so retrying is safe. Default 1.
     */
    retryUnavailable?: number;
    /** The first retry sleep in ms, doubled per attempt with jitter, capped at ten times it. Default 20. */
    retryBackoffMs?: number;
}
/**
 * A client of a decider's DeciderService. `target` is the decider's HTTP base URL (Connect or
 * gRPC-Web over fetch, port 7080 by default) or a Connect Transport (e.g. `grpcTransport` from
 * "@sluice/client/node" for native gRPC on port 7070). Failed calls reject with DeciderError
 * subclasses.
 */
export declare class Decider {
    #private;
    /** The generated Connect-ES client, for calls this class does not wrap. */
    readonly client: Client<typeof DeciderService>;
    constructor(target: string | Transport, options?: DeciderOptions);
    /**
     * Picks the engine(s) for one request and, unless dryRun, opens a lease. The response's
     * `pick.kind` is `{case: "plain"}` or `{case: "pd"}`; pass `leaseId` to release().
     */
    decide(input: DecideInput | DecideRequest, call?: CallOpts): Promise<DecideResponse>;
    /** decide with dryRun: the decision the decider would make; no lease, no state. */
    dryRun(input: DecideInput, call?: CallOpts): Promise<DecideResponse>;
    /**
     * A dry run with explain: `resp.explain` lists every bucket, stage and candidate. On
     * failure the error's `explain` holds the same account.
     */
    explain(input: DecideInput, call?: CallOpts): Promise<DecideResponse>;
    /** Closes a lease; false when it was unknown, already released or expired. */
    release(leaseId: string, outcome?: Outcome, failedEngineIds?: string[], call?: CallOpts): Promise<boolean>;
}
