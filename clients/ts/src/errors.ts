// Decider errors as typed exceptions: the status code, the ErrorInfo reason and the
// google.rpc details (AdmissionRejections, BadRequest, RetryInfo, Explain) as plain objects.

import { Code, ConnectError } from "@connectrpc/connect";
import { BadRequestSchema, ErrorInfoSchema, RetryInfoSchema } from "./gen/google/rpc/error_details_pb.js";
import { type Explain, ExplainSchema, Role } from "./gen/sluice/v1/decider_pb.js";
import { AdmissionRejectionsSchema } from "./gen/sluice/v1/errors_pb.js";

/** The google.rpc.ErrorInfo domain of every error the decider returns. */
export const DOMAIN = "sluice.dev";

/**
 * The ErrorInfo reasons the decider returns (docs/decisions.md "Errors", docs/rpc.md). A
 * decider may add reasons, so keep a default branch.
 */
export const Reason = {
  // Decide request checks: InvalidArgument.
  EMPTY_MODEL: "EMPTY_MODEL",
  UNKNOWN_MODEL: "UNKNOWN_MODEL",
  ADAPTER_CONFLICT: "ADAPTER_CONFLICT",
  INVALID_INPUT_TOKENS: "INVALID_INPUT_TOKENS",
  PEAK_BELOW_INPUT: "PEAK_BELOW_INPUT",
  TOO_MANY_TOKEN_IDS: "TOO_MANY_TOKEN_IDS",
  TOKEN_IDS_MISMATCH: "TOKEN_IDS_MISMATCH",
  NO_MATCHING_BUCKET: "NO_MATCHING_BUCKET",
  // No engine could take the request now: Unavailable, safe to retry.
  ADMISSION_REJECTED: "ADMISSION_REJECTED",
  NO_CANDIDATES: "NO_CANDIDATES",
  NO_PREFILL_CANDIDATES: "NO_PREFILL_CANDIDATES",
  NO_DECODE_CANDIDATES: "NO_DECODE_CANDIDATES",
  NO_HEALTHY_ENGINES: "NO_HEALTHY_ENGINES",
  // Configuration or policy faults: Internal.
  INVALID_CONFIGURATION: "INVALID_CONFIGURATION",
  INVALID_SIGNAL: "INVALID_SIGNAL",
  OUTSIDE_CANDIDATES: "OUTSIDE_CANDIDATES",
  // The decider's own limits: ResourceExhausted.
  DECIDER_OVERLOADED: "DECIDER_OVERLOADED",
  REQUEST_TOO_LARGE: "REQUEST_TOO_LARGE",
  // Authentication and permissions: Unauthenticated, PermissionDenied.
  TOKEN_MISSING: "TOKEN_MISSING",
  TOKEN_INVALID: "TOKEN_INVALID",
  ROLE_NOT_ALLOWED: "ROLE_NOT_ALLOWED",
  ADMIN_WRITES_DISABLED: "ADMIN_WRITES_DISABLED",
  // Release.
  EMPTY_LEASE_ID: "EMPTY_LEASE_ID",
  INVALID_OUTCOME: "INVALID_OUTCOME",
  // Admin API.
  CONFIG_INVALID: "CONFIG_INVALID",
  CONFIG_VERSION_CONFLICT: "CONFIG_VERSION_CONFLICT",
  CONFIG_VERSION_NOT_FOUND: "CONFIG_VERSION_NOT_FOUND",
  CONFIG_READ_ONLY: "CONFIG_READ_ONLY",
  CONFIG_STORE_UNAVAILABLE: "CONFIG_STORE_UNAVAILABLE",
  BUCKET_NOT_FOUND: "BUCKET_NOT_FOUND",
  BUCKET_EXISTS: "BUCKET_EXISTS",
  BUCKET_MISSING: "BUCKET_MISSING",
  BUCKET_ID_MISMATCH: "BUCKET_ID_MISMATCH",
  ENGINE_NOT_FOUND: "ENGINE_NOT_FOUND",
  ENGINE_EXISTS: "ENGINE_EXISTS",
  ENGINE_MISSING: "ENGINE_MISSING",
  ENGINE_ID_MISMATCH: "ENGINE_ID_MISMATCH",
  // Model-sharded deciders: FailedPrecondition.
  WRONG_SHARD: "WRONG_SHARD",
} as const;

/** A reason the decider documents, or any other string a newer decider sends. */
export type ReasonName = (typeof Reason)[keyof typeof Reason] | (string & {});

/** The short name of a role: the stage of a decision an engine plays. */
export type RoleName = "unspecified" | "plain" | "prefill" | "decode";

/** roleName maps a sluice.v1.Role to its short name. */
export function roleName(role: Role): RoleName {
  switch (role) {
    case Role.PLAIN:
      return "plain";
    case Role.PREFILL:
      return "prefill";
    case Role.DECODE:
      return "decode";
    default:
      return "unspecified";
  }
}

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

const codeNames: Record<Code, string> = {
  [Code.Canceled]: "CANCELLED",
  [Code.Unknown]: "UNKNOWN",
  [Code.InvalidArgument]: "INVALID_ARGUMENT",
  [Code.DeadlineExceeded]: "DEADLINE_EXCEEDED",
  [Code.NotFound]: "NOT_FOUND",
  [Code.AlreadyExists]: "ALREADY_EXISTS",
  [Code.PermissionDenied]: "PERMISSION_DENIED",
  [Code.ResourceExhausted]: "RESOURCE_EXHAUSTED",
  [Code.FailedPrecondition]: "FAILED_PRECONDITION",
  [Code.Aborted]: "ABORTED",
  [Code.OutOfRange]: "OUT_OF_RANGE",
  [Code.Unimplemented]: "UNIMPLEMENTED",
  [Code.Internal]: "INTERNAL",
  [Code.Unavailable]: "UNAVAILABLE",
  [Code.DataLoss]: "DATA_LOSS",
  [Code.Unauthenticated]: "UNAUTHENTICATED",
};

/**
 * A call the decider (or the transport to it) refused. `code` is the status code
 * (Connect's Code, numbered as gRPC's); `reason` the ErrorInfo reason ("" when the status
 * carries none, as for a transport failure). Absent details are empty or undefined. The
 * ConnectError it was made from is `cause`.
 */
export class DeciderError extends Error {
  override name = "DeciderError";
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
  override readonly cause: ConnectError;

  constructor(cause: ConnectError) {
    const info = cause.findDetails(ErrorInfoSchema)[0];
    const reason = info?.reason ?? "";
    const codeName = codeNames[cause.code] ?? `CODE_${cause.code}`;
    super(reason ? `${codeName} ${reason}: ${cause.rawMessage}` : `${codeName}: ${cause.rawMessage}`);
    this.cause = cause;
    this.code = cause.code;
    this.codeName = codeName;
    this.rawMessage = cause.rawMessage;
    this.reason = reason;
    this.domain = info?.domain ?? "";
    this.metadata = { ...(info?.metadata ?? {}) };
    this.rejections = cause.findDetails(AdmissionRejectionsSchema).flatMap((d) =>
      d.rejections.map((r) => ({ bucketId: r.bucketId, role: roleName(r.role), engineId: r.engineId, limit: r.limit })),
    );
    this.fieldViolations = cause
      .findDetails(BadRequestSchema)
      .flatMap((d) => d.fieldViolations.map((v) => ({ field: v.field, description: v.description })));
    const delay = cause.findDetails(RetryInfoSchema)[0]?.retryDelay;
    this.retryAfterMs = delay ? Number(delay.seconds) * 1000 + Math.round(delay.nanos / 1e6) : undefined;
    this.explain = cause.findDetails(ExplainSchema)[0];
  }

  /** The version the decider serves, on CONFIG_VERSION_CONFLICT: re-read and retry. */
  get currentVersion(): bigint | undefined {
    const v = this.metadata["current_version"];
    return v !== undefined && /^-?\d+$/.test(v) ? BigInt(v) : undefined;
  }

  /** The stage ("plain", "prefill", "decode") of a stage-specific unavailability. */
  get stage(): string | undefined {
    return this.metadata["stage"];
  }
}

/** The request cannot be served as sent (HTTP 400); retrying it does not help. */
export class InvalidArgumentError extends DeciderError {
  override name = "InvalidArgumentError";
}
/** A configuration write was refused: `fieldViolations` lists every problem. */
export class ConfigInvalidError extends InvalidArgumentError {
  override name = "ConfigInvalidError";
}
/** A bucket, engine or version that does not exist (HTTP 404). */
export class NotFoundError extends DeciderError {
  override name = "NotFoundError";
}
/** A bucket or engine id that is taken (HTTP 409). */
export class AlreadyExistsError extends DeciderError {
  override name = "AlreadyExistsError";
}
/** A write based on a stale version, a read-only configuration, or a model of another shard. */
export class FailedPreconditionError extends DeciderError {
  override name = "FailedPreconditionError";
}
/**
 * This decider does not serve the model: another shard, or the unsharded deciders, does
 * (reason WRONG_SHARD; docs/decisions.md, "Model-sharded deciders"). ShardedDecider follows
 * it by itself when `deciders` is not empty.
 */
export class WrongShardError extends FailedPreconditionError {
  override name = "WrongShardError";

  /** The refused model. */
  get model(): string {
    return this.metadata["model"] ?? "";
  }

  /** The shard that owns the model; "" for the unsharded deciders. */
  get shard(): string {
    return this.metadata["shard"] ?? "";
  }

  /** The shard the refusing decider serves; "" when it is unsharded. */
  get replicaShard(): string {
    return this.metadata["replica_shard"] ?? "";
  }

  /** The owning shard's deciders (host:port of their gRPC ports) as configured; [] when none are listed. */
  get deciders(): string[] {
    return (this.metadata["deciders"] ?? "")
      .split(",")
      .map((a) => a.trim())
      .filter((a) => a !== "");
  }
}
/** A write based on a stale version: `currentVersion` is the one to re-read. */
export class VersionConflictError extends FailedPreconditionError {
  override name = "VersionConflictError";
}
/** No bearer token, or an unknown one (TOKEN_MISSING, TOKEN_INVALID; HTTP 401). */
export class UnauthenticatedError extends DeciderError {
  override name = "UnauthenticatedError";
}
/** The token's role may not make this call (ROLE_NOT_ALLOWED, ADMIN_WRITES_DISABLED; 403). */
export class PermissionDeniedError extends DeciderError {
  override name = "PermissionDeniedError";
}
/** The decider's own limits: too many calls in progress, or a body too large. */
export class ResourceExhaustedError extends DeciderError {
  override name = "ResourceExhaustedError";
}
/** The replica shed the call (DECIDER_OVERLOADED); `retryAfterMs` says when to retry. */
export class OverloadedError extends ResourceExhaustedError {
  override name = "OverloadedError";
}
/**
 * No engine could take the request now, or the decider cannot be reached (HTTP 503). A
 * Decide that failed so opened no lease: retrying it is safe.
 */
export class UnavailableError extends DeciderError {
  override name = "UnavailableError";
}
/** Every fitting bucket refused admission: `rejections` lists each cap hit where. */
export class AdmissionRejectedError extends UnavailableError {
  override name = "AdmissionRejectedError";
}
/** The call took longer than its timeout. */
export class DeadlineExceededError extends DeciderError {
  override name = "DeadlineExceededError";
}
/** A policy or configuration fault in the decider (HTTP 500). */
export class InternalError extends DeciderError {
  override name = "InternalError";
}

type ErrorClass = new (cause: ConnectError) => DeciderError;

const byCode: Partial<Record<Code, ErrorClass>> = {
  [Code.InvalidArgument]: InvalidArgumentError,
  [Code.NotFound]: NotFoundError,
  [Code.AlreadyExists]: AlreadyExistsError,
  [Code.FailedPrecondition]: FailedPreconditionError,
  [Code.Unauthenticated]: UnauthenticatedError,
  [Code.PermissionDenied]: PermissionDeniedError,
  [Code.ResourceExhausted]: ResourceExhaustedError,
  [Code.Unavailable]: UnavailableError,
  [Code.DeadlineExceeded]: DeadlineExceededError,
  [Code.Internal]: InternalError,
};

const byReason: Record<string, ErrorClass> = {
  [`${Code.InvalidArgument}/${Reason.CONFIG_INVALID}`]: ConfigInvalidError,
  [`${Code.FailedPrecondition}/${Reason.CONFIG_VERSION_CONFLICT}`]: VersionConflictError,
  [`${Code.FailedPrecondition}/${Reason.WRONG_SHARD}`]: WrongShardError,
  [`${Code.ResourceExhausted}/${Reason.DECIDER_OVERLOADED}`]: OverloadedError,
  [`${Code.Unavailable}/${Reason.ADMISSION_REJECTED}`]: AdmissionRejectedError,
};

function isNetworkFailure(cause: unknown): boolean {
  return cause instanceof TypeError && /fetch|network|load failed/i.test(cause.message);
}

/**
 * toDeciderError turns anything a call threw into the matching DeciderError subclass. A
 * DeciderError passes through; anything else goes through ConnectError.from first.
 */
export function toDeciderError(err: unknown): DeciderError {
  if (err instanceof DeciderError) {
    return err;
  }
  let ce = ConnectError.from(err);
  if (ce.code === Code.Unknown && !ce.isWireError && isNetworkFailure(ce.cause)) {
    // fetch reports a refused or reset connection as a TypeError ("fetch failed", "Failed to
    // fetch", "NetworkError ...", "Load failed"), which Connect maps to Unknown; connect-node
    // and grpc call it Unavailable, and so does this client: no call reached the decider.
    ce = new ConnectError(ce.rawMessage, Code.Unavailable, ce.metadata, undefined, ce.cause);
  }
  const reason = ce.findDetails(ErrorInfoSchema)[0]?.reason ?? "";
  const cls = byReason[`${ce.code}/${reason}`] ?? byCode[ce.code] ?? DeciderError;
  return new cls(ce);
}
