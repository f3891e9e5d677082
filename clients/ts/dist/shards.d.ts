import type { Transport } from "@connectrpc/connect";
import { type DecideInput, type DeciderOptions, type Outcome } from "./decider.js";
import type { DecideRequest, DecideResponse } from "./gen/sluice/v1/decider_pb.js";
import type { CallOpts } from "./transport.js";
/** Options of a ShardedDecider: a Decider's, applied to every decider it reaches, and these. */
export interface ShardedDeciderOptions extends DeciderOptions {
    /**
     * How to reach a shard's decider from the address the configuration lists for it (host:port
     * of its gRPC port): a base URL (Connect or gRPC-Web over fetch, e.g. the same host's HTTP
     * port) or a Transport; `grpcShardTarget` from "@sluice/client/node" speaks native gRPC to
     * the address itself.
     */
    shardTarget: (address: string) => string | Transport;
    /**
     * The token the shards list is read with (AdminService.GetConfig): a viewer or admin token when
     * the decider has any, "" for none when it has none. Default: token.
     */
    mapToken?: string;
    /** How often the shards list is read again, in ms; 0 never reads it (WRONG_SHARD answers alone route). Default 30000. */
    refreshIntervalMs?: number;
}
/**
 * shardRoutes reads the routes a configuration document's `shards` list gives (the JSON of
 * GetConfigResponse.documentJson): model -> its shard's deciders. Only shards that list
 * `deciders` route their models.
 */
export declare function shardRoutes(documentJson: string): Map<string, string[]>;
/**
 * A Decider that routes by model among model-sharded deciders. `target` is any decider; models
 * that no shard with listed `deciders` owns go there. The shards list is read from it
 * (AdminService.GetConfig, with `mapToken`, else `token`) at the first call, which waits for
 * it, and again every `refreshIntervalMs` (in the background, after a call finds it due), and
 * each model of a shard that lists `deciders` goes straight to them, round robin. A WRONG_SHARD
 * answer naming deciders routes the model there too and the call is sent once more, so a model
 * moved since the last read, or a map the token may not read, costs one extra round trip; a
 * refusal that names none rejects with WrongShardError. Release goes to the replica that
 * granted the lease.
 */
export declare class ShardedDecider {
    #private;
    constructor(target: string | Transport, options: ShardedDeciderOptions);
    /** The deciders `model` is sent to; [] when it goes to `target`. */
    routeOf(model: string): readonly string[];
    /** The configuration version of the shards list in force; 0n before one was read. */
    get shardMapVersion(): bigint;
    /** Reads the shards list now and returns the version in force; rejects with a DeciderError. */
    refreshShardMap(call?: CallOpts): Promise<bigint>;
    /** True when the last read of the shards list failed (e.g. a token that may not read it). */
    get shardMapFailing(): boolean;
    /** Decider.decide on the model's deciders, following one WRONG_SHARD redirect. */
    decide(input: DecideInput | DecideRequest, call?: CallOpts): Promise<DecideResponse>;
    /** decide with dryRun. */
    dryRun(input: DecideInput, call?: CallOpts): Promise<DecideResponse>;
    /** decide with dryRun and explain. */
    explain(input: DecideInput, call?: CallOpts): Promise<DecideResponse>;
    /** Decider.release on the replica that granted the lease. */
    release(leaseId: string, outcome?: Outcome, failedEngineIds?: string[], call?: CallOpts): Promise<boolean>;
}
