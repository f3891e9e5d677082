export { Admin, type EngineSpecInput, type WriteOpts } from "./admin.js";
export { type DecideInput, Decider, type DeciderOptions, type Outcome } from "./decider.js";
export { AdmissionRejectedError, AlreadyExistsError, ConfigInvalidError, DeadlineExceededError, DeciderError, DOMAIN, FailedPreconditionError, type FieldViolation, InternalError, InvalidArgumentError, NotFoundError, OverloadedError, PermissionDeniedError, Reason, type ReasonName, type Rejection, ResourceExhaustedError, type RoleName, roleName, toDeciderError, UnauthenticatedError, UnavailableError, VersionConflictError, WrongShardError, } from "./errors.js";
export { ShardedDecider, type ShardedDeciderOptions, shardRoutes } from "./shards.js";
export type { CallOpts, ClientOptions } from "./transport.js";
export { Code, ConnectError } from "@connectrpc/connect";
export * from "./gen/sluice/v1/decider_pb.js";
export * from "./gen/sluice/v1/admin_pb.js";
export * from "./gen/sluice/v1/errors_pb.js";
