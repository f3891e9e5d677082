// Admin: the decider's AdminService (buckets, engines, configuration, versions).

import type { JsonObject, MessageInitShape } from "@bufbuild/protobuf";
import { type Client, createClient, type Transport } from "@connectrpc/connect";
import {
  AdminService,
  type ApplyConfigResponse,
  type CreateBucketResponse,
  type DeleteBucketResponse,
  type DrainEngineResponse,
  type Engine,
  type EngineSpecSchema,
  type GetConfigResponse,
  type GetVersionResponse,
  type ListVersionsResponse,
  type RegisterEngineResponse,
  type RemoveEngineResponse,
  type ReplaceBucketResponse,
  type RollbackResponse,
  type UpdateEngineResponse,
} from "./gen/sluice/v1/admin_pb.js";
import { toDeciderError } from "./errors.js";
import { type CallOpts, type ClientOptions, callOptions, transportFor } from "./transport.js";

/** An engine spec: the fields of sluice.v1.EngineSpec. */
export type EngineSpecInput = MessageInitShape<typeof EngineSpecSchema>;

/** The version a write is based on; 0 (the default) means the version the replica serves now. */
export interface WriteOpts extends CallOpts {
  basedOnVersion?: number | bigint;
}

const version = (v: number | bigint | undefined): bigint => BigInt(v ?? 0);

/**
 * A client of a decider's AdminService. Reads need a viewer or admin token, writes an admin
 * token. A write based on a stale version rejects with VersionConflictError (its
 * `currentVersion` is the version to re-read); an invalid result with ConfigInvalidError
 * listing every problem in `fieldViolations`. Buckets are JSON objects in the configuration
 * document's shape.
 */
export class Admin {
  /** The generated Connect-ES client, for calls this class does not wrap. */
  readonly client: Client<typeof AdminService>;
  readonly #token: string | undefined;
  readonly #timeoutMs: number;

  constructor(target: string | Transport, options: ClientOptions = {}) {
    this.client = createClient(AdminService, transportFor(target, options));
    this.#token = options.token;
    this.#timeoutMs = options.timeoutMs ?? 5000;
  }

  async #call<T>(f: (o: ReturnType<typeof callOptions>) => Promise<T>, call?: CallOpts): Promise<T> {
    try {
      return await f(callOptions(this.#token, this.#timeoutMs, call));
    } catch (err) {
      throw toDeciderError(err);
    }
  }

  /** The snapshot this replica serves: version, documentJson, loadedAt, source. */
  getConfig(call?: CallOpts): Promise<GetConfigResponse> {
    return this.#call((o) => this.client.getConfig({}, o), call);
  }

  /** Replaces the whole configuration (YAML or JSON text, or an object) atomically. */
  applyConfig(document: string | JsonObject, opts?: WriteOpts): Promise<ApplyConfigResponse> {
    const doc = typeof document === "string" ? document : JSON.stringify(document);
    return this.#call((o) => this.client.applyConfig({ document: doc, basedOnVersion: version(opts?.basedOnVersion) }, o), opts);
  }

  /** Checks a document as applyConfig would, storing nothing (`applied` is false). */
  validateConfig(document: string | JsonObject, opts?: WriteOpts): Promise<ApplyConfigResponse> {
    const doc = typeof document === "string" ? document : JSON.stringify(document);
    return this.#call(
      (o) => this.client.applyConfig({ document: doc, basedOnVersion: version(opts?.basedOnVersion), validateOnly: true }, o),
      opts,
    );
  }

  /** The version log, newest first (`versions`), and `currentVersion`. */
  listVersions(limit = 0, call?: CallOpts): Promise<ListVersionsResponse> {
    return this.#call((o) => this.client.listVersions({ limit }, o), call);
  }

  /** One logged version (`info`) with its document (`documentJson`). */
  getVersion(v: number | bigint, call?: CallOpts): Promise<GetVersionResponse> {
    return this.#call((o) => this.client.getVersion({ version: BigInt(v) }, o), call);
  }

  /** Stores an earlier version's document as a new version. */
  rollback(v: number | bigint, opts?: WriteOpts): Promise<RollbackResponse> {
    return this.#call((o) => this.client.rollback({ version: BigInt(v), basedOnVersion: version(opts?.basedOnVersion) }, o), opts);
  }

  /** The buckets in force, in document order. */
  async listBuckets(call?: CallOpts): Promise<JsonObject[]> {
    return (await this.#call((o) => this.client.listBuckets({}, o), call)).buckets;
  }

  /** One bucket; NotFoundError (BUCKET_NOT_FOUND) when there is none. */
  async getBucket(id: string, call?: CallOpts): Promise<JsonObject> {
    return (await this.#call((o) => this.client.getBucket({ id }, o), call)).bucket ?? {};
  }

  /** Appends a bucket (its id included); AlreadyExistsError when the id is taken. */
  createBucket(bucket: JsonObject, opts?: WriteOpts): Promise<CreateBucketResponse> {
    return this.#call((o) => this.client.createBucket({ bucket, basedOnVersion: version(opts?.basedOnVersion) }, o), opts);
  }

  /** Replaces the bucket with this id. */
  replaceBucket(id: string, bucket: JsonObject, opts?: WriteOpts): Promise<ReplaceBucketResponse> {
    return this.#call((o) => this.client.replaceBucket({ id, bucket, basedOnVersion: version(opts?.basedOnVersion) }, o), opts);
  }

  /** Removes a bucket. */
  deleteBucket(id: string, opts?: WriteOpts): Promise<DeleteBucketResponse> {
    return this.#call((o) => this.client.deleteBucket({ id, basedOnVersion: version(opts?.basedOnVersion) }, o), opts);
  }

  /** Registered engines (only model's when given) with health and load, by id. */
  async listEngines(model = "", call?: CallOpts): Promise<Engine[]> {
    return (await this.#call((o) => this.client.listEngines({ model }, o), call)).engines;
  }

  /** One engine; NotFoundError (ENGINE_NOT_FOUND) when there is none. */
  async getEngine(id: string, call?: CallOpts): Promise<Engine | undefined> {
    return (await this.#call((o) => this.client.getEngine({ id }, o), call)).engine;
  }

  /** Adds an engine to the worker list. */
  registerEngine(engine: EngineSpecInput, opts?: WriteOpts): Promise<RegisterEngineResponse> {
    return this.#call((o) => this.client.registerEngine({ engine, basedOnVersion: version(opts?.basedOnVersion) }, o), opts);
  }

  /** Replaces a configured engine's spec. */
  updateEngine(id: string, engine: EngineSpecInput, opts?: WriteOpts): Promise<UpdateEngineResponse> {
    return this.#call((o) => this.client.updateEngine({ id, engine, basedOnVersion: version(opts?.basedOnVersion) }, o), opts);
  }

  /** Takes an engine out of every engine group and labels it sluice.dev/drained=true. */
  drainEngine(id: string, opts?: WriteOpts): Promise<DrainEngineResponse> {
    return this.#call((o) => this.client.drainEngine({ id, basedOnVersion: version(opts?.basedOnVersion) }, o), opts);
  }

  /** Deletes an engine from the worker list and from every engine group. */
  removeEngine(id: string, opts?: WriteOpts): Promise<RemoveEngineResponse> {
    return this.#call((o) => this.client.removeEngine({ id, basedOnVersion: version(opts?.basedOnVersion) }, o), opts);
  }
}
