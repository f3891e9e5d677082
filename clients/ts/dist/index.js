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
export { Admin } from "./admin.js";
export { Decider } from "./decider.js";
export { AdmissionRejectedError, AlreadyExistsError, ConfigInvalidError, DeadlineExceededError, DeciderError, DOMAIN, FailedPreconditionError, InternalError, InvalidArgumentError, NotFoundError, OverloadedError, PermissionDeniedError, Reason, ResourceExhaustedError, roleName, toDeciderError, UnauthenticatedError, UnavailableError, VersionConflictError, WrongShardError, } from "./errors.js";
export { ShardedDecider, shardRoutes } from "./shards.js";
export { Code, ConnectError } from "@connectrpc/connect";
export * from "./gen/sluice/v1/decider_pb.js";
export * from "./gen/sluice/v1/admin_pb.js";
export * from "./gen/sluice/v1/errors_pb.js";
