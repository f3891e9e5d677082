import type { GenEnum, GenFile, GenMessage } from "@bufbuild/protobuf/codegenv2";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import type { Message } from "@bufbuild/protobuf";
/**
 * Describes the file sluice/v1/records.proto.
 */
export declare const file_sluice_v1_records: GenFile;
/**
 * LoadReport is the value of a record on the engine-load topic
 * (sluice.engine-load.v1, keyed by engine id). One report describes one data
 * parallel rank of one engine at one instant.
 *
 * Ordering: within one (engine_id, dp_rank, epoch), seq increases by one per
 * report. A new epoch means the engine restarted and its previous state is
 * dropped; a seq gap marks the engine uncertain until the next full report.
 *
 * @generated from message sluice.v1.LoadReport
 */
export type LoadReport = Message<"sluice.v1.LoadReport"> & {
    /**
     * The engine's stable id; equal to the record key.
     *
     * @generated from field: string engine_id = 1;
     */
    engineId: string;
    /**
     * The data-parallel rank this report describes, from 0.
     *
     * @generated from field: int32 dp_rank = 2;
     */
    dpRank: number;
    /**
     * The engine's data-parallel size; 0 or 1 when it is not data parallel.
     *
     * @generated from field: int32 dp_size = 3;
     */
    dpSize: number;
    /**
     * The engine incarnation. It changes, never repeating, every time the
     * engine restarts.
     *
     * @generated from field: uint64 epoch = 4;
     */
    epoch: bigint;
    /**
     * The per-(engine, rank, epoch) sequence number, starting at 1.
     *
     * @generated from field: uint64 seq = 5;
     */
    seq: bigint;
    /**
     * When the engine captured the numbers below.
     *
     * @generated from field: google.protobuf.Timestamp captured_at = 6;
     */
    capturedAt?: Timestamp | undefined;
    /**
     * Requests running on the rank.
     *
     * @generated from field: int64 running_requests = 7;
     */
    runningRequests: bigint;
    /**
     * Requests queued on the rank.
     *
     * @generated from field: int64 waiting_requests = 8;
     */
    waitingRequests: bigint;
    /**
     * KV-cache tokens in use on the rank.
     *
     * @generated from field: int64 kv_used_tokens = 9;
     */
    kvUsedTokens: bigint;
    /**
     * The rank's KV-cache capacity in tokens.
     *
     * @generated from field: int64 kv_capacity_tokens = 10;
     */
    kvCapacityTokens: bigint;
    /**
     * Engine-specific numbers, when the engine exposes them.
     *
     * @generated from field: sluice.v1.NativeLoad native = 11;
     */
    native?: NativeLoad | undefined;
};
/**
 * Describes the message sluice.v1.LoadReport.
 * Use `create(LoadReportSchema)` to create a new message.
 */
export declare const LoadReportSchema: GenMessage<LoadReport>;
/**
 * NativeLoad holds load numbers that only some engines report. Zero means
 * not reported.
 *
 * @generated from message sluice.v1.NativeLoad
 */
export type NativeLoad = Message<"sluice.v1.NativeLoad"> & {
    /**
     * Prompt tokens waiting in the queue that are not in the prefix cache.
     *
     * @generated from field: int64 waiting_uncached_tokens = 1;
     */
    waitingUncachedTokens: bigint;
    /**
     * Total tokens (prompt and generated) held by running requests.
     *
     * @generated from field: int64 total_tokens = 2;
     */
    totalTokens: bigint;
    /**
     * The engine's configured limit on concurrently running requests.
     *
     * @generated from field: int64 max_running_requests = 3;
     */
    maxRunningRequests: bigint;
    /**
     * Monotonic counter of uncached prompt tokens prefilled since start.
     *
     * @generated from field: int64 prefill_uncached_tokens_total = 4;
     */
    prefillUncachedTokensTotal: bigint;
    /**
     * Monotonic counter of microseconds spent prefilling since start.
     *
     * @generated from field: int64 prefill_busy_micros_total = 5;
     */
    prefillBusyMicrosTotal: bigint;
};
/**
 * Describes the message sluice.v1.NativeLoad.
 * Use `create(NativeLoadSchema)` to create a new message.
 */
export declare const NativeLoadSchema: GenMessage<NativeLoad>;
/**
 * KvEventBatch is the protobuf value of a record on the KV-event topic
 * (sluice.kv-events.v1, keyed by engine id): the prefix-cache changes of one
 * rank of one engine, in order. The same topic also carries engines' native
 * msgpack batches, told apart by a record header.
 *
 * Ordering and restarts follow the same epoch/seq rules as LoadReport.
 *
 * @generated from message sluice.v1.KvEventBatch
 */
export type KvEventBatch = Message<"sluice.v1.KvEventBatch"> & {
    /**
     * The engine's stable id; equal to the record key.
     *
     * @generated from field: string engine_id = 1;
     */
    engineId: string;
    /**
     * The data-parallel rank the events happened on.
     *
     * @generated from field: int32 dp_rank = 2;
     */
    dpRank: number;
    /**
     * The engine incarnation; see LoadReport.epoch.
     *
     * @generated from field: uint64 epoch = 3;
     */
    epoch: bigint;
    /**
     * The per-(engine, rank, epoch) batch sequence number, starting at 1.
     *
     * @generated from field: uint64 seq = 4;
     */
    seq: bigint;
    /**
     * When the engine emitted the batch.
     *
     * @generated from field: google.protobuf.Timestamp time = 5;
     */
    time?: Timestamp | undefined;
    /**
     * The model the cached blocks belong to.
     *
     * @generated from field: string model = 6;
     */
    model: string;
    /**
     * The LoRA adapter the blocks belong to; empty for the base model. A
     * BlockStored's own lora_name takes precedence when set.
     *
     * @generated from field: string lora_name = 7;
     */
    loraName: string;
    /**
     * The cache salt that isolates the blocks from other tenants; empty for
     * none.
     *
     * @generated from field: string cache_salt = 8;
     */
    cacheSalt: string;
    /**
     * The events, in the order they happened.
     *
     * @generated from field: repeated sluice.v1.KvEvent events = 9;
     */
    events: KvEvent[];
};
/**
 * Describes the message sluice.v1.KvEventBatch.
 * Use `create(KvEventBatchSchema)` to create a new message.
 */
export declare const KvEventBatchSchema: GenMessage<KvEventBatch>;
/**
 * KvEvent is one prefix-cache change.
 *
 * @generated from message sluice.v1.KvEvent
 */
export type KvEvent = Message<"sluice.v1.KvEvent"> & {
    /**
     * The change; exactly one is set.
     *
     * @generated from oneof sluice.v1.KvEvent.event
     */
    event: {
        /**
         * Blocks were added to the cache.
         *
         * @generated from field: sluice.v1.BlockStored block_stored = 1;
         */
        value: BlockStored;
        case: "blockStored";
    } | {
        /**
         * Blocks were evicted from the cache.
         *
         * @generated from field: sluice.v1.BlockRemoved block_removed = 2;
         */
        value: BlockRemoved;
        case: "blockRemoved";
    } | {
        /**
         * The whole cache was cleared.
         *
         * @generated from field: sluice.v1.AllBlocksCleared all_blocks_cleared = 3;
         */
        value: AllBlocksCleared;
        case: "allBlocksCleared";
    } | {
        case: undefined;
        value?: undefined;
    };
};
/**
 * Describes the message sluice.v1.KvEvent.
 * Use `create(KvEventSchema)` to create a new message.
 */
export declare const KvEventSchema: GenMessage<KvEvent>;
/**
 * BlockStored reports a chain of blocks added to the cache.
 *
 * @generated from message sluice.v1.BlockStored
 */
export type BlockStored = Message<"sluice.v1.BlockStored"> & {
    /**
     * The hashes of the stored blocks, parent first.
     *
     * @generated from field: repeated uint64 block_hashes = 1;
     */
    blockHashes: bigint[];
    /**
     * The hash of the block that precedes the first stored block; unset when
     * the chain starts at the beginning of a sequence.
     *
     * @generated from field: optional uint64 parent_block_hash = 2;
     */
    parentBlockHash?: bigint | undefined;
    /**
     * The token ids of all stored blocks, concatenated; block_size tokens per
     * block.
     *
     * @generated from field: repeated uint32 token_ids = 3;
     */
    tokenIds: number[];
    /**
     * The number of tokens per block.
     *
     * @generated from field: uint32 block_size = 4;
     */
    blockSize: number;
    /**
     * The LoRA adapter the blocks belong to; empty means the batch's lora_name.
     *
     * @generated from field: string lora_name = 5;
     */
    loraName: string;
    /**
     * Where the blocks are stored.
     *
     * @generated from field: sluice.v1.Medium medium = 6;
     */
    medium: Medium;
    /**
     * Extra keys mixed into the block hashes (for example multimodal content
     * hashes), as the engine reported them.
     *
     * @generated from field: repeated string extra_keys = 7;
     */
    extraKeys: string[];
};
/**
 * Describes the message sluice.v1.BlockStored.
 * Use `create(BlockStoredSchema)` to create a new message.
 */
export declare const BlockStoredSchema: GenMessage<BlockStored>;
/**
 * BlockRemoved reports blocks evicted from the cache.
 *
 * @generated from message sluice.v1.BlockRemoved
 */
export type BlockRemoved = Message<"sluice.v1.BlockRemoved"> & {
    /**
     * The hashes of the removed blocks.
     *
     * @generated from field: repeated uint64 block_hashes = 1;
     */
    blockHashes: bigint[];
    /**
     * The storage tier the blocks were removed from.
     *
     * @generated from field: sluice.v1.Medium medium = 2;
     */
    medium: Medium;
};
/**
 * Describes the message sluice.v1.BlockRemoved.
 * Use `create(BlockRemovedSchema)` to create a new message.
 */
export declare const BlockRemovedSchema: GenMessage<BlockRemoved>;
/**
 * AllBlocksCleared reports that the engine dropped every cached block.
 *
 * @generated from message sluice.v1.AllBlocksCleared
 */
export type AllBlocksCleared = Message<"sluice.v1.AllBlocksCleared"> & {};
/**
 * Describes the message sluice.v1.AllBlocksCleared.
 * Use `create(AllBlocksClearedSchema)` to create a new message.
 */
export declare const AllBlocksClearedSchema: GenMessage<AllBlocksCleared>;
/**
 * Medium is the storage tier holding cached KV blocks.
 *
 * @generated from enum sluice.v1.Medium
 */
export declare enum Medium {
    /**
     * The engine did not say; treated as GPU.
     *
     * @generated from enum value: MEDIUM_UNSPECIFIED = 0;
     */
    UNSPECIFIED = 0,
    /**
     * Accelerator memory.
     *
     * @generated from enum value: MEDIUM_GPU = 1;
     */
    GPU = 1,
    /**
     * Host memory.
     *
     * @generated from enum value: MEDIUM_CPU = 2;
     */
    CPU = 2,
    /**
     * Local disk.
     *
     * @generated from enum value: MEDIUM_DISK = 3;
     */
    DISK = 3,
    /**
     * An external store shared between engines.
     *
     * @generated from enum value: MEDIUM_EXTERNAL = 4;
     */
    EXTERNAL = 4
}
/**
 * Describes the enum sluice.v1.Medium.
 */
export declare const MediumSchema: GenEnum<Medium>;
