import type { GenFile, GenMessage } from "@bufbuild/protobuf/codegenv2";
import type { Role } from "./decider_pb.js";
import type { Message } from "@bufbuild/protobuf";
/**
 * Describes the file sluice/v1/errors.proto.
 */
export declare const file_sluice_v1_errors: GenFile;
/**
 * AdmissionRejections is an error detail attached to an UNAVAILABLE status,
 * beside a google.rpc.ErrorInfo, when every bucket was exhausted. It lists
 * every admission cap that rejected an engine so that a caller or operator
 * can see which limit was hit where.
 *
 * @generated from message sluice.v1.AdmissionRejections
 */
export type AdmissionRejections = Message<"sluice.v1.AdmissionRejections"> & {
    /**
     * The rejections, in the order the decider evaluated them.
     *
     * @generated from field: repeated sluice.v1.AdmissionRejection rejections = 1;
     */
    rejections: AdmissionRejection[];
};
/**
 * Describes the message sluice.v1.AdmissionRejections.
 * Use `create(AdmissionRejectionsSchema)` to create a new message.
 */
export declare const AdmissionRejectionsSchema: GenMessage<AdmissionRejections>;
/**
 * AdmissionRejection is one engine turned away by one admission cap.
 *
 * @generated from message sluice.v1.AdmissionRejection
 */
export type AdmissionRejection = Message<"sluice.v1.AdmissionRejection"> & {
    /**
     * The bucket whose stage evaluated the engine.
     *
     * @generated from field: string bucket_id = 1;
     */
    bucketId: string;
    /**
     * The role of the stage that evaluated the engine.
     *
     * @generated from field: sluice.v1.Role role = 2;
     */
    role: Role;
    /**
     * The engine that was rejected.
     *
     * @generated from field: string engine_id = 3;
     */
    engineId: string;
    /**
     * The name of the admission cap that rejected it, for example
     * "max_running_requests" or "max_kv_used_ratio".
     *
     * @generated from field: string limit = 4;
     */
    limit: string;
};
/**
 * Describes the message sluice.v1.AdmissionRejection.
 * Use `create(AdmissionRejectionSchema)` to create a new message.
 */
export declare const AdmissionRejectionSchema: GenMessage<AdmissionRejection>;
