// Decider: Decide and Release on Connect-ES.

import { create, isMessage, type MessageInitShape } from "@bufbuild/protobuf";
import { Code, type Client, createClient, type Transport } from "@connectrpc/connect";
import {
  type DecideRequest,
  DecideRequestSchema,
  type DecideResponse,
  DeciderService,
  ReleaseOutcome,
} from "./gen/sluice/v1/decider_pb.js";
import { toDeciderError } from "./errors.js";
import { type CallOpts, type ClientOptions, callOptions, transportFor } from "./transport.js";

/**
 * The fields of a sluice.v1.DecideRequest (proto/sluice/v1/decider.proto), with the token
 * counts as numbers or bigints.
 */
export type DecideInput = Omit<MessageInitShape<typeof DecideRequestSchema>, "inputTokens" | "expectedPeakTokens"> & {
  inputTokens?: number | bigint;
  expectedPeakTokens?: number | bigint;
};

/** How a request ended, for Release: a name or a sluice.v1.ReleaseOutcome value. */
export type Outcome = "success" | "engine_failure" | "cancelled" | "unspecified" | ReleaseOutcome;

const outcomes: Record<string, ReleaseOutcome> = {
  unspecified: ReleaseOutcome.UNSPECIFIED,
  success: ReleaseOutcome.SUCCESS,
  engine_failure: ReleaseOutcome.ENGINE_FAILURE,
  cancelled: ReleaseOutcome.CANCELLED,
};

/** Options of a Decider. */
export interface DeciderOptions extends ClientOptions {
  /**
   * Decide attempts in total on Unavailable (every bucket exhausted, or the decider
   * unreachable); a Decide that failed so opened no lease, so retrying is safe. Default 1.
   */
  retryUnavailable?: number;
  /** The first retry sleep in ms, doubled per attempt with jitter, capped at ten times it. Default 20. */
  retryBackoffMs?: number;
}

function toBigInt(v: number | bigint, field: string): bigint {
  if (typeof v === "bigint") {
    return v;
  }
  if (!Number.isSafeInteger(v)) {
    throw new TypeError(`${field} ${v}: want a whole number of tokens`);
  }
  return BigInt(v);
}

function toRequest(input: DecideInput | DecideRequest): DecideRequest {
  if (isMessage(input, DecideRequestSchema)) {
    return input;
  }
  const { inputTokens, expectedPeakTokens, ...rest } = input as DecideInput;
  const init: MessageInitShape<typeof DecideRequestSchema> = { ...rest, $typeName: undefined };
  if (inputTokens !== undefined) {
    init.inputTokens = toBigInt(inputTokens, "inputTokens");
  }
  if (expectedPeakTokens !== undefined) {
    init.expectedPeakTokens = toBigInt(expectedPeakTokens, "expectedPeakTokens");
  }
  return create(DecideRequestSchema, init);
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const t = setTimeout(resolve, ms);
    signal?.addEventListener(
      "abort",
      () => {
        clearTimeout(t);
        reject(signal.reason);
      },
      { once: true },
    );
  });

/**
 * A client of a decider's DeciderService. `target` is the decider's HTTP base URL (Connect or
 * gRPC-Web over fetch, port 7080 by default) or a Connect Transport (e.g. `grpcTransport` from
 * "@sluice/client/node" for native gRPC on port 7070). Failed calls reject with DeciderError
 * subclasses.
 */
export class Decider {
  /** The generated Connect-ES client, for calls this class does not wrap. */
  readonly client: Client<typeof DeciderService>;
  readonly #token: string | undefined;
  readonly #timeoutMs: number;
  readonly #attempts: number;
  readonly #backoffMs: number;

  constructor(target: string | Transport, options: DeciderOptions = {}) {
    const backoff = options.retryBackoffMs ?? 20;
    if (!(backoff >= 0)) {
      throw new RangeError(`retryBackoffMs ${backoff}: must not be negative`);
    }
    this.client = createClient(DeciderService, transportFor(target, options));
    this.#token = options.token;
    this.#timeoutMs = options.timeoutMs ?? 1000;
    this.#attempts = Math.max(1, options.retryUnavailable ?? 1);
    this.#backoffMs = backoff;
  }

  /**
   * Picks the engine(s) for one request and, unless dryRun, opens a lease. The response's
   * `pick.kind` is `{case: "plain"}` or `{case: "pd"}`; pass `leaseId` to release().
   */
  async decide(input: DecideInput | DecideRequest, call?: CallOpts): Promise<DecideResponse> {
    const req = toRequest(input);
    let backoff = this.#backoffMs;
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.client.decide(req, callOptions(this.#token, this.#timeoutMs, call));
      } catch (err) {
        const e = toDeciderError(err);
        if (attempt >= this.#attempts || e.code !== Code.Unavailable) {
          throw e;
        }
      }
      await sleep(backoff / 2 + Math.random() * (backoff / 2), call?.signal);
      backoff = Math.min(2 * backoff, 10 * this.#backoffMs);
    }
  }

  /** decide with dryRun: the decision the decider would make; no lease, no state. */
  dryRun(input: DecideInput, call?: CallOpts): Promise<DecideResponse> {
    return this.decide({ ...input, dryRun: true }, call);
  }

  /**
   * A dry run with explain: `resp.explain` lists every bucket, stage and candidate. On
   * failure the error's `explain` holds the same account.
   */
  explain(input: DecideInput, call?: CallOpts): Promise<DecideResponse> {
    return this.decide({ ...input, dryRun: true, explain: true }, call);
  }

  /** Closes a lease; false when it was unknown, already released or expired. */
  async release(leaseId: string, outcome: Outcome = "success", failedEngineIds: string[] = [], call?: CallOpts): Promise<boolean> {
    let value: ReleaseOutcome;
    if (typeof outcome === "string") {
      const v = outcomes[outcome];
      if (v === undefined) {
        throw new TypeError(`release outcome ${JSON.stringify(outcome)}: want one of ${Object.keys(outcomes).join(", ")}`);
      }
      value = v;
    } else {
      value = outcome;
    }
    try {
      const resp = await this.client.release(
        { leaseId, outcome: value, failedEngineIds },
        callOptions(this.#token, this.#timeoutMs, call),
      );
      return resp.released;
    } catch (err) {
      throw toDeciderError(err);
    }
  }
}
