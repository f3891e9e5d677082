// @sluice/client: a typed client for sluice's decider on Connect-ES.
//
//   import { Decider, DeciderError } from "@sluice/client";
//   const decider = new Decider("http://localhost:7080", { token: "router-token" });
//   const resp = await decider.decide({ model: "llama-3-8b", inputTokens: 512 });
//   ... forward to the picked engine(s), then:
//   await decider.release(resp.leaseId);
//
// Decider calls DeciderService, ShardedDecider the same routed by model among model-sharded
// deciders (the shards list the decider serves, and WRONG_SHARD answers: WrongShardError),
// Admin calls AdminService; failures reject with DeciderError
// subclasses carrying the ErrorInfo reason, metadata, admission rejections, field violations
// and retry hint. The generated messages are exported too (and under "@sluice/client/gen/...").

export { Admin, type EngineSpecInput, type WriteOpts } from "./admin.js";
export { type DecideInput, Decider, type DeciderOptions, type Outcome } from "./decider.js";
export {
  AdmissionRejectedError,
  AlreadyExistsError,
  ConfigInvalidError,
  DeadlineExceededError,
  DeciderError,
  DOMAIN,
  FailedPreconditionError,
  type FieldViolation,
  InternalError,
  InvalidArgumentError,
  NotFoundError,
  OverloadedError,
  PermissionDeniedError,
  Reason,
  type ReasonName,
  type Rejection,
  ResourceExhaustedError,
  type RoleName,
  roleName,
  toDeciderError,
  UnauthenticatedError,
  UnavailableError,
  VersionConflictError,
  WrongShardError,
} from "./errors.js";
export { ShardedDecider, type ShardedDeciderOptions, shardRoutes } from "./shards.js";
export type { CallOpts, ClientOptions } from "./transport.js";
export { Code, ConnectError } from "@connectrpc/connect";
export * from "./gen/sluice/v1/decider_pb.js";
export * from "./gen/sluice/v1/admin_pb.js";
export * from "./gen/sluice/v1/errors_pb.js";
