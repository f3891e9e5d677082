import type { GenFile, GenMessage, GenService } from "@bufbuild/protobuf/codegenv2";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import type { Role } from "./decider_pb.js";
import type { JsonObject, Message } from "@bufbuild/protobuf";
/**
 * Describes the file sluice/v1/admin.proto.
 */
export declare const file_sluice_v1_admin: GenFile;
/**
 * ListEnginesRequest selects engines to list.
 *
 * @generated from message sluice.v1.ListEnginesRequest
 */
export type ListEnginesRequest = Message<"sluice.v1.ListEnginesRequest"> & {
    /**
     * Only engines serving this model are listed; empty lists all engines.
     *
     * @generated from field: string model = 1;
     */
    model: string;
};
/**
 * Describes the message sluice.v1.ListEnginesRequest.
 * Use `create(ListEnginesRequestSchema)` to create a new message.
 */
export declare const ListEnginesRequestSchema: GenMessage<ListEnginesRequest>;
/**
 * ListEnginesResponse lists engines.
 *
 * @generated from message sluice.v1.ListEnginesResponse
 */
export type ListEnginesResponse = Message<"sluice.v1.ListEnginesResponse"> & {
    /**
     * The engines, ordered by id.
     *
     * @generated from field: repeated sluice.v1.Engine engines = 1;
     */
    engines: Engine[];
};
/**
 * Describes the message sluice.v1.ListEnginesResponse.
 * Use `create(ListEnginesResponseSchema)` to create a new message.
 */
export declare const ListEnginesResponseSchema: GenMessage<ListEnginesResponse>;
/**
 * Engine is one registered inference engine as this replica sees it.
 *
 * @generated from message sluice.v1.Engine
 */
export type Engine = Message<"sluice.v1.Engine"> & {
    /**
     * The engine's stable id.
     *
     * @generated from field: string id = 1;
     */
    id: string;
    /**
     * The engine's base URL.
     *
     * @generated from field: string url = 2;
     */
    url: string;
    /**
     * The models the engine serves.
     *
     * @generated from field: repeated string models = 3;
     */
    models: string[];
    /**
     * The role the engine plays.
     *
     * @generated from field: sluice.v1.Role role = 4;
     */
    role: Role;
    /**
     * For a prefill engine, its KV-transfer bootstrap port; zero otherwise.
     *
     * @generated from field: uint32 bootstrap_port = 5;
     */
    bootstrapPort: number;
    /**
     * Operator-assigned labels that engine groups select on.
     *
     * @generated from field: map<string, string> labels = 6;
     */
    labels: {
        [key: string]: string;
    };
    /**
     * Whether the engine is currently eligible for picks.
     *
     * @generated from field: bool healthy = 7;
     */
    healthy: boolean;
    /**
     * Why the engine is unhealthy, for example "stale_load" or "epoch_reset";
     * empty when healthy.
     *
     * @generated from field: string health_reason = 8;
     */
    healthReason: string;
    /**
     * The engine's latest load as this replica knows it.
     *
     * @generated from field: sluice.v1.EngineLoad load = 9;
     */
    load?: EngineLoad | undefined;
    /**
     * Where the engine publishes its KV-cache events over ZMQ, for enginelink
     * in fleet mode: "tcp://host:port" (the link connects; the engine binds
     * with "tcp://*:port"), or "bind:tcp://host:port" meaning the engine
     * connects to a socket the link binds and is told apart by its topic.
     * Data-parallel rank r uses port + r. Empty means the engine publishes no
     * KV events.
     *
     * @generated from field: string kv_events_endpoint = 10;
     */
    kvEventsEndpoint: string;
    /**
     * The engine's replay socket (vLLM replay_endpoint), used to fill seq gaps;
     * rank r uses port + r. Empty means gaps cannot be replayed and stay
     * visible as uncertain residency until the next clear or restart.
     *
     * @generated from field: string kv_replay_endpoint = 11;
     */
    kvReplayEndpoint: string;
    /**
     * The engine's Prometheus metrics URL, scraped by enginelink for load;
     * empty means url + "/metrics".
     *
     * @generated from field: string metrics_url = 12;
     */
    metricsUrl: string;
    /**
     * The engine's data-parallel size; 0 or 1 when it is not data parallel.
     *
     * @generated from field: int32 dp_size = 13;
     */
    dpSize: number;
    /**
     * LoRA adapters the engine serves under their own model names (as vLLM
     * lists them in /v1/models). A request naming one is routed among the
     * engines that declare it, in the buckets of the engine's first model,
     * and looks up the cache in that adapter's namespace.
     *
     * @generated from field: repeated string lora_adapters = 14;
     */
    loraAdapters: string[];
};
/**
 * Describes the message sluice.v1.Engine.
 * Use `create(EngineSchema)` to create a new message.
 */
export declare const EngineSchema: GenMessage<Engine>;
/**
 * EngineLoad summarises an engine's latest load report plus this replica's
 * in-flight accounting.
 *
 * @generated from message sluice.v1.EngineLoad
 */
export type EngineLoad = Message<"sluice.v1.EngineLoad"> & {
    /**
     * Whether a load report has been received. When false the reported fields
     * are zero and meaningless; inflight is still accurate.
     *
     * @generated from field: bool load_known = 1;
     */
    loadKnown: boolean;
    /**
     * Requests the engine reported as running.
     *
     * @generated from field: int64 running = 2;
     */
    running: bigint;
    /**
     * Requests the engine reported as queued.
     *
     * @generated from field: int64 waiting = 3;
     */
    waiting: bigint;
    /**
     * KV-cache tokens the engine reported as in use.
     *
     * @generated from field: int64 kv_used = 4;
     */
    kvUsed: bigint;
    /**
     * The engine's KV-cache capacity in tokens.
     *
     * @generated from field: int64 kv_capacity = 5;
     */
    kvCapacity: bigint;
    /**
     * Requests this replica has dispatched to the engine and not yet released.
     *
     * @generated from field: int64 inflight = 6;
     */
    inflight: bigint;
    /**
     * When the engine captured the load report; unset if load_known is false.
     *
     * @generated from field: google.protobuf.Timestamp captured_at = 7;
     */
    capturedAt?: Timestamp | undefined;
};
/**
 * Describes the message sluice.v1.EngineLoad.
 * Use `create(EngineLoadSchema)` to create a new message.
 */
export declare const EngineLoadSchema: GenMessage<EngineLoad>;
/**
 * GetConfigRequest asks for the current configuration.
 *
 * @generated from message sluice.v1.GetConfigRequest
 */
export type GetConfigRequest = Message<"sluice.v1.GetConfigRequest"> & {};
/**
 * Describes the message sluice.v1.GetConfigRequest.
 * Use `create(GetConfigRequestSchema)` to create a new message.
 */
export declare const GetConfigRequestSchema: GenMessage<GetConfigRequest>;
/**
 * GetConfigResponse is the configuration snapshot a replica serves.
 *
 * @generated from message sluice.v1.GetConfigResponse
 */
export type GetConfigResponse = Message<"sluice.v1.GetConfigResponse"> & {
    /**
     * The configuration version; it increases with every admin write.
     *
     * @generated from field: int64 version = 1;
     */
    version: bigint;
    /**
     * The configuration document (buckets, engine groups, workers) as JSON.
     *
     * @generated from field: string document_json = 2;
     */
    documentJson: string;
    /**
     * When this replica loaded the snapshot.
     *
     * @generated from field: google.protobuf.Timestamp loaded_at = 3;
     */
    loadedAt?: Timestamp | undefined;
    /**
     * Where the snapshot came from, for example "file:/etc/sluice.json" or
     * "postgres".
     *
     * @generated from field: string source = 4;
     */
    source: string;
};
/**
 * Describes the message sluice.v1.GetConfigResponse.
 * Use `create(GetConfigResponseSchema)` to create a new message.
 */
export declare const GetConfigResponseSchema: GenMessage<GetConfigResponse>;
/**
 * ApplyConfigRequest carries a whole configuration document.
 *
 * @generated from message sluice.v1.ApplyConfigRequest
 */
export type ApplyConfigRequest = Message<"sluice.v1.ApplyConfigRequest"> & {
    /**
     * The document as YAML or JSON text, in the shape of examples/sluice.yaml
     * and docs/decisions.md "Example" (buckets, workers, default_policy, models).
     *
     * @generated from field: string document = 1;
     */
    document: string;
    /**
     * The version the document was based on; 0 means the version this
     * replica serves now.
     *
     * @generated from field: int64 based_on_version = 2;
     */
    basedOnVersion: bigint;
    /**
     * When true, validate and report every problem, but store nothing.
     *
     * @generated from field: bool validate_only = 3;
     */
    validateOnly: boolean;
};
/**
 * Describes the message sluice.v1.ApplyConfigRequest.
 * Use `create(ApplyConfigRequestSchema)` to create a new message.
 */
export declare const ApplyConfigRequestSchema: GenMessage<ApplyConfigRequest>;
/**
 * ApplyConfigResponse reports the stored (or, for validate_only, checked)
 * configuration.
 *
 * @generated from message sluice.v1.ApplyConfigResponse
 */
export type ApplyConfigResponse = Message<"sluice.v1.ApplyConfigResponse"> & {
    /**
     * The new version; for validate_only, the version the document was
     * checked against.
     *
     * @generated from field: int64 version = 1;
     */
    version: bigint;
    /**
     * Whether a new version was stored (false for validate_only).
     *
     * @generated from field: bool applied = 2;
     */
    applied: boolean;
    /**
     * What changes relative to the base version, for example
     * "buckets: +long ~short; workers: -a2".
     *
     * @generated from field: string summary = 3;
     */
    summary: string;
};
/**
 * Describes the message sluice.v1.ApplyConfigResponse.
 * Use `create(ApplyConfigResponseSchema)` to create a new message.
 */
export declare const ApplyConfigResponseSchema: GenMessage<ApplyConfigResponse>;
/**
 * RollbackResponse reports the version Rollback created.
 *
 * @generated from message sluice.v1.RollbackResponse
 */
export type RollbackResponse = Message<"sluice.v1.RollbackResponse"> & {
    /**
     * The new configuration version.
     *
     * @generated from field: int64 version = 1;
     */
    version: bigint;
    /**
     * What changed, for example "buckets: +long".
     *
     * @generated from field: string summary = 2;
     */
    summary: string;
};
/**
 * Describes the message sluice.v1.RollbackResponse.
 * Use `create(RollbackResponseSchema)` to create a new message.
 */
export declare const RollbackResponseSchema: GenMessage<RollbackResponse>;
/**
 * CreateBucketResponse reports the version CreateBucket created.
 *
 * @generated from message sluice.v1.CreateBucketResponse
 */
export type CreateBucketResponse = Message<"sluice.v1.CreateBucketResponse"> & {
    /**
     * The new configuration version.
     *
     * @generated from field: int64 version = 1;
     */
    version: bigint;
    /**
     * What changed, for example "buckets: +long".
     *
     * @generated from field: string summary = 2;
     */
    summary: string;
};
/**
 * Describes the message sluice.v1.CreateBucketResponse.
 * Use `create(CreateBucketResponseSchema)` to create a new message.
 */
export declare const CreateBucketResponseSchema: GenMessage<CreateBucketResponse>;
/**
 * ReplaceBucketResponse reports the version ReplaceBucket created.
 *
 * @generated from message sluice.v1.ReplaceBucketResponse
 */
export type ReplaceBucketResponse = Message<"sluice.v1.ReplaceBucketResponse"> & {
    /**
     * The new configuration version.
     *
     * @generated from field: int64 version = 1;
     */
    version: bigint;
    /**
     * What changed, for example "buckets: +long".
     *
     * @generated from field: string summary = 2;
     */
    summary: string;
};
/**
 * Describes the message sluice.v1.ReplaceBucketResponse.
 * Use `create(ReplaceBucketResponseSchema)` to create a new message.
 */
export declare const ReplaceBucketResponseSchema: GenMessage<ReplaceBucketResponse>;
/**
 * DeleteBucketResponse reports the version DeleteBucket created.
 *
 * @generated from message sluice.v1.DeleteBucketResponse
 */
export type DeleteBucketResponse = Message<"sluice.v1.DeleteBucketResponse"> & {
    /**
     * The new configuration version.
     *
     * @generated from field: int64 version = 1;
     */
    version: bigint;
    /**
     * What changed, for example "buckets: +long".
     *
     * @generated from field: string summary = 2;
     */
    summary: string;
};
/**
 * Describes the message sluice.v1.DeleteBucketResponse.
 * Use `create(DeleteBucketResponseSchema)` to create a new message.
 */
export declare const DeleteBucketResponseSchema: GenMessage<DeleteBucketResponse>;
/**
 * RegisterEngineResponse reports the version RegisterEngine created.
 *
 * @generated from message sluice.v1.RegisterEngineResponse
 */
export type RegisterEngineResponse = Message<"sluice.v1.RegisterEngineResponse"> & {
    /**
     * The new configuration version.
     *
     * @generated from field: int64 version = 1;
     */
    version: bigint;
    /**
     * What changed, for example "buckets: +long".
     *
     * @generated from field: string summary = 2;
     */
    summary: string;
};
/**
 * Describes the message sluice.v1.RegisterEngineResponse.
 * Use `create(RegisterEngineResponseSchema)` to create a new message.
 */
export declare const RegisterEngineResponseSchema: GenMessage<RegisterEngineResponse>;
/**
 * UpdateEngineResponse reports the version UpdateEngine created.
 *
 * @generated from message sluice.v1.UpdateEngineResponse
 */
export type UpdateEngineResponse = Message<"sluice.v1.UpdateEngineResponse"> & {
    /**
     * The new configuration version.
     *
     * @generated from field: int64 version = 1;
     */
    version: bigint;
    /**
     * What changed, for example "buckets: +long".
     *
     * @generated from field: string summary = 2;
     */
    summary: string;
};
/**
 * Describes the message sluice.v1.UpdateEngineResponse.
 * Use `create(UpdateEngineResponseSchema)` to create a new message.
 */
export declare const UpdateEngineResponseSchema: GenMessage<UpdateEngineResponse>;
/**
 * DrainEngineResponse reports the version DrainEngine created.
 *
 * @generated from message sluice.v1.DrainEngineResponse
 */
export type DrainEngineResponse = Message<"sluice.v1.DrainEngineResponse"> & {
    /**
     * The new configuration version.
     *
     * @generated from field: int64 version = 1;
     */
    version: bigint;
    /**
     * What changed, for example "buckets: +long".
     *
     * @generated from field: string summary = 2;
     */
    summary: string;
};
/**
 * Describes the message sluice.v1.DrainEngineResponse.
 * Use `create(DrainEngineResponseSchema)` to create a new message.
 */
export declare const DrainEngineResponseSchema: GenMessage<DrainEngineResponse>;
/**
 * RemoveEngineResponse reports the version RemoveEngine created.
 *
 * @generated from message sluice.v1.RemoveEngineResponse
 */
export type RemoveEngineResponse = Message<"sluice.v1.RemoveEngineResponse"> & {
    /**
     * The new configuration version.
     *
     * @generated from field: int64 version = 1;
     */
    version: bigint;
    /**
     * What changed, for example "buckets: +long".
     *
     * @generated from field: string summary = 2;
     */
    summary: string;
};
/**
 * Describes the message sluice.v1.RemoveEngineResponse.
 * Use `create(RemoveEngineResponseSchema)` to create a new message.
 */
export declare const RemoveEngineResponseSchema: GenMessage<RemoveEngineResponse>;
/**
 * GetEngineResponse is one registered engine.
 *
 * @generated from message sluice.v1.GetEngineResponse
 */
export type GetEngineResponse = Message<"sluice.v1.GetEngineResponse"> & {
    /**
     * The engine as this replica sees it.
     *
     * @generated from field: sluice.v1.Engine engine = 1;
     */
    engine?: Engine | undefined;
};
/**
 * Describes the message sluice.v1.GetEngineResponse.
 * Use `create(GetEngineResponseSchema)` to create a new message.
 */
export declare const GetEngineResponseSchema: GenMessage<GetEngineResponse>;
/**
 * ListVersionsRequest selects log entries.
 *
 * @generated from message sluice.v1.ListVersionsRequest
 */
export type ListVersionsRequest = Message<"sluice.v1.ListVersionsRequest"> & {
    /**
     * The most entries to return; 0 means all.
     *
     * @generated from field: int32 limit = 1;
     */
    limit: number;
};
/**
 * Describes the message sluice.v1.ListVersionsRequest.
 * Use `create(ListVersionsRequestSchema)` to create a new message.
 */
export declare const ListVersionsRequestSchema: GenMessage<ListVersionsRequest>;
/**
 * ListVersionsResponse lists log entries, newest first.
 *
 * @generated from message sluice.v1.ListVersionsResponse
 */
export type ListVersionsResponse = Message<"sluice.v1.ListVersionsResponse"> & {
    /**
     * The entries.
     *
     * @generated from field: repeated sluice.v1.ConfigVersion versions = 1;
     */
    versions: ConfigVersion[];
    /**
     * The version this replica serves.
     *
     * @generated from field: int64 current_version = 2;
     */
    currentVersion: bigint;
};
/**
 * Describes the message sluice.v1.ListVersionsResponse.
 * Use `create(ListVersionsResponseSchema)` to create a new message.
 */
export declare const ListVersionsResponseSchema: GenMessage<ListVersionsResponse>;
/**
 * ConfigVersion is one entry of the configuration version log.
 *
 * @generated from message sluice.v1.ConfigVersion
 */
export type ConfigVersion = Message<"sluice.v1.ConfigVersion"> & {
    /**
     * The version number, from 1.
     *
     * @generated from field: int64 version = 1;
     */
    version: bigint;
    /**
     * Who made the change: the role of the token used, or "seed" / "file".
     *
     * @generated from field: string author = 2;
     */
    author: string;
    /**
     * When the version was stored.
     *
     * @generated from field: google.protobuf.Timestamp created_at = 3;
     */
    createdAt?: Timestamp | undefined;
    /**
     * What changed relative to the previous version.
     *
     * @generated from field: string summary = 4;
     */
    summary: string;
    /**
     * For a rollback, the version it restored; 0 otherwise.
     *
     * @generated from field: int64 rollback_of = 5;
     */
    rollbackOf: bigint;
};
/**
 * Describes the message sluice.v1.ConfigVersion.
 * Use `create(ConfigVersionSchema)` to create a new message.
 */
export declare const ConfigVersionSchema: GenMessage<ConfigVersion>;
/**
 * GetVersionRequest names a version.
 *
 * @generated from message sluice.v1.GetVersionRequest
 */
export type GetVersionRequest = Message<"sluice.v1.GetVersionRequest"> & {
    /**
     * The version number.
     *
     * @generated from field: int64 version = 1;
     */
    version: bigint;
};
/**
 * Describes the message sluice.v1.GetVersionRequest.
 * Use `create(GetVersionRequestSchema)` to create a new message.
 */
export declare const GetVersionRequestSchema: GenMessage<GetVersionRequest>;
/**
 * GetVersionResponse is one logged version.
 *
 * @generated from message sluice.v1.GetVersionResponse
 */
export type GetVersionResponse = Message<"sluice.v1.GetVersionResponse"> & {
    /**
     * The log entry.
     *
     * @generated from field: sluice.v1.ConfigVersion info = 1;
     */
    info?: ConfigVersion | undefined;
    /**
     * The full document of that version as JSON.
     *
     * @generated from field: string document_json = 2;
     */
    documentJson: string;
};
/**
 * Describes the message sluice.v1.GetVersionResponse.
 * Use `create(GetVersionResponseSchema)` to create a new message.
 */
export declare const GetVersionResponseSchema: GenMessage<GetVersionResponse>;
/**
 * RollbackRequest restores an earlier version.
 *
 * @generated from message sluice.v1.RollbackRequest
 */
export type RollbackRequest = Message<"sluice.v1.RollbackRequest"> & {
    /**
     * The version whose document becomes current again.
     *
     * @generated from field: int64 version = 1;
     */
    version: bigint;
    /**
     * The version the rollback is based on; 0 means the version this replica
     * serves now.
     *
     * @generated from field: int64 based_on_version = 2;
     */
    basedOnVersion: bigint;
};
/**
 * Describes the message sluice.v1.RollbackRequest.
 * Use `create(RollbackRequestSchema)` to create a new message.
 */
export declare const RollbackRequestSchema: GenMessage<RollbackRequest>;
/**
 * ListBucketsRequest asks for the buckets in force.
 *
 * @generated from message sluice.v1.ListBucketsRequest
 */
export type ListBucketsRequest = Message<"sluice.v1.ListBucketsRequest"> & {};
/**
 * Describes the message sluice.v1.ListBucketsRequest.
 * Use `create(ListBucketsRequestSchema)` to create a new message.
 */
export declare const ListBucketsRequestSchema: GenMessage<ListBucketsRequest>;
/**
 * ListBucketsResponse lists buckets.
 *
 * @generated from message sluice.v1.ListBucketsResponse
 */
export type ListBucketsResponse = Message<"sluice.v1.ListBucketsResponse"> & {
    /**
     * The configuration version the buckets belong to.
     *
     * @generated from field: int64 version = 1;
     */
    version: bigint;
    /**
     * Each bucket as in the configuration document: id, rank, models,
     * limits, max_context_tokens, groups.
     *
     * @generated from field: repeated google.protobuf.Struct buckets = 2;
     */
    buckets: JsonObject[];
};
/**
 * Describes the message sluice.v1.ListBucketsResponse.
 * Use `create(ListBucketsResponseSchema)` to create a new message.
 */
export declare const ListBucketsResponseSchema: GenMessage<ListBucketsResponse>;
/**
 * GetBucketRequest names a bucket.
 *
 * @generated from message sluice.v1.GetBucketRequest
 */
export type GetBucketRequest = Message<"sluice.v1.GetBucketRequest"> & {
    /**
     * The bucket id.
     *
     * @generated from field: string id = 1;
     */
    id: string;
};
/**
 * Describes the message sluice.v1.GetBucketRequest.
 * Use `create(GetBucketRequestSchema)` to create a new message.
 */
export declare const GetBucketRequestSchema: GenMessage<GetBucketRequest>;
/**
 * GetBucketResponse is one bucket.
 *
 * @generated from message sluice.v1.GetBucketResponse
 */
export type GetBucketResponse = Message<"sluice.v1.GetBucketResponse"> & {
    /**
     * The configuration version the bucket belongs to.
     *
     * @generated from field: int64 version = 1;
     */
    version: bigint;
    /**
     * The bucket as in the configuration document.
     *
     * @generated from field: google.protobuf.Struct bucket = 2;
     */
    bucket?: JsonObject | undefined;
};
/**
 * Describes the message sluice.v1.GetBucketResponse.
 * Use `create(GetBucketResponseSchema)` to create a new message.
 */
export declare const GetBucketResponseSchema: GenMessage<GetBucketResponse>;
/**
 * CreateBucketRequest adds a bucket.
 *
 * @generated from message sluice.v1.CreateBucketRequest
 */
export type CreateBucketRequest = Message<"sluice.v1.CreateBucketRequest"> & {
    /**
     * The bucket as in the configuration document, including its id.
     *
     * @generated from field: google.protobuf.Struct bucket = 1;
     */
    bucket?: JsonObject | undefined;
    /**
     * The version the change is based on; 0 means the current one.
     *
     * @generated from field: int64 based_on_version = 2;
     */
    basedOnVersion: bigint;
};
/**
 * Describes the message sluice.v1.CreateBucketRequest.
 * Use `create(CreateBucketRequestSchema)` to create a new message.
 */
export declare const CreateBucketRequestSchema: GenMessage<CreateBucketRequest>;
/**
 * ReplaceBucketRequest replaces a bucket.
 *
 * @generated from message sluice.v1.ReplaceBucketRequest
 */
export type ReplaceBucketRequest = Message<"sluice.v1.ReplaceBucketRequest"> & {
    /**
     * The id of the bucket to replace.
     *
     * @generated from field: string id = 1;
     */
    id: string;
    /**
     * The new bucket; its id, if set, must equal id.
     *
     * @generated from field: google.protobuf.Struct bucket = 2;
     */
    bucket?: JsonObject | undefined;
    /**
     * The version the change is based on; 0 means the current one.
     *
     * @generated from field: int64 based_on_version = 3;
     */
    basedOnVersion: bigint;
};
/**
 * Describes the message sluice.v1.ReplaceBucketRequest.
 * Use `create(ReplaceBucketRequestSchema)` to create a new message.
 */
export declare const ReplaceBucketRequestSchema: GenMessage<ReplaceBucketRequest>;
/**
 * DeleteBucketRequest removes a bucket.
 *
 * @generated from message sluice.v1.DeleteBucketRequest
 */
export type DeleteBucketRequest = Message<"sluice.v1.DeleteBucketRequest"> & {
    /**
     * The bucket id.
     *
     * @generated from field: string id = 1;
     */
    id: string;
    /**
     * The version the change is based on; 0 means the current one.
     *
     * @generated from field: int64 based_on_version = 2;
     */
    basedOnVersion: bigint;
};
/**
 * Describes the message sluice.v1.DeleteBucketRequest.
 * Use `create(DeleteBucketRequestSchema)` to create a new message.
 */
export declare const DeleteBucketRequestSchema: GenMessage<DeleteBucketRequest>;
/**
 * GetEngineRequest names an engine.
 *
 * @generated from message sluice.v1.GetEngineRequest
 */
export type GetEngineRequest = Message<"sluice.v1.GetEngineRequest"> & {
    /**
     * The engine id.
     *
     * @generated from field: string id = 1;
     */
    id: string;
};
/**
 * Describes the message sluice.v1.GetEngineRequest.
 * Use `create(GetEngineRequestSchema)` to create a new message.
 */
export declare const GetEngineRequestSchema: GenMessage<GetEngineRequest>;
/**
 * EngineSpec is an engine as declared in the configuration's worker list.
 *
 * @generated from message sluice.v1.EngineSpec
 */
export type EngineSpec = Message<"sluice.v1.EngineSpec"> & {
    /**
     * The engine's stable, unique id.
     *
     * @generated from field: string id = 1;
     */
    id: string;
    /**
     * The engine's absolute http(s) base URL.
     *
     * @generated from field: string url = 2;
     */
    url: string;
    /**
     * The models the engine serves; at least one.
     *
     * @generated from field: repeated string models = 3;
     */
    models: string[];
    /**
     * The engine's role.
     *
     * @generated from field: sluice.v1.Role role = 4;
     */
    role: Role;
    /**
     * A prefill engine's bootstrap port; 0 when unset.
     *
     * @generated from field: uint32 bootstrap_port = 5;
     */
    bootstrapPort: number;
    /**
     * Free-form labels.
     *
     * @generated from field: map<string, string> labels = 6;
     */
    labels: {
        [key: string]: string;
    };
    /**
     * Where the engine publishes its KV-cache events over ZMQ, for enginelink
     * in fleet mode: "tcp://host:port" (the link connects; the engine binds
     * with "tcp://*:port"), or "bind:tcp://host:port" meaning the engine
     * connects to a socket the link binds and is told apart by its topic.
     * Data-parallel rank r uses port + r. Empty means the engine publishes no
     * KV events.
     *
     * @generated from field: string kv_events_endpoint = 7;
     */
    kvEventsEndpoint: string;
    /**
     * The engine's replay socket (vLLM replay_endpoint), used to fill seq gaps;
     * rank r uses port + r. Empty means gaps cannot be replayed and stay
     * visible as uncertain residency until the next clear or restart.
     *
     * @generated from field: string kv_replay_endpoint = 8;
     */
    kvReplayEndpoint: string;
    /**
     * The engine's Prometheus metrics URL, scraped by enginelink for load;
     * empty means url + "/metrics".
     *
     * @generated from field: string metrics_url = 9;
     */
    metricsUrl: string;
    /**
     * The engine's data-parallel size; 0 or 1 when it is not data parallel.
     *
     * @generated from field: int32 dp_size = 10;
     */
    dpSize: number;
    /**
     * LoRA adapters the engine serves under their own model names (as vLLM
     * lists them in /v1/models). A request naming one is routed among the
     * engines that declare it, in the buckets of the engine's first model,
     * and looks up the cache in that adapter's namespace.
     *
     * @generated from field: repeated string lora_adapters = 11;
     */
    loraAdapters: string[];
};
/**
 * Describes the message sluice.v1.EngineSpec.
 * Use `create(EngineSpecSchema)` to create a new message.
 */
export declare const EngineSpecSchema: GenMessage<EngineSpec>;
/**
 * RegisterEngineRequest adds an engine.
 *
 * @generated from message sluice.v1.RegisterEngineRequest
 */
export type RegisterEngineRequest = Message<"sluice.v1.RegisterEngineRequest"> & {
    /**
     * The engine.
     *
     * @generated from field: sluice.v1.EngineSpec engine = 1;
     */
    engine?: EngineSpec | undefined;
    /**
     * The version the change is based on; 0 means the current one.
     *
     * @generated from field: int64 based_on_version = 2;
     */
    basedOnVersion: bigint;
};
/**
 * Describes the message sluice.v1.RegisterEngineRequest.
 * Use `create(RegisterEngineRequestSchema)` to create a new message.
 */
export declare const RegisterEngineRequestSchema: GenMessage<RegisterEngineRequest>;
/**
 * UpdateEngineRequest replaces an engine's spec.
 *
 * @generated from message sluice.v1.UpdateEngineRequest
 */
export type UpdateEngineRequest = Message<"sluice.v1.UpdateEngineRequest"> & {
    /**
     * The id of the engine to update.
     *
     * @generated from field: string id = 1;
     */
    id: string;
    /**
     * The new spec; its id, if set, must equal id.
     *
     * @generated from field: sluice.v1.EngineSpec engine = 2;
     */
    engine?: EngineSpec | undefined;
    /**
     * The version the change is based on; 0 means the current one.
     *
     * @generated from field: int64 based_on_version = 3;
     */
    basedOnVersion: bigint;
};
/**
 * Describes the message sluice.v1.UpdateEngineRequest.
 * Use `create(UpdateEngineRequestSchema)` to create a new message.
 */
export declare const UpdateEngineRequestSchema: GenMessage<UpdateEngineRequest>;
/**
 * DrainEngineRequest drains an engine.
 *
 * @generated from message sluice.v1.DrainEngineRequest
 */
export type DrainEngineRequest = Message<"sluice.v1.DrainEngineRequest"> & {
    /**
     * The engine id.
     *
     * @generated from field: string id = 1;
     */
    id: string;
    /**
     * The version the change is based on; 0 means the current one.
     *
     * @generated from field: int64 based_on_version = 2;
     */
    basedOnVersion: bigint;
};
/**
 * Describes the message sluice.v1.DrainEngineRequest.
 * Use `create(DrainEngineRequestSchema)` to create a new message.
 */
export declare const DrainEngineRequestSchema: GenMessage<DrainEngineRequest>;
/**
 * RemoveEngineRequest removes an engine.
 *
 * @generated from message sluice.v1.RemoveEngineRequest
 */
export type RemoveEngineRequest = Message<"sluice.v1.RemoveEngineRequest"> & {
    /**
     * The engine id.
     *
     * @generated from field: string id = 1;
     */
    id: string;
    /**
     * The version the change is based on; 0 means the current one.
     *
     * @generated from field: int64 based_on_version = 2;
     */
    basedOnVersion: bigint;
};
/**
 * Describes the message sluice.v1.RemoveEngineRequest.
 * Use `create(RemoveEngineRequestSchema)` to create a new message.
 */
export declare const RemoveEngineRequestSchema: GenMessage<RemoveEngineRequest>;
/**
 * AdminService lets operators inspect and change the decider's engines and
 * configuration. Reads are served from the replica's in-memory state; every
 * write goes through the config store as one transaction that validates the
 * whole resulting document, bumps the config version and reaches every
 * replica. Writes carry the version they were based on (0 means "the version
 * this replica serves now"); a stale one fails with FAILED_PRECONDITION
 * naming the current version. An invalid result fails with INVALID_ARGUMENT
 * carrying a google.rpc.BadRequest with every problem and its field path.
 * Reads need a viewer or admin token, writes an admin token, when tokens are
 * configured.
 *
 * @generated from service sluice.v1.AdminService
 */
export declare const AdminService: GenService<{
    /**
     * ListEngines returns every registered engine with its health and the
     * latest load this replica knows of, ordered by engine id.
     *
     * @generated from rpc sluice.v1.AdminService.ListEngines
     */
    listEngines: {
        methodKind: "unary";
        input: typeof ListEnginesRequestSchema;
        output: typeof ListEnginesResponseSchema;
    };
    /**
     * GetConfig returns the configuration snapshot this replica currently
     * serves.
     *
     * @generated from rpc sluice.v1.AdminService.GetConfig
     */
    getConfig: {
        methodKind: "unary";
        input: typeof GetConfigRequestSchema;
        output: typeof GetConfigResponseSchema;
    };
    /**
     * ApplyConfig replaces the whole configuration document atomically, or
     * with validate_only checks it and changes nothing.
     *
     * @generated from rpc sluice.v1.AdminService.ApplyConfig
     */
    applyConfig: {
        methodKind: "unary";
        input: typeof ApplyConfigRequestSchema;
        output: typeof ApplyConfigResponseSchema;
    };
    /**
     * ListVersions lists the configuration version log, newest first.
     *
     * @generated from rpc sluice.v1.AdminService.ListVersions
     */
    listVersions: {
        methodKind: "unary";
        input: typeof ListVersionsRequestSchema;
        output: typeof ListVersionsResponseSchema;
    };
    /**
     * GetVersion returns one logged version with its document.
     *
     * @generated from rpc sluice.v1.AdminService.GetVersion
     */
    getVersion: {
        methodKind: "unary";
        input: typeof GetVersionRequestSchema;
        output: typeof GetVersionResponseSchema;
    };
    /**
     * Rollback stores an earlier version's document as a new version.
     *
     * @generated from rpc sluice.v1.AdminService.Rollback
     */
    rollback: {
        methodKind: "unary";
        input: typeof RollbackRequestSchema;
        output: typeof RollbackResponseSchema;
    };
    /**
     * ListBuckets returns the buckets of the configuration in force, in
     * document order.
     *
     * @generated from rpc sluice.v1.AdminService.ListBuckets
     */
    listBuckets: {
        methodKind: "unary";
        input: typeof ListBucketsRequestSchema;
        output: typeof ListBucketsResponseSchema;
    };
    /**
     * GetBucket returns one bucket, or NOT_FOUND.
     *
     * @generated from rpc sluice.v1.AdminService.GetBucket
     */
    getBucket: {
        methodKind: "unary";
        input: typeof GetBucketRequestSchema;
        output: typeof GetBucketResponseSchema;
    };
    /**
     * CreateBucket appends a bucket; ALREADY_EXISTS if its id is taken.
     *
     * @generated from rpc sluice.v1.AdminService.CreateBucket
     */
    createBucket: {
        methodKind: "unary";
        input: typeof CreateBucketRequestSchema;
        output: typeof CreateBucketResponseSchema;
    };
    /**
     * ReplaceBucket replaces the bucket with the given id, or NOT_FOUND.
     *
     * @generated from rpc sluice.v1.AdminService.ReplaceBucket
     */
    replaceBucket: {
        methodKind: "unary";
        input: typeof ReplaceBucketRequestSchema;
        output: typeof ReplaceBucketResponseSchema;
    };
    /**
     * DeleteBucket removes a bucket, or NOT_FOUND.
     *
     * @generated from rpc sluice.v1.AdminService.DeleteBucket
     */
    deleteBucket: {
        methodKind: "unary";
        input: typeof DeleteBucketRequestSchema;
        output: typeof DeleteBucketResponseSchema;
    };
    /**
     * GetEngine returns one registered engine, or NOT_FOUND.
     *
     * @generated from rpc sluice.v1.AdminService.GetEngine
     */
    getEngine: {
        methodKind: "unary";
        input: typeof GetEngineRequestSchema;
        output: typeof GetEngineResponseSchema;
    };
    /**
     * RegisterEngine adds an engine to the configuration's worker list;
     * ALREADY_EXISTS if its id is taken.
     *
     * @generated from rpc sluice.v1.AdminService.RegisterEngine
     */
    registerEngine: {
        methodKind: "unary";
        input: typeof RegisterEngineRequestSchema;
        output: typeof RegisterEngineResponseSchema;
    };
    /**
     * UpdateEngine replaces a configured engine's spec, or NOT_FOUND.
     *
     * @generated from rpc sluice.v1.AdminService.UpdateEngine
     */
    updateEngine: {
        methodKind: "unary";
        input: typeof UpdateEngineRequestSchema;
        output: typeof UpdateEngineResponseSchema;
    };
    /**
     * DrainEngine takes an engine out of every engine group that lists it
     * and labels it sluice.dev/drained=true; it stays in the worker list so
     * it can be put back with UpdateEngine and a replaced bucket.
     *
     * @generated from rpc sluice.v1.AdminService.DrainEngine
     */
    drainEngine: {
        methodKind: "unary";
        input: typeof DrainEngineRequestSchema;
        output: typeof DrainEngineResponseSchema;
    };
    /**
     * RemoveEngine deletes an engine from the worker list and from every
     * engine group that lists it, or NOT_FOUND.
     *
     * @generated from rpc sluice.v1.AdminService.RemoveEngine
     */
    removeEngine: {
        methodKind: "unary";
        input: typeof RemoveEngineRequestSchema;
        output: typeof RemoveEngineResponseSchema;
    };
}>;
