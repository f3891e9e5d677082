"""A stand-in engine process built on the real vLLM / SGLang KV-event code.

The Go interop test (tests/interop) starts one of these per engine and
drives it over stdin/stdout, one JSON object per line each way. Every KV event
is encoded and sent by the engines' own classes, unmodified, from the wheels
installed by scripts/lib/pyenv.sh:

  vLLM    vllm.distributed.kv_events: EventPublisherFactory -> ZmqEventPublisher
          (PUB + replay ROUTER), KVEventBatch, BlockStored, BlockRemoved,
          AllBlocksCleared.
  SGLang  sglang.srt.disaggregation.kv_events: EventPublisherFactory ->
          ZmqEventPublisher, KVEventBatch; sglang.srt.mem_cache.events:
          KVCacheEventRecorder, which turns radix-tree nodes into events
          (one per page, coalesced), with the engine's real page hashes (its
          hash_binding.cpp, compiled by scripts/lib/pyenv.sh).

Only modules that need torch, triton or a CUDA/C++ build are replaced, before
import, through sys.modules (see stubs.py); the package __init__ files, which
import the whole engine, are skipped by registering bare packages whose
__path__ is the installed directory, so submodules load from the real files.

Commands (stdin), each answered by {"ok": true, ...} or {"ok": false, "error"}:
  {"op": "start", "kind": "vllm"|"sglang", "endpoint": "tcp://*:P",
   "replay_endpoint": "tcp://*:R"|null, "dp_size": N, "topic": "",
   "lossy": false, "page_size": 16, "metrics_port": M|0, "model": "m"}
      Creates one publisher per DP rank through the engine's factory. With
      lossy, each rank's publisher binds a private port and a forwarder binds
      the given endpoint (+rank), copying frames verbatim; "drop" makes it
      lose messages, as a network would. metrics_port serves /health and the
      engine's /metrics text (see metrics.py).
  {"op": "publish", "rank": r, "events": [{"type": "BlockStored", ...}]}
      vLLM: builds the engine's event structs from the fields and publishes
      one KVEventBatch. With "hash_bytes": true in an event, its hashes are
      hex strings sent as 32-byte digests.
  {"op": "store", "rank": r, "node": id, "parent": id|null, "tokens": [...],
   "medium": "GPU"|"CPU_PINNED", "cache_salt": s|null, "lora_name": s|null}
  {"op": "remove", "rank": r, "node": id, "medium": ...}
  {"op": "clear", "rank": r}
  {"op": "flush", "rank": r}
      SGLang: feed the rank's KVCacheEventRecorder like the radix cache does;
      flush takes its queue and publishes it as one batch, as the scheduler's
      publish_kv_events does.
  {"op": "drop", "rank": r, "count": n}   lossy only: lose the next n messages.
  {"op": "load", "rank": r, "running": n, "waiting": n, "usage": f}
      Sets the numbers /metrics reports for rank r.
  {"op": "sent", "rank": r}   -> {"ok": true, "seq": last seq sent or -1}
  {"op": "stop"}              shuts the publishers down and exits.
"""

import hashlib
import json
import os
import sys
import threading
import time
import types

import stubs  # noqa: F401  (side effect: sys.modules stubs, bare packages)
import metrics

import zmq


def log(msg):
    print("engine.py: " + msg, file=sys.stderr, flush=True)


class Forwarder:
    """Copies every message from the publisher's PUB socket to a PUB socket
    bound on the endpoint the test declared, except those it is told to drop."""

    def __init__(self, upstream, downstream):
        ctx = zmq.Context.instance()
        self._sub = ctx.socket(zmq.SUB)
        self._sub.setsockopt(zmq.SUBSCRIBE, b"")
        self._sub.connect(upstream)
        self._pub = ctx.socket(zmq.PUB)
        self._pub.bind(downstream)
        self._lock = threading.Lock()
        self._drop = 0
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def drop(self, n):
        with self._lock:
            self._drop += n

    def _run(self):
        while not self._stop:
            if not self._sub.poll(100):
                continue
            frames = self._sub.recv_multipart()
            with self._lock:
                if self._drop > 0:
                    self._drop -= 1
                    log("forwarder: dropped seq %d" % int.from_bytes(frames[1], "big"))
                    continue
            self._pub.send_multipart(frames)

    def close(self):
        self._stop = True
        self._thread.join(2)
        self._sub.close(0)
        self._pub.close(0)


class Node:
    """The fields of an SGLang radix-tree node that KVCacheEventRecorder reads."""

    def __init__(self, key, parent):
        self.key = key
        self.parent = parent
        self.hash_value = None
        self.event_hash_value = None


class Key:
    """The fields of sglang.srt.mem_cache.radix_cache.RadixKey the recorder and
    the page hash read (that module needs torch)."""

    def __init__(self, token_ids, extra_key=None, cache_salt=None):
        import array

        self.token_ids = array.array("q", token_ids)
        self.extra_key = extra_key
        self.cache_salt = cache_salt or None
        self.is_bigram = False
        self.limit = None

    def raw_token_ids(self):
        return self.token_ids

    def __len__(self):
        return len(self.token_ids)


class Engine:
    def __init__(self, cmd):
        self.kind = cmd["kind"]
        self.dp_size = max(1, int(cmd.get("dp_size") or 1))
        self.page_size = int(cmd.get("page_size") or 16)
        self.forwarders = []
        self.publishers = []
        self.recorders = []
        self.nodes = []  # per rank: id -> Node
        self.roots = []
        self.sent = [-1] * self.dp_size
        endpoint = cmd["endpoint"]
        replay = cmd.get("replay_endpoint")
        topic = cmd.get("topic") or ""
        if self.kind == "vllm":
            from vllm.config.kv_events import KVEventsConfig
            from vllm.distributed import kv_events as kv

            self.kv = kv
        elif self.kind == "sglang":
            from sglang.srt.disaggregation import kv_events as kv
            from sglang.srt.mem_cache import events as sgevents

            self.kv = kv
            self.sgevents = sgevents
        else:
            raise ValueError("unknown kind %r" % self.kind)
        for rank in range(self.dp_size):
            pub_endpoint = endpoint
            if cmd.get("lossy"):
                # The publisher binds a private port Q (the factory adds the
                # rank, so it is given Q - rank); the forwarder binds the
                # declared endpoint for the rank.
                private = free_port()
                pub_endpoint = "tcp://*:%d" % (private - rank)
                downstream = kv.ZmqEventPublisher.offset_endpoint_port(endpoint, rank)
                self.forwarders.append(Forwarder("tcp://127.0.0.1:%d" % private, downstream))
            if self.kind == "vllm":
                cfg = KVEventsConfig(
                    enable_kv_cache_events=True,
                    publisher="zmq",
                    endpoint=pub_endpoint,
                    replay_endpoint=replay,
                    topic=topic,
                )
                self.publishers.append(kv.EventPublisherFactory.create(cfg, data_parallel_rank=rank))
            else:
                cli = json.dumps(
                    {"publisher": "zmq", "endpoint": pub_endpoint, "replay_endpoint": replay, "topic": topic}
                )
                self.publishers.append(kv.EventPublisherFactory.create(cli, attn_dp_rank=rank))
                self.recorders.append(sgevents.KVCacheEventRecorder(enabled=True, page_size=self.page_size))
                root = Node(Key([]), None)
                root.hash_value = []
                self.roots.append(root)
                self.nodes.append({})
        self.metrics = None
        if cmd.get("metrics_port"):
            self.metrics = metrics.Server(self.kind, cmd.get("model") or "m", self.dp_size, int(cmd["metrics_port"]))

    def publish_batch(self, rank, events):
        batch = self.kv.KVEventBatch(ts=time.time(), events=events)
        self.publishers[rank].publish(batch)
        self.sent[rank] += 1
        return self.sent[rank]

    def vllm_event(self, e):
        e = dict(e)
        t = e.pop("type")
        if e.pop("hash_bytes", False):
            # vLLM with int hashes off: ExternalBlockHash is the 32-byte digest.
            e["block_hashes"] = [bytes.fromhex(h) for h in e["block_hashes"]]
            if e.get("parent_block_hash") is not None:
                e["parent_block_hash"] = bytes.fromhex(e["parent_block_hash"])
        cls = {"BlockStored": self.kv.BlockStored, "BlockRemoved": self.kv.BlockRemoved,
               "AllBlocksCleared": self.kv.AllBlocksCleared}[t]
        if t == "BlockStored":
            e.setdefault("parent_block_hash", None)
            e.setdefault("lora_id", None)
            e.setdefault("medium", self.kv.MEDIUM_GPU)
            e.setdefault("lora_name", None)
            if e.get("extra_keys") is not None:
                e["extra_keys"] = [tuple(k) if k is not None else None for k in e["extra_keys"]]
        elif t == "BlockRemoved":
            e.setdefault("medium", self.kv.MEDIUM_GPU)
        return cls(**e)

    def sglang_medium(self, name):
        return self.kv.StorageMedium(name) if name else None

    def handle(self, cmd):
        op = cmd["op"]
        rank = int(cmd.get("rank") or 0)
        if op == "publish":
            if self.kind != "vllm":
                raise ValueError("publish is for vllm; sglang events come from store/remove/flush")
            return {"seq": self.publish_batch(rank, [self.vllm_event(e) for e in cmd["events"]])}
        if op == "store":
            rec, nodes = self.recorders[rank], self.nodes[rank]
            parent = nodes[cmd["parent"]] if cmd.get("parent") else self.roots[rank]
            extra_key = None
            if cmd.get("lora_name"):
                # What Req does: the adapter's 32-hex lora_id ends extra_key;
                # the recorder learns the public name per request.
                lora_id = hashlib.md5(cmd["lora_name"].encode()).hexdigest()
                extra_key = lora_id
                rec.lora_names.register(types.SimpleNamespace(extra_key=extra_key, lora_id=lora_id),
                                        cmd["lora_name"])
            node = Node(Key(cmd["tokens"], extra_key=extra_key, cache_salt=cmd.get("cache_salt")), parent)
            nodes[cmd["node"]] = node
            rec.record_store(node, medium=self.sglang_medium(cmd.get("medium")))
            return {}
        if op == "remove":
            node = self.nodes[rank][cmd["node"]]
            self.recorders[rank].record_remove(node, medium=self.sglang_medium(cmd.get("medium")))
            return {}
        if op == "clear":
            self.recorders[rank].record_all_cleared()
            return {}
        if op == "flush":
            events = self.recorders[rank].take()
            if not events:
                return {"seq": self.sent[rank], "events": 0}
            n = sum(len(getattr(e, "block_hashes", ())) for e in events)
            return {"seq": self.publish_batch(rank, events), "events": len(events), "hashes": n}
        if op == "drop":
            self.forwarders[rank].drop(int(cmd.get("count") or 1))
            return {}
        if op == "load":
            self.metrics.set(rank, cmd)
            return {}
        if op == "sent":
            return {"seq": self.sent[rank]}
        raise ValueError("unknown op %r" % op)

    def stop(self):
        for p in self.publishers:
            p.shutdown()
        for f in self.forwarders:
            f.close()
        if self.metrics:
            self.metrics.close()


def free_port():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# Replies go to the original stdout; everything else that writes to stdout
# (vLLM's default log handler does) is sent to stderr, the test's log.
_replies = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr


def reply(obj):
    _replies.write(json.dumps(obj) + "\n")
    _replies.flush()


def main():
    engine = None
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            cmd = json.loads(line)
            if cmd["op"] == "start":
                engine = Engine(cmd)
                reply({"ok": True, "versions": stubs.versions()})
                continue
            if cmd["op"] == "stop":
                if engine:
                    engine.stop()
                reply({"ok": True})
                return
            out = engine.handle(cmd)
            out["ok"] = True
            reply(out)
        except Exception as exc:  # reported to the test, which fails
            import traceback

            traceback.print_exc()
            reply({"ok": False, "error": "%s: %s" % (type(exc).__name__, exc)})
    if engine:
        engine.stop()


if __name__ == "__main__":
    main()
