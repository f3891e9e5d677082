"""Per-Decide overhead of sluice_client.Decider over a raw grpcio stub call, against a running decider.

Both variants send the same dry-run Decide (no lease, no state change) over one channel each,
sequentially, from this one process. They run in interleaved rounds (the order alternates per
round) so that machine noise hits both alike. Reported per variant: the median latency over
every call, the spread of the per-round medians, and CPU time per call of this process; then
the client's p50 above the raw stub's.

    go run ./services/sluice decider -config examples/sluice.yaml -config-snapshot - \
        -probe-interval 0 -trust-new-engines &   # the example's engines need not run
    python clients/python/bench/overhead.py --target localhost:7070 --model llama-3-8b
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import grpc

from sluice.v1 import decider_pb2, decider_pb2_grpc
from sluice_client import Decider


def measure(call: Callable[[], object], n: int) -> tuple[list[float], float]:
    lat = []
    cpu0 = time.process_time()
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        lat.append(time.perf_counter() - t0)
    return lat, (time.process_time() - cpu0) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True, help="the decider's gRPC host:port")
    ap.add_argument("--model", required=True, help="a model the decider's configuration serves")
    ap.add_argument("--token", default="", help="the decider's -decide-token, if any")
    ap.add_argument("--input-tokens", type=int, default=512)
    ap.add_argument("--token-ids", type=int, default=0, help="send this many token ids (0: none)")
    ap.add_argument("--calls", type=int, default=2000, help="calls per variant per round")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=500)
    a = ap.parse_args()

    ids = list(range(a.token_ids)) if a.token_ids else None
    n_in = a.token_ids or a.input_tokens
    md = (("authorization", "Bearer " + a.token),) if a.token else None

    raw_channel = grpc.insecure_channel(a.target)
    stub = decider_pb2_grpc.DeciderServiceStub(raw_channel)
    # The raw variant builds its request message per call too, as any caller has to.
    def raw() -> object:
        req = decider_pb2.DecideRequest(model=a.model, input_tokens=n_in, token_ids=ids, dry_run=True)
        return stub.Decide(req, timeout=1.0, metadata=md)

    client = Decider(a.target, token=a.token or None, timeout=1.0)

    def wrapped() -> object:
        return client.decide(model=a.model, input_tokens=n_in, token_ids=ids, dry_run=True)

    variants = {"raw grpcio stub": raw, "sluice_client.Decider": wrapped}
    for f in variants.values():
        measure(f, a.warmup)

    lat: dict[str, list[float]] = {k: [] for k in variants}
    round_p50: dict[str, list[float]] = {k: [] for k in variants}
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    names = list(variants)
    for r in range(a.rounds):
        for name in names if r % 2 == 0 else reversed(names):
            l, c = measure(variants[name], a.calls)
            lat[name] += l
            round_p50[name].append(statistics.median(l))
            cpu[name].append(c)

    us = 1e6
    print(f"{a.rounds} rounds x {a.calls} calls per variant, interleaved; dry-run Decide, model {a.model}, "
          f"input_tokens {n_in}, token_ids {a.token_ids}")
    print("| variant | p50 µs | p90 µs | p99 µs | round p50s µs (min–max) | CPU µs/call (median of rounds) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in names:
        q = statistics.quantiles(lat[name], n=100)
        print(f"| {name} | {statistics.median(lat[name]) * us:.1f} | {q[89] * us:.1f} | {q[98] * us:.1f} | "
              f"{min(round_p50[name]) * us:.1f}–{max(round_p50[name]) * us:.1f} | {statistics.median(cpu[name]) * us:.1f} |")
    d = [c - b for b, c in zip(round_p50[names[0]], round_p50[names[1]])]
    print(f"client p50 above raw: {(statistics.median(lat[names[1]]) - statistics.median(lat[names[0]])) * us:.1f} µs "
          f"(per-round differences {min(d) * us:.1f} to {max(d) * us:.1f} µs)")
    client.close()
    raw_channel.close()


if __name__ == "__main__":
    main()
