import type { GenEnum, GenFile, GenMessage, GenService } from "@bufbuild/protobuf/codegenv2";
import type { Duration, Timestamp } from "@bufbuild/protobuf/wkt";
import type { Message } from "@bufbuild/protobuf";
/**
 * Describes the file sluice/v1/decider.proto.
 */
export declare const file_sluice_v1_decider: GenFile;
/**
 * DecideRequest carries the routing facts of one request. The caller computes
 * them (tokenising the prompt, reading headers); the decider never sees the
 * request body.
 *
 * @generated from message sluice.v1.DecideRequest
 */
export type DecideRequest = Message<"sluice.v1.DecideRequest"> & {
    /**
     * The model the request names, used to select the buckets that serve it.
     * Required.
     *
     * @generated from field: string model = 1;
     */
    model: string;
    /**
     * The number of prompt tokens. Must not be negative.
     *
     * @generated from field: int64 input_tokens = 2;
     */
    inputTokens: bigint;
    /**
     * The largest number of tokens (input plus output) the request may occupy
     * at once, usually input_tokens plus max_tokens. When unset the output
     * budget is unknown and a bucket's context capacity is checked against
     * input_tokens alone. It must not be below input_tokens.
     *
     * @generated from field: optional int64 expected_peak_tokens = 3;
     */
    expectedPeakTokens?: bigint | undefined;
    /**
     * The prompt's token ids, when the caller has them; when present there must
     * be exactly input_tokens of them. They enable prefix-cache aware placement;
     * an empty list disables it for this request.
     *
     * @generated from field: repeated uint32 token_ids = 4;
     */
    tokenIds: number[];
    /**
     * A key that ties requests of one conversation together so that they land
     * on the same engine while it stays admissible (session affinity). Empty
     * means no session.
     *
     * @generated from field: string session_key = 5;
     */
    sessionKey: string;
    /**
     * A caller-chosen key that sticky policies bind to one engine, for example
     * a tenant or user id. Empty means none.
     *
     * @generated from field: string routing_key = 6;
     */
    routingKey: string;
    /**
     * The caller's id for the request, echoed into logs and traces. Optional;
     * it is not required to be unique.
     *
     * @generated from field: string request_id = 7;
     */
    requestId: string;
    /**
     * When true the decider computes a decision but opens no lease and changes
     * no state; the response's lease_id is empty.
     *
     * @generated from field: bool dry_run = 8;
     */
    dryRun: boolean;
    /**
     * When true the response carries an Explain describing every bucket,
     * stage and candidate the decider considered.
     *
     * @generated from field: bool explain = 9;
     */
    explain: boolean;
    /**
     * Engines the caller has already failed on for this request; they are not
     * picked again. Used for one retry after an engine failure.
     *
     * @generated from field: repeated string exclude_engine_ids = 10;
     */
    excludeEngineIds: string[];
    /**
     * The LoRA adapter the request runs with, when it names one explicitly
     * (SGLang's lora_path). Cached blocks of an adapter are a separate
     * namespace: they are no hit for the base model or another adapter. When
     * empty and model names an adapter an engine declares (lora_adapters),
     * that adapter is used and the request is routed to the engines serving
     * it under their base model's buckets.
     *
     * @generated from field: string lora_name = 11;
     */
    loraName: string;
    /**
     * The cache salt that isolates this request's cached blocks from other
     * tenants (SGLang cache_salt, vLLM cache_salt). Empty means none.
     *
     * @generated from field: string cache_salt = 12;
     */
    cacheSalt: string;
    /**
     * The request's time-to-first-token target in milliseconds (the gateway
     * maps its x-ttft-slo-ms header here). When the configuration enables
     * ttft_slo, the buckets whose predicted time to first token meets the
     * target are tried first, the rest after them, each part in capacity
     * order. It must then be a positive finite number no larger than
     * ttft_slo.max_target_ms, or the call fails with INVALID_ARGUMENT
     * (INVALID_TTFT_SLO). When the configuration does not enable ttft_slo it
     * is ignored, whatever its value (NaN included: the gateway sends NaN for
     * a header that is not a number, so that the decider decides whether that
     * matters). Unset means no target.
     *
     * @generated from field: optional double ttft_slo_ms = 13;
     */
    ttftSloMs?: number | undefined;
};
/**
 * Describes the message sluice.v1.DecideRequest.
 * Use `create(DecideRequestSchema)` to create a new message.
 */
export declare const DecideRequestSchema: GenMessage<DecideRequest>;
/**
 * DecideResponse is the decision for one request.
 *
 * @generated from message sluice.v1.DecideResponse
 */
export type DecideResponse = Message<"sluice.v1.DecideResponse"> & {
    /**
     * The bucket that served the request.
     *
     * @generated from field: string bucket_id = 1;
     */
    bucketId: string;
    /**
     * The configuration version the decision was made under.
     *
     * @generated from field: int64 config_version = 2;
     */
    configVersion: bigint;
    /**
     * The engine, or the prefill + decode pair of engines, to forward to.
     *
     * @generated from field: sluice.v1.BucketPick pick = 3;
     */
    pick?: BucketPick | undefined;
    /**
     * The lease counting this request as in flight; pass it to Release when the
     * request ends. Empty when dry_run was set.
     *
     * @generated from field: string lease_id = 4;
     */
    leaseId: string;
    /**
     * When the lease expires if it is not released first. Unset when dry_run
     * was set.
     *
     * @generated from field: google.protobuf.Timestamp lease_expires_at = 5;
     */
    leaseExpiresAt?: Timestamp | undefined;
    /**
     * Why the decision came out as it did. Set only when explain was requested.
     *
     * @generated from field: sluice.v1.Explain explain = 6;
     */
    explain?: Explain | undefined;
};
/**
 * Describes the message sluice.v1.DecideResponse.
 * Use `create(DecideResponseSchema)` to create a new message.
 */
export declare const DecideResponseSchema: GenMessage<DecideResponse>;
/**
 * BucketPick is the outcome of a bucket: either one engine that serves the
 * whole request, or a prefill engine and a decode engine.
 *
 * @generated from message sluice.v1.BucketPick
 */
export type BucketPick = Message<"sluice.v1.BucketPick"> & {
    /**
     * The shape of the pick; exactly one is set.
     *
     * @generated from oneof sluice.v1.BucketPick.kind
     */
    kind: {
        /**
         * A single engine that serves the whole request.
         *
         * @generated from field: sluice.v1.EnginePick plain = 1;
         */
        value: EnginePick;
        case: "plain";
    } | {
        /**
         * A disaggregated pair: the caller sends the request to both engines and
         * relays the decode engine's response.
         *
         * @generated from field: sluice.v1.PrefillDecodePick pd = 2;
         */
        value: PrefillDecodePick;
        case: "pd";
    } | {
        case: undefined;
        value?: undefined;
    };
};
/**
 * Describes the message sluice.v1.BucketPick.
 * Use `create(BucketPickSchema)` to create a new message.
 */
export declare const BucketPickSchema: GenMessage<BucketPick>;
/**
 * PrefillDecodePick is a disaggregated prefill/decode pair.
 *
 * @generated from message sluice.v1.PrefillDecodePick
 */
export type PrefillDecodePick = Message<"sluice.v1.PrefillDecodePick"> & {
    /**
     * The engine that runs prefill and transfers the KV cache to decode.
     *
     * @generated from field: sluice.v1.EnginePick prefill = 1;
     */
    prefill?: EnginePick | undefined;
    /**
     * The engine that receives the KV cache and generates the output.
     *
     * @generated from field: sluice.v1.EnginePick decode = 2;
     */
    decode?: EnginePick | undefined;
};
/**
 * Describes the message sluice.v1.PrefillDecodePick.
 * Use `create(PrefillDecodePickSchema)` to create a new message.
 */
export declare const PrefillDecodePickSchema: GenMessage<PrefillDecodePick>;
/**
 * EnginePick is one picked engine.
 *
 * @generated from message sluice.v1.EnginePick
 */
export type EnginePick = Message<"sluice.v1.EnginePick"> & {
    /**
     * The engine's stable id, as registered in the worker registry.
     *
     * @generated from field: string engine_id = 1;
     */
    engineId: string;
    /**
     * The engine's base URL, for example "http://10.0.0.5:30000".
     *
     * @generated from field: string url = 2;
     */
    url: string;
    /**
     * A short machine-readable reason the policy gave for this pick, for
     * example "prefix_match", "least_load" or "session_affinity".
     *
     * @generated from field: string reason = 3;
     */
    reason: string;
    /**
     * For a prefill engine, the port its KV-transfer bootstrap server listens
     * on (sent to both engines as bootstrap_port). Zero when not applicable.
     *
     * @generated from field: uint32 bootstrap_port = 4;
     */
    bootstrapPort: number;
    /**
     * The role the engine plays in this pick.
     *
     * @generated from field: sluice.v1.Role role = 5;
     */
    role: Role;
};
/**
 * Describes the message sluice.v1.EnginePick.
 * Use `create(EnginePickSchema)` to create a new message.
 */
export declare const EnginePickSchema: GenMessage<EnginePick>;
/**
 * Explain describes how a decision was reached, for operators and tests. Its
 * strings are diagnostic: do not branch on them beyond the documented values.
 *
 * @generated from message sluice.v1.Explain
 */
export type Explain = Message<"sluice.v1.Explain"> & {
    /**
     * The buckets tried, in the order they were tried.
     *
     * @generated from field: repeated sluice.v1.BucketAttempt attempts = 1;
     */
    attempts: BucketAttempt[];
    /**
     * The age of the oldest engine load report the decision relied on.
     *
     * @generated from field: google.protobuf.Duration oldest_load_age = 2;
     */
    oldestLoadAge?: Duration | undefined;
    /**
     * How the request's ttft_slo_ms shaped the bucket order; unset when the
     * request carried no target.
     *
     * @generated from field: sluice.v1.TTFTSLOExplain ttft_slo = 3;
     */
    ttftSlo?: TTFTSLOExplain | undefined;
};
/**
 * Describes the message sluice.v1.Explain.
 * Use `create(ExplainSchema)` to create a new message.
 */
export declare const ExplainSchema: GenMessage<Explain>;
/**
 * TTFTSLOExplain is what the time-to-first-token preference did with a
 * request's target.
 *
 * @generated from message sluice.v1.TTFTSLOExplain
 */
export type TTFTSLOExplain = Message<"sluice.v1.TTFTSLOExplain"> & {
    /**
     * The request's ttft_slo_ms.
     *
     * @generated from field: double target_ms = 1;
     */
    targetMs: number;
    /**
     * "ordered": buckets were ordered by predicted time to first token;
     * "disabled": the configuration does not enable ttft_slo, so the target
     * was ignored and buckets kept capacity order.
     *
     * @generated from field: string status = 2;
     */
    status: string;
    /**
     * Every bucket the request fits, in the order they were to be tried, with
     * its prediction; empty when status is "disabled".
     *
     * @generated from field: repeated sluice.v1.BucketTTFT buckets = 3;
     */
    buckets: BucketTTFT[];
};
/**
 * Describes the message sluice.v1.TTFTSLOExplain.
 * Use `create(TTFTSLOExplainSchema)` to create a new message.
 */
export declare const TTFTSLOExplainSchema: GenMessage<TTFTSLOExplain>;
/**
 * BucketTTFT is one bucket's predicted time to first token for a request:
 * the least ttft_aware estimate among the eligible engines of its plain
 * group, or of its prefill group for a disaggregated bucket.
 *
 * @generated from message sluice.v1.BucketTTFT
 */
export type BucketTTFT = Message<"sluice.v1.BucketTTFT"> & {
    /**
     * The bucket's id.
     *
     * @generated from field: string bucket_id = 1;
     */
    bucketId: string;
    /**
     * The least estimate; unset when the bucket had no eligible engine.
     *
     * @generated from field: google.protobuf.Duration predicted_ttft = 2;
     */
    predictedTtft?: Duration | undefined;
    /**
     * Whether predicted_ttft is at or below the target. False when there is
     * no prediction.
     *
     * @generated from field: bool met = 3;
     */
    met: boolean;
    /**
     * The engine the least estimate belongs to; empty without a prediction.
     *
     * @generated from field: string engine_id = 4;
     */
    engineId: string;
    /**
     * The estimate's parts on that engine; unset without a prediction.
     *
     * @generated from field: sluice.v1.TTFTEstimate estimate = 5;
     */
    estimate?: TTFTEstimate | undefined;
    /**
     * Why there is no prediction, for example "no eligible prefill engine";
     * empty when there is one.
     *
     * @generated from field: string note = 6;
     */
    note: string;
};
/**
 * Describes the message sluice.v1.BucketTTFT.
 * Use `create(BucketTTFTSchema)` to create a new message.
 */
export declare const BucketTTFTSchema: GenMessage<BucketTTFT>;
/**
 * TTFTEstimate is one engine's estimated time to first token for a request,
 * as ttft_aware computes it: estimate = queue + slot_wait + own_prefill.
 *
 * @generated from message sluice.v1.TTFTEstimate
 */
export type TTFTEstimate = Message<"sluice.v1.TTFTEstimate"> & {
    /**
     * The whole estimate.
     *
     * @generated from field: google.protobuf.Duration estimate = 1;
     */
    estimate?: Duration | undefined;
    /**
     * The time to prefill the tokens queued ahead: queue_tokens divided by
     * prefill_tokens_per_s.
     *
     * @generated from field: google.protobuf.Duration queue = 2;
     */
    queue?: Duration | undefined;
    /**
     * The time to wait for a batch slot on an engine that would queue the
     * request; zero otherwise, or when it cannot be measured.
     *
     * @generated from field: google.protobuf.Duration slot_wait = 3;
     */
    slotWait?: Duration | undefined;
    /**
     * The time to prefill this request's own uncached tokens on one rank.
     *
     * @generated from field: google.protobuf.Duration own_prefill = 4;
     */
    ownPrefill?: Duration | undefined;
    /**
     * The prefill tokens ahead, dispatches since the load report included.
     *
     * @generated from field: int64 queue_tokens = 5;
     */
    queueTokens: bigint;
    /**
     * Where queue_tokens came from: "reported pending prefill", "waiting
     * requests × typical_request_tokens" or "in-flight ×
     * typical_request_tokens (load unknown)".
     *
     * @generated from field: string queue_from = 6;
     */
    queueFrom: string;
    /**
     * The engine prefill throughput used, in tokens per second.
     *
     * @generated from field: double prefill_tokens_per_s = 7;
     */
    prefillTokensPerS: number;
    /**
     * True when the engine reported no throughput and
     * default_prefill_tokens_per_s × ranks was assumed.
     *
     * @generated from field: bool prefill_rate_default = 8;
     */
    prefillRateDefault: boolean;
    /**
     * True when the engine would queue the request (waiting requests, or no
     * free batch slot).
     *
     * @generated from field: bool batch_full = 9;
     */
    batchFull: boolean;
};
/**
 * Describes the message sluice.v1.TTFTEstimate.
 * Use `create(TTFTEstimateSchema)` to create a new message.
 */
export declare const TTFTEstimateSchema: GenMessage<TTFTEstimate>;
/**
 * BucketAttempt is one bucket the decider tried.
 *
 * @generated from message sluice.v1.BucketAttempt
 */
export type BucketAttempt = Message<"sluice.v1.BucketAttempt"> & {
    /**
     * The bucket's id.
     *
     * @generated from field: string bucket_id = 1;
     */
    bucketId: string;
    /**
     * The bucket's capacity in tokens; 0 means unbounded.
     *
     * @generated from field: int64 capacity = 2;
     */
    capacity: bigint;
    /**
     * How the attempt ended: "picked", "no_candidates", "admission_rejected",
     * "skipped_capacity", "policy_error", or another value added later.
     *
     * @generated from field: string outcome = 3;
     */
    outcome: string;
    /**
     * The stages run in this bucket: one for a plain bucket, prefill then
     * decode for a disaggregated one.
     *
     * @generated from field: repeated sluice.v1.StageAttempt stages = 4;
     */
    stages: StageAttempt[];
};
/**
 * Describes the message sluice.v1.BucketAttempt.
 * Use `create(BucketAttemptSchema)` to create a new message.
 */
export declare const BucketAttemptSchema: GenMessage<BucketAttempt>;
/**
 * StageAttempt is one engine-selection stage inside a bucket attempt.
 *
 * @generated from message sluice.v1.StageAttempt
 */
export type StageAttempt = Message<"sluice.v1.StageAttempt"> & {
    /**
     * The role the stage picks an engine for.
     *
     * @generated from field: sluice.v1.Role role = 1;
     */
    role: Role;
    /**
     * The name of the policy that ran, for example "cache_aware".
     *
     * @generated from field: string policy = 2;
     */
    policy: string;
    /**
     * The candidates the stage considered, with the load data it saw.
     *
     * @generated from field: repeated sluice.v1.CandidateInfo candidates = 3;
     */
    candidates: CandidateInfo[];
    /**
     * How the stage ended: "picked", "no_candidates", "admission_rejected",
     * "policy_error", or another value added later.
     *
     * @generated from field: string outcome = 4;
     */
    outcome: string;
    /**
     * The engine the stage picked; empty if it picked none.
     *
     * @generated from field: string picked_engine_id = 5;
     */
    pickedEngineId: string;
    /**
     * The policy's reason for the pick, as in EnginePick.reason.
     *
     * @generated from field: string reason = 6;
     */
    reason: string;
    /**
     * Free-form policy detail, for example the prefix match depth.
     *
     * @generated from field: string detail = 7;
     */
    detail: string;
    /**
     * What the prefix lookup found for a cache-aware policy: "hit", "miss",
     * "unavailable" (the index could not answer; treated as a miss) or
     * "no_tokens"; empty for other policies.
     *
     * @generated from field: string prefix_lookup = 8;
     */
    prefixLookup: string;
};
/**
 * Describes the message sluice.v1.StageAttempt.
 * Use `create(StageAttemptSchema)` to create a new message.
 */
export declare const StageAttemptSchema: GenMessage<StageAttempt>;
/**
 * CandidateInfo is one engine a stage considered, with the load data the
 * decision used.
 *
 * @generated from message sluice.v1.CandidateInfo
 */
export type CandidateInfo = Message<"sluice.v1.CandidateInfo"> & {
    /**
     * The engine's id.
     *
     * @generated from field: string engine_id = 1;
     */
    engineId: string;
    /**
     * Whether a load report was available for the engine. When false the load
     * fields below are zero and meaningless.
     *
     * @generated from field: bool load_known = 2;
     */
    loadKnown: boolean;
    /**
     * The age of the load report used.
     *
     * @generated from field: google.protobuf.Duration load_age = 3;
     */
    loadAge?: Duration | undefined;
    /**
     * Requests the engine reported as running.
     *
     * @generated from field: int64 running_requests = 4;
     */
    runningRequests: bigint;
    /**
     * Requests the engine reported as queued.
     *
     * @generated from field: int64 waiting_requests = 5;
     */
    waitingRequests: bigint;
    /**
     * KV-cache tokens the engine reported as in use.
     *
     * @generated from field: int64 kv_used_tokens = 6;
     */
    kvUsedTokens: bigint;
    /**
     * The engine's KV-cache capacity in tokens.
     *
     * @generated from field: int64 kv_capacity_tokens = 7;
     */
    kvCapacityTokens: bigint;
    /**
     * Prompt tokens waiting in the engine's queue that are not in its prefix
     * cache, when the engine reports them.
     *
     * @generated from field: int64 waiting_uncached_tokens = 8;
     */
    waitingUncachedTokens: bigint;
    /**
     * Requests this decider has dispatched to the engine and not yet released.
     *
     * @generated from field: int64 inflight_requests = 9;
     */
    inflightRequests: bigint;
    /**
     * The name of the admission cap that rejected the engine; empty if it was
     * admitted or admission was not evaluated.
     *
     * @generated from field: string rejection = 10;
     */
    rejection: string;
    /**
     * Free-form diagnostic note, for example "excluded by caller" or "stale
     * load".
     *
     * @generated from field: string note = 11;
     */
    note: string;
    /**
     * For a cache-aware holder or a ttft_aware candidate: the prefix tokens it
     * already holds.
     *
     * @generated from field: int64 matched_tokens = 12;
     */
    matchedTokens: bigint;
    /**
     * For a cache-aware holder or a ttft_aware candidate: the input tokens it
     * would still have to prefill.
     *
     * @generated from field: int64 uncached_tokens = 13;
     */
    uncachedTokens: bigint;
    /**
     * For a ttft_aware candidate: its estimated time to first token and the
     * estimate's parts; unset for other policies.
     *
     * @generated from field: sluice.v1.TTFTEstimate ttft = 14;
     */
    ttft?: TTFTEstimate | undefined;
};
/**
 * Describes the message sluice.v1.CandidateInfo.
 * Use `create(CandidateInfoSchema)` to create a new message.
 */
export declare const CandidateInfoSchema: GenMessage<CandidateInfo>;
/**
 * ReleaseRequest closes a lease.
 *
 * @generated from message sluice.v1.ReleaseRequest
 */
export type ReleaseRequest = Message<"sluice.v1.ReleaseRequest"> & {
    /**
     * The lease id from DecideResponse.lease_id. Required.
     *
     * @generated from field: string lease_id = 1;
     */
    leaseId: string;
    /**
     * How the request ended.
     *
     * @generated from field: sluice.v1.ReleaseOutcome outcome = 2;
     */
    outcome: ReleaseOutcome;
    /**
     * The engines that failed the request, when outcome is
     * RELEASE_OUTCOME_ENGINE_FAILURE. Ignored otherwise.
     *
     * @generated from field: repeated string failed_engine_ids = 3;
     */
    failedEngineIds: string[];
};
/**
 * Describes the message sluice.v1.ReleaseRequest.
 * Use `create(ReleaseRequestSchema)` to create a new message.
 */
export declare const ReleaseRequestSchema: GenMessage<ReleaseRequest>;
/**
 * ReleaseResponse reports whether a lease was closed.
 *
 * @generated from message sluice.v1.ReleaseResponse
 */
export type ReleaseResponse = Message<"sluice.v1.ReleaseResponse"> & {
    /**
     * True if this call closed the lease; false when the lease was unknown or
     * had already been released or expired.
     *
     * @generated from field: bool released = 1;
     */
    released: boolean;
};
/**
 * Describes the message sluice.v1.ReleaseResponse.
 * Use `create(ReleaseResponseSchema)` to create a new message.
 */
export declare const ReleaseResponseSchema: GenMessage<ReleaseResponse>;
/**
 * Role is the part an engine plays in serving a request.
 *
 * @generated from enum sluice.v1.Role
 */
export declare enum Role {
    /**
     * The role is not set. It never appears in a decision.
     *
     * @generated from enum value: ROLE_UNSPECIFIED = 0;
     */
    UNSPECIFIED = 0,
    /**
     * The engine serves the whole request (prefill and decode) by itself.
     *
     * @generated from enum value: ROLE_PLAIN = 1;
     */
    PLAIN = 1,
    /**
     * The engine runs the prefill half of a disaggregated prefill/decode pair.
     *
     * @generated from enum value: ROLE_PREFILL = 2;
     */
    PREFILL = 2,
    /**
     * The engine runs the decode half of a disaggregated prefill/decode pair.
     *
     * @generated from enum value: ROLE_DECODE = 3;
     */
    DECODE = 3
}
/**
 * Describes the enum sluice.v1.Role.
 */
export declare const RoleSchema: GenEnum<Role>;
/**
 * ReleaseOutcome is how a request ended, as seen by the caller.
 *
 * @generated from enum sluice.v1.ReleaseOutcome
 */
export declare enum ReleaseOutcome {
    /**
     * The caller did not say. Treated like SUCCESS for accounting.
     *
     * @generated from enum value: RELEASE_OUTCOME_UNSPECIFIED = 0;
     */
    UNSPECIFIED = 0,
    /**
     * The engine(s) served the request.
     *
     * @generated from enum value: RELEASE_OUTCOME_SUCCESS = 1;
     */
    SUCCESS = 1,
    /**
     * An engine failed the request; failed_engine_ids names which.
     *
     * @generated from enum value: RELEASE_OUTCOME_ENGINE_FAILURE = 2;
     */
    ENGINE_FAILURE = 2,
    /**
     * The client cancelled the request before it finished.
     *
     * @generated from enum value: RELEASE_OUTCOME_CANCELLED = 3;
     */
    CANCELLED = 3
}
/**
 * Describes the enum sluice.v1.ReleaseOutcome.
 */
export declare const ReleaseOutcomeSchema: GenEnum<ReleaseOutcome>;
/**
 * DeciderService picks the inference engine (or the prefill + decode pair of
 * engines) that serves one LLM request, and accounts for the request while it
 * is in flight.
 *
 * A caller calls Decide before forwarding a request, forwards it to the picked
 * engine(s), then calls Release with the lease id from the response. A lease
 * that is never released expires after a TTL so that a caller that dies does
 * not leak in-flight accounting.
 *
 * Errors: a request that fits no bucket, whose expected peak is below its
 * input, or whose token counts overflow returns INVALID_ARGUMENT (HTTP 400)
 * with a google.rpc.ErrorInfo reason. When every bucket is exhausted the call
 * returns UNAVAILABLE (HTTP 503) with a google.rpc.ErrorInfo and an
 * AdmissionRejections detail listing every admission cap that rejected an
 * engine. Invalid policy output or configuration returns INTERNAL (HTTP 500).
 *
 * @generated from service sluice.v1.DeciderService
 */
export declare const DeciderService: GenService<{
    /**
     * Decide picks the engine(s) for one request and, unless dry_run is set,
     * opens a lease that counts the request as in flight on the picked engines.
     *
     * @generated from rpc sluice.v1.DeciderService.Decide
     */
    decide: {
        methodKind: "unary";
        input: typeof DecideRequestSchema;
        output: typeof DecideResponseSchema;
    };
    /**
     * Release closes a lease opened by Decide. It is idempotent: releasing an
     * unknown or already expired lease succeeds with released = false.
     *
     * @generated from rpc sluice.v1.DeciderService.Release
     */
    release: {
        methodKind: "unary";
        input: typeof ReleaseRequestSchema;
        output: typeof ReleaseResponseSchema;
    };
}>;
