// ShardedDecider: Decide and Release routed by model among model-sharded deciders
// (docs/decisions.md, "Model-sharded deciders").

import type { Transport } from "@connectrpc/connect";
import { Admin } from "./admin.js";
import { type DecideInput, Decider, type DeciderOptions, type Outcome } from "./decider.js";
import type { DecideRequest, DecideResponse } from "./gen/sluice/v1/decider_pb.js";
import { toDeciderError, WrongShardError } from "./errors.js";
import type { CallOpts } from "./transport.js";

/** Options of a ShardedDecider: a Decider's, applied to every decider it reaches, and these. */
export interface ShardedDeciderOptions extends DeciderOptions {
  /**
   * How to reach a shard's decider from the address the configuration lists for it (host:port
   * of its gRPC port): a base URL (Connect or gRPC-Web over fetch, e.g. the same host's HTTP
   * port) or a Transport; `grpcShardTarget` from "@sluice/client/node" speaks native gRPC to
   * the address itself.
   */
  shardTarget: (address: string) => string | Transport;
  /**
   * The token the shards list is read with (AdminService.GetConfig): a viewer or admin token when
   * the decider has any, "" for none when it has none. Default: token.
   */
  mapToken?: string;
  /** How often the shards list is read again, in ms; 0 never reads it (WRONG_SHARD answers alone route). Default 30000. */
  refreshIntervalMs?: number;
}

/**
 * shardRoutes reads the routes a configuration document's `shards` list gives (the JSON of
 * GetConfigResponse.documentJson): model -> its shard's deciders. Only shards that list
 * `deciders` route their models.
 */
export function shardRoutes(documentJson: string): Map<string, string[]> {
  const doc: unknown = JSON.parse(documentJson);
  const routes = new Map<string, string[]>();
  const shards = (doc as { shards?: unknown } | null)?.shards;
  if (!Array.isArray(shards)) {
    return routes;
  }
  for (const sh of shards as { models?: unknown; deciders?: unknown }[]) {
    const deciders = Array.isArray(sh?.deciders) ? sh.deciders.map(String) : [];
    if (deciders.length === 0 || !Array.isArray(sh.models)) {
      continue;
    }
    for (const m of sh.models) {
      routes.set(String(m), deciders);
    }
  }
  return routes;
}

const sameList = (a: readonly string[] | undefined, b: readonly string[]) =>
  a !== undefined && a.length === b.length && a.every((x, i) => x === b[i]);

/**
 * A Decider that routes by model among model-sharded deciders. `target` is any decider; models
 * that no shard with listed `deciders` owns go there. The shards list is read from it
 * (AdminService.GetConfig, with `mapToken`, else `token`) at the first call, which waits for
 * it, and again every `refreshIntervalMs` (in the background, after a call finds it due), and
 * each model of a shard that lists `deciders` goes straight to them, round robin. A WRONG_SHARD
 * answer naming deciders routes the model there too and the call is sent once more, so a model
 * moved since the last read, or a map the token may not read, costs one extra round trip; a
 * refusal that names none rejects with WrongShardError. Release goes to the replica that
 * granted the lease.
 */
export class ShardedDecider {
  readonly #home: Decider;
  readonly #admin: Admin;
  readonly #options: ShardedDeciderOptions;
  readonly #interval: number;
  readonly #clients = new Map<string, Decider>(); // decider address -> client
  readonly #routes = new Map<string, readonly string[]>(); // model -> deciders
  readonly #mapped = new Set<string>(); // models routed by the shards list
  readonly #leases = new Map<string, { client: Decider; expiresMs: number }>();
  #turn = 0;
  #version = 0n;
  #nextReadMs = 0; // Date.now() of the next read; 0 before the first
  #reading: Promise<void> | undefined;
  #failing = false;

  constructor(target: string | Transport, options: ShardedDeciderOptions) {
    if (typeof options?.shardTarget !== "function") {
      throw new TypeError(
        'ShardedDecider: options.shardTarget is required: how to reach a shard\'s decider from its host:port, e.g. grpcShardTarget from "@sluice/client/node"',
      );
    }
    const interval = options.refreshIntervalMs ?? 30000;
    if (!(interval >= 0)) {
      throw new RangeError(`refreshIntervalMs ${interval}: must not be negative (0 reads no shards list)`);
    }
    this.#options = options;
    this.#interval = interval;
    this.#home = new Decider(target, options);
    this.#admin = new Admin(target, { ...options, token: options.mapToken ?? options.token, timeoutMs: options.timeoutMs ?? 1000 });
  }

  /** The deciders `model` is sent to; [] when it goes to `target`. */
  routeOf(model: string): readonly string[] {
    return this.#routes.get(model) ?? [];
  }

  /** The configuration version of the shards list in force; 0n before one was read. */
  get shardMapVersion(): bigint {
    return this.#version;
  }

  /** Reads the shards list now and returns the version in force; rejects with a DeciderError. */
  async refreshShardMap(call?: CallOpts): Promise<bigint> {
    const resp = await this.#admin.getConfig(call);
    this.#apply(resp.version, resp.documentJson);
    return this.#version;
  }

  #apply(version: bigint, documentJson: string): void {
    let want: Map<string, string[]>;
    try {
      want = shardRoutes(documentJson);
    } catch {
      return; // not the JSON expected: keep the routes in force
    }
    if (version <= this.#version) {
      return;
    }
    for (const [model, deciders] of want) {
      if (!sameList(this.#routes.get(model), deciders) || !this.#mapped.has(model)) {
        this.#routes.set(model, deciders);
        this.#mapped.add(model);
      }
    }
    for (const model of [...this.#mapped]) {
      if (!want.has(model)) {
        this.#routes.delete(model);
        this.#mapped.delete(model);
      }
    }
    this.#version = version;
  }

  async #read(): Promise<void> {
    try {
      const resp = await this.#admin.getConfig();
      this.#failing = false;
      this.#apply(resp.version, resp.documentJson);
    } catch {
      this.#failing = true; // WRONG_SHARD answers route until a read succeeds
    } finally {
      this.#reading = undefined;
    }
  }

  /** True when the last read of the shards list failed (e.g. a token that may not read it). */
  get shardMapFailing(): boolean {
    return this.#failing;
  }

  async #refresh(): Promise<void> {
    if (this.#interval === 0 || this.#reading || Date.now() < this.#nextReadMs) {
      return;
    }
    const first = this.#nextReadMs === 0;
    this.#nextReadMs = Date.now() + this.#interval;
    this.#reading = this.#read();
    if (first) {
      await this.#reading;
    }
  }

  #clientFor(model: string): Decider {
    const addrs = this.#routes.get(model);
    if (!addrs || addrs.length === 0) {
      return this.#home;
    }
    const addr = addrs[++this.#turn % addrs.length] as string;
    let c = this.#clients.get(addr);
    if (!c) {
      c = new Decider(this.#options.shardTarget(addr), this.#options);
      this.#clients.set(addr, c);
    }
    return c;
  }

  #hold(resp: DecideResponse, client: Decider): void {
    const now = Date.now();
    for (const [id, l] of this.#leases) {
      if (l.expiresMs >= now) {
        break; // insertion order is expiry order: every lease has the same TTL
      }
      this.#leases.delete(id);
    }
    if (client === this.#home || !resp.leaseId) {
      return;
    }
    const at = resp.leaseExpiresAt;
    const expiresMs = at ? Number(at.seconds) * 1000 + Math.round(at.nanos / 1e6) : now + 3600_000;
    this.#leases.set(resp.leaseId, { client, expiresMs });
  }

  /** Decider.decide on the model's deciders, following one WRONG_SHARD redirect. */
  async decide(input: DecideInput | DecideRequest, call?: CallOpts): Promise<DecideResponse> {
    await this.#refresh();
    const model = input.model ?? "";
    let c = this.#clientFor(model);
    let resp: DecideResponse;
    try {
      resp = await c.decide(input, call);
    } catch (err) {
      const e = toDeciderError(err);
      if (!(e instanceof WrongShardError)) {
        throw e;
      }
      const deciders = e.deciders;
      if (deciders.length > 0) {
        this.#routes.set(model, deciders);
        this.#mapped.delete(model);
        c = this.#clientFor(model);
      } else if (c !== this.#home) {
        // A stale route: the owner lists no deciders, so it is target's to answer.
        this.#routes.delete(model);
        this.#mapped.delete(model);
        c = this.#home;
      } else {
        throw e;
      }
      resp = await c.decide(input, call);
    }
    this.#hold(resp, c);
    return resp;
  }

  /** decide with dryRun. */
  dryRun(input: DecideInput, call?: CallOpts): Promise<DecideResponse> {
    return this.decide({ ...input, dryRun: true }, call);
  }

  /** decide with dryRun and explain. */
  explain(input: DecideInput, call?: CallOpts): Promise<DecideResponse> {
    return this.decide({ ...input, dryRun: true, explain: true }, call);
  }

  /** Decider.release on the replica that granted the lease. */
  async release(leaseId: string, outcome: Outcome = "success", failedEngineIds: string[] = [], call?: CallOpts): Promise<boolean> {
    const c = this.#leases.get(leaseId)?.client ?? this.#home;
    const released = await c.release(leaseId, outcome, failedEngineIds, call);
    this.#leases.delete(leaseId);
    return released;
  }
}
