import type { JsonObject, MessageInitShape } from "@bufbuild/protobuf";
import { type Client, type Transport } from "@connectrpc/connect";
import { AdminService, type ApplyConfigResponse, type CreateBucketResponse, type DeleteBucketResponse, type DrainEngineResponse, type Engine, type EngineSpecSchema, type GetConfigResponse, type GetVersionResponse, type ListVersionsResponse, type RegisterEngineResponse, type RemoveEngineResponse, type ReplaceBucketResponse, type RollbackResponse, type UpdateEngineResponse } from "./gen/sluice/v1/admin_pb.js";
import { type CallOpts, type ClientOptions } from "./transport.js";
/** An engine spec: the fields of sluice.v1.EngineSpec. */
export type EngineSpecInput = MessageInitShape<typeof EngineSpecSchema>;
/** The version a write is based on; 0 (the default) means the version the replica serves now. */
export interface WriteOpts extends CallOpts {
    basedOnVersion?: number | bigint;
}
/**
 * A client of a decider's AdminService. Reads need a viewer or admin token, writes an admin
 * token. A write based on a stale version rejects with VersionConflictError (its
 * `currentVersion` is the version to re-read); an invalid result with ConfigInvalidError
 * listing every problem in `fieldViolations`. Buckets are JSON objects in the configuration
 * document's shape.
 */
export declare class Admin {
    #private;
    /** The generated Connect-ES client, for calls this class does not wrap. */
    readonly client: Client<typeof AdminService>;
    constructor(target: string | Transport, options?: ClientOptions);
    /** The snapshot this replica serves: version, documentJson, loadedAt, source. */
    getConfig(call?: CallOpts): Promise<GetConfigResponse>;
    /** Replaces the whole configuration (YAML or JSON text, or an object) atomically. */
    applyConfig(document: string | JsonObject, opts?: WriteOpts): Promise<ApplyConfigResponse>;
    /** Checks a document as applyConfig would, storing nothing (`applied` is false). */
    validateConfig(document: string | JsonObject, opts?: WriteOpts): Promise<ApplyConfigResponse>;
    /** The version log, newest first (`versions`), and `currentVersion`. */
    listVersions(limit?: number, call?: CallOpts): Promise<ListVersionsResponse>;
    /** One logged version (`info`) with its document (`documentJson`). */
    getVersion(v: number | bigint, call?: CallOpts): Promise<GetVersionResponse>;
    /** Stores an earlier version's document as a new version. */
    rollback(v: number | bigint, opts?: WriteOpts): Promise<RollbackResponse>;
    /** The buckets in force, in document order. */
    listBuckets(call?: CallOpts): Promise<JsonObject[]>;
    /** One bucket; NotFoundError (BUCKET_NOT_FOUND) when there is none. */
    getBucket(id: string, call?: CallOpts): Promise<JsonObject>;
    /** Appends a bucket (its id included); AlreadyExistsError when the id is taken. */
    createBucket(bucket: JsonObject, opts?: WriteOpts): Promise<CreateBucketResponse>;
    /** Replaces the bucket with this id. */
    replaceBucket(id: string, bucket: JsonObject, opts?: WriteOpts): Promise<ReplaceBucketResponse>;
    /** Removes a bucket. */
    deleteBucket(id: string, opts?: WriteOpts): Promise<DeleteBucketResponse>;
    /** Registered engines (only model's when given) with health and load, by id. */
    listEngines(model?: string, call?: CallOpts): Promise<Engine[]>;
    /** One engine; NotFoundError (ENGINE_NOT_FOUND) when there is none. */
    getEngine(id: string, call?: CallOpts): Promise<Engine | undefined>;
    /** Adds an engine to the worker list. */
    registerEngine(engine: EngineSpecInput, opts?: WriteOpts): Promise<RegisterEngineResponse>;
    /** Replaces a configured engine's spec. */
    updateEngine(id: string, engine: EngineSpecInput, opts?: WriteOpts): Promise<UpdateEngineResponse>;
    /** Takes an engine out of every engine group and labels it sluice.dev/drained=true. */
    drainEngine(id: string, opts?: WriteOpts): Promise<DrainEngineResponse>;
    /** Deletes an engine from the worker list and from every engine group. */
    removeEngine(id: string, opts?: WriteOpts): Promise<RemoveEngineResponse>;
}
