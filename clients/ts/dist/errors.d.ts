import { Code, ConnectError } from "@connectrpc/connect";
import { type Explain, Role } from "./gen/sluice/v1/decider_pb.js";
/** The google.rpc.ErrorInfo domain of every error the decider returns. */
export declare const DOMAIN = "sluice.dev";
/**
 * The ErrorInfo reasons the decider returns (docs/decisions.md "Errors", docs/rpc.md). A
 * decider may add reasons, so keep a default branch.
 */
export declare const Reason: {
    readonly EMPTY_MODEL: "EMPTY_MODEL";
    readonly UNKNOWN_MODEL: "UNKNOWN_MODEL";
    readonly ADAPTER_CONFLICT: "ADAPTER_CONFLICT";
    readonly INVALID_INPUT_TOKENS: "INVALID_INPUT_TOKENS";
    readonly PEAK_BELOW_INPUT: "PEAK_BELOW_INPUT";
    readonly TOO_MANY_TOKEN_IDS: "TOO_MANY_TOKEN_IDS";
    readonly TOKEN_IDS_MISMATCH: "TOKEN_IDS_MISMATCH";
    readonly NO_MATCHING_BUCKET: "NO_MATCHING_BUCKET";
    readonly ADMISSION_REJECTED: "ADMISSION_REJECTED";
    readonly NO_CANDIDATES: "NO_CANDIDATES";
    readonly NO_PREFILL_CANDIDATES: "NO_PREFILL_CANDIDATES";
    readonly NO_DECODE_CANDIDATES: "NO_DECODE_CANDIDATES";
    readonly NO_HEALTHY_ENGINES: "NO_HEALTHY_ENGINES";
    readonly INVALID_CONFIGURATION: "INVALID_CONFIGURATION";
    readonly INVALID_SIGNAL: "INVALID_SIGNAL";
    readonly OUTSIDE_CANDIDATES: "OUTSIDE_CANDIDATES";
    readonly DECIDER_OVERLOADED: "DECIDER_OVERLOADED";
    readonly REQUEST_TOO_LARGE: "REQUEST_TOO_LARGE";
    readonly TOKEN_MISSING: "TOKEN_MISSING";
    readonly TOKEN_INVALID: "TOKEN_INVALID";
    readonly ROLE_NOT_ALLOWED: "ROLE_NOT_ALLOWED";
    readonly ADMIN_WRITES_DISABLED: "ADMIN_WRITES_DISABLED";
    readonly EMPTY_LEASE_ID: "EMPTY_LEASE_ID";
    readonly INVALID_OUTCOME: "INVALID_OUTCOME";
    readonly CONFIG_INVALID: "CONFIG_INVALID";
    readonly CONFIG_VERSION_CONFLICT: "CONFIG_VERSION_CONFLICT";
    readonly CONFIG_VERSION_NOT_FOUND: "CONFIG_VERSION_NOT_FOUND";
    readonly CONFIG_READ_ONLY: "CONFIG_READ_ONLY";
    readonly CONFIG_STORE_UNAVAILABLE: "CONFIG_STORE_UNAVAILABLE";
    readonly BUCKET_NOT_FOUND: "BUCKET_NOT_FOUND";
    readonly BUCKET_EXISTS: "BUCKET_EXISTS";
    readonly BUCKET_MISSING: "BUCKET_MISSING";
    readonly BUCKET_ID_MISMATCH: "BUCKET_ID_MISMATCH";
    readonly ENGINE_NOT_FOUND: "ENGINE_NOT_FOUND";
    readonly ENGINE_EXISTS: "ENGINE_EXISTS";
    readonly ENGINE_MISSING: "ENGINE_MISSING";
    readonly ENGINE_ID_MISMATCH: "ENGINE_ID_MISMATCH";
    readonly WRONG_SHARD: "WRONG_SHARD";
};
/** A reason the decider documents, or any other string a newer decider sends. */
export type ReasonName = (typeof Reason)[keyof typeof Reason] | (string & {});
/** The short name of a role: the stage of a decision an engine plays. */
export type RoleName = "unspecified" | "plain" | "prefill" | "decode";
/** roleName maps a sluice.v1.Role to its short name. */
export declare function roleName(role: Role): RoleName;
/** One engine an admission cap turned away (sluice.v1.AdmissionRejection). */
export interface Rejection {
    readonly bucketId: string;
    /** The stage that evaluated the engine. */
    readonly role: RoleName;
    readonly engineId: string;
    /** The admission cap, for example "max_running_requests". */
    readonly limit: string;
}
/** One problem of an invalid request or configuration (google.rpc.BadRequest). */
export interface FieldViolation {
    /** The field path, for example "buckets[0].limits.max". */
    readonly field: string;
    readonly description: string;
}
/**
 * A call the decider (or the transport to it) refused. `code` is the status code
 * (Connect's Code, numbered as gRPC's); `reason` the ErrorInfo reason ("" when the status
 * carries none, as for a transport failure). Absent details are empty or undefined. The
 * ConnectError it was made from is `cause`.
 */
export declare class DeciderError extends Error {
    name: string;
    /** The status code. */
    readonly code: Code;
    /** The code's gRPC name, for example "UNAVAILABLE". */
    readonly codeName: string;
    /** The decider's message, without the code prefix. */
    readonly rawMessage: string;
    readonly reason: ReasonName;
    readonly domain: string;
    /** ErrorInfo metadata, for example {stage: "decode"} or {current_version: "7"}. */
    readonly metadata: Readonly<Record<string, string>>;
    /** The admission rejections of an ADMISSION_REJECTED error, in evaluation order. */
    readonly rejections: readonly Rejection[];
    /** The problems of an invalid configuration (CONFIG_INVALID). */
    readonly fieldViolations: readonly FieldViolation[];
    /** The server's retry hint in milliseconds (google.rpc.RetryInfo), if any. */
    readonly retryAfterMs: number | undefined;
    /** With explain, how the failed decision was reached (sluice.v1.Explain). */
    readonly explain: Explain | undefined;
    readonly cause: ConnectError;
    constructor(cause: ConnectError);
    /** The version the decider serves, on CONFIG_VERSION_CONFLICT: re-read and retry. */
    get currentVersion(): bigint | undefined;
    /** The stage ("plain", "prefill", "decode") of a stage-specific unavailability. */
    get stage(): string | undefined;
}
/** The request cannot be served as sent (HTTP 400); retrying it does not help. */
export declare class InvalidArgumentError extends DeciderError {
    name: string;
}
/** A configuration write was refused: `fieldViolations` lists every problem. */
export declare class ConfigInvalidError extends InvalidArgumentError {
    name: string;
}
/** A bucket, engine or version that does not exist (HTTP 404). */
export declare class NotFoundError extends DeciderError {
    name: string;
}
/** A bucket or engine id that is taken (HTTP 409). */
export declare class AlreadyExistsError extends DeciderError {
    name: string;
}
/** A write based on a stale version, a read-only configuration, or a model of another shard. */
export declare class FailedPreconditionError extends DeciderError {
    name: string;
}
/**
 * This decider does not serve the model: another shard, or the unsharded deciders, does
 * (reason WRONG_SHARD; docs/decisions.md, "Model-sharded deciders"). ShardedDecider follows
 * it by itself when `deciders` is not empty.
 */
export declare class WrongShardError extends FailedPreconditionError {
    name: string;
    /** The refused model. */
    get model(): string;
    /** The shard that owns the model; "" for the unsharded deciders. */
    get shard(): string;
    /** The shard the refusing decider serves; "" when it is unsharded. */
    get replicaShard(): string;
    /** The owning shard's deciders (host:port of their gRPC ports) as configured; [] when none are listed. */
    get deciders(): string[];
}
/** A write based on a stale version: `currentVersion` is the one to re-read. */
export declare class VersionConflictError extends FailedPreconditionError {
    name: string;
}
/** No bearer token, or an unknown one (TOKEN_MISSING, TOKEN_INVALID; HTTP 401). */
export declare class UnauthenticatedError extends DeciderError {
    name: string;
}
/** The token's role may not make this call (ROLE_NOT_ALLOWED, ADMIN_WRITES_DISABLED; 403). */
export declare class PermissionDeniedError extends DeciderError {
    name: string;
}
/** The decider's own limits: too many calls in progress, or a body too large. */
export declare class ResourceExhaustedError extends DeciderError {
    name: string;
}
/** The replica shed the call (DECIDER_OVERLOADED); `retryAfterMs` says when to retry. */
export declare class OverloadedError extends ResourceExhaustedError {
    name: string;
}
/**
 * No engine could take the request now, or the decider cannot be reached (HTTP 503). A
 * Decide that failed so opened no lease: retrying it is safe.
 */
export declare class UnavailableError extends DeciderError {
    name: string;
}
/** Every fitting bucket refused admission: `rejections` lists each cap hit where. */
export declare class AdmissionRejectedError extends UnavailableError {
    name: string;
}
/** The call took longer than its timeout. */
export declare class DeadlineExceededError extends DeciderError {
    name: string;
}
/** A policy or configuration fault in the decider (HTTP 500). */
export declare class InternalError extends DeciderError {
    name: string;
}
/**
 * toDeciderError turns anything a call threw into the matching DeciderError subclass. A
 * DeciderError passes through; anything else goes through ConnectError.from first.
 */
export declare function toDeciderError(err: unknown): DeciderError;
