// Admin: the decider's AdminService (buckets, engines, configuration, versions).
import { createClient } from "@connectrpc/connect";
import { AdminService, } from "./gen/sluice/v1/admin_pb.js";
import { toDeciderError } from "./errors.js";
import { callOptions, transportFor } from "./transport.js";
const version = (v) => BigInt(v ?? 0);
/**
 * A client of a decider's AdminService. Reads need a viewer or admin token, writes an admin
 * token. A write based on a stale version rejects with VersionConflictError (its
 * `currentVersion` is the version to re-read); an invalid result with ConfigInvalidError
 * listing every problem in `fieldViolations`. Buckets are JSON objects in the configuration
 * document's shape.
 */
export class Admin {
    /** The generated Connect-ES client, for calls this class does not wrap. */
    client;
    #token;
    #timeoutMs;
    constructor(target, options = {}) {
        this.client = createClient(AdminService, transportFor(target, options));
        this.#token = options.token;
        this.#timeoutMs = options.timeoutMs ?? 5000;
    }
    async #call(f, call) {
        try {
            return await f(callOptions(this.#token, this.#timeoutMs, call));
        }
        catch (err) {
            throw toDeciderError(err);
        }
    }
    /** The snapshot this replica serves: version, documentJson, loadedAt, source. */
    getConfig(call) {
        return this.#call((o) => this.client.getConfig({}, o), call);
    }
    /** Replaces the whole configuration (YAML or JSON text, or an object) atomically. */
    applyConfig(document, opts) {
        const doc = typeof document === "string" ? document : JSON.stringify(document);
        return this.#call((o) => this.client.applyConfig({ document: doc, basedOnVersion: version(opts?.basedOnVersion) }, o), opts);
    }
    /** Checks a document as applyConfig would, storing nothing (`applied` is false). */
    validateConfig(document, opts) {
        const doc = typeof document === "string" ? document : JSON.stringify(document);
        return this.#call((o) => this.client.applyConfig({ document: doc, basedOnVersion: version(opts?.basedOnVersion), validateOnly: true }, o), opts);
    }
    /** The version log, newest first (`versions`), and `currentVersion`. */
    listVersions(limit = 0, call) {
        return this.#call((o) => this.client.listVersions({ limit }, o), call);
    }
    /** One logged version (`info`) with its document (`documentJson`). */
    getVersion(v, call) {
        return this.#call((o) => this.client.getVersion({ version: BigInt(v) }, o), call);
    }
    /** Stores an earlier version's document as a new version. */
    rollback(v, opts) {
        return this.#call((o) => this.client.rollback({ version: BigInt(v), basedOnVersion: version(opts?.basedOnVersion) }, o), opts);
    }
    /** The buckets in force, in document order. */
    async listBuckets(call) {
        return (await this.#call((o) => this.client.listBuckets({}, o), call)).buckets;
    }
    /** One bucket; NotFoundError (BUCKET_NOT_FOUND) when there is none. */
    async getBucket(id, call) {
        return (await this.#call((o) => this.client.getBucket({ id }, o), call)).bucket ?? {};
    }
    /** Appends a bucket (its id included); AlreadyExistsError when the id is taken. */
    createBucket(bucket, opts) {
        return this.#call((o) => this.client.createBucket({ bucket, basedOnVersion: version(opts?.basedOnVersion) }, o), opts);
    }
    /** Replaces the bucket with this id. */
    replaceBucket(id, bucket, opts) {
        return this.#call((o) => this.client.replaceBucket({ id, bucket, basedOnVersion: version(opts?.basedOnVersion) }, o), opts);
    }
    /** Removes a bucket. */
    deleteBucket(id, opts) {
        return this.#call((o) => this.client.deleteBucket({ id, basedOnVersion: version(opts?.basedOnVersion) }, o), opts);
    }
    /** Registered engines (only model's when given) with health and load, by id. */
    async listEngines(model = "", call) {
        return (await this.#call((o) => this.client.listEngines({ model }, o), call)).engines;
    }
    /** One engine; NotFoundError (ENGINE_NOT_FOUND) when there is none. */
    async getEngine(id, call) {
        return (await this.#call((o) => this.client.getEngine({ id }, o), call)).engine;
    }
    /** Adds an engine to the worker list. */
    registerEngine(engine, opts) {
        return this.#call((o) => this.client.registerEngine({ engine, basedOnVersion: version(opts?.basedOnVersion) }, o), opts);
    }
    /** Replaces a configured engine's spec. */
    updateEngine(id, engine, opts) {
        return this.#call((o) => this.client.updateEngine({ id, engine, basedOnVersion: version(opts?.basedOnVersion) }, o), opts);
    }
    /** Takes an engine out of every engine group and labels it sluice.dev/drained=true. */
    drainEngine(id, opts) {
        return this.#call((o) => this.client.drainEngine({ id, basedOnVersion: version(opts?.basedOnVersion) }, o), opts);
    }
    /** Deletes an engine from the worker list and from every engine group. */
    removeEngine(id, opts) {
        return this.#call((o) => this.client.removeEngine({ id, basedOnVersion: version(opts?.basedOnVersion) }, o), opts);
    }
}
