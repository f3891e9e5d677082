"""The engine's HTTP side for the interop test: /health, Prometheus /metrics and,
for SGLang, GET /v1/loads.

The metric names and label names are not typed here: they are read from the
engines' own metric definitions in the installed wheels (vLLM's
vllm/v1/metrics/loggers.py, SGLang's sglang/srt/observability/
metrics_collector.py) by parsing their source for the Gauge(name=...)
literals, so a rename in a new engine release fails the test instead of
leaving a stale fixture. The values are the ones the test sets ("load").
Prometheus text is written by hand: prometheus_client is not installed.

SGLang's /v1/loads entries are the real sglang.srt.managers.load_snapshot.
LoadSnapshot structs, serialised by their own to_dict(); the envelope around
them is the one sglang/srt/entrypoints/v1_loads.py returns (that module needs
fastapi, so its five keys are repeated here).
"""

import ast
import datetime
import http.server
import json
import importlib.metadata
import os
import threading
import time

# Gauges sluice reads, per engine (see docs/wire-formats.md "Load scrapes").
VLLM_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
VLLM_INFO = "vllm:cache_config_info"
SGLANG_GAUGES = (
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:token_usage",
    "sglang:num_used_tokens",
    "sglang:max_total_num_tokens",
)


def defined_names(dist, relpath):
    """Every string passed as name=... in the module's source."""
    path = os.path.join(str(importlib.metadata.distribution(dist).locate_file(dist)), relpath)
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "name" and isinstance(node.value, ast.Constant):
            if isinstance(node.value.value, str):
                names.add(node.value.value)
        # vLLM's info gauge: name = "vllm:cache_config_info"
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            if any(isinstance(t, ast.Name) and t.id == "name" for t in node.targets):
                names.add(node.value.value)
    return names


def check_defined(kind):
    if kind == "vllm":
        have = defined_names("vllm", "v1/metrics/loggers.py")
        want = VLLM_GAUGES + (VLLM_INFO,)
    else:
        have = defined_names("sglang", "srt/observability/metrics_collector.py")
        want = SGLANG_GAUGES
    missing = [n for n in want if n not in have]
    if missing:
        raise RuntimeError("%s no longer defines metrics %s" % (kind, missing))


class Server:
    """Serves one engine's /metrics with one series per DP rank."""

    def __init__(self, kind, model, dp_size, port, block_size=16, num_gpu_blocks=8192, max_total_tokens=442000):
        check_defined(kind)
        self.kind, self.model, self.dp_size = kind, model, dp_size
        self.block_size, self.num_gpu_blocks, self.max_total_tokens = block_size, num_gpu_blocks, max_total_tokens
        self._lock = threading.Lock()
        self._load = {r: {"running": 0, "waiting": 0, "usage": 0.0} for r in range(dp_size)}
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path == "/health":
                    body, ctype = b"", "text/plain"
                elif self.path == "/metrics":
                    body, ctype = server.render().encode(), "text/plain; version=0.0.4; charset=utf-8"
                elif self.path.split("?")[0] == "/v1/loads" and server.kind == "sglang":
                    body, ctype = json.dumps(server.sglang_loads()).encode(), "application/json"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def set(self, rank, cmd):
        with self._lock:
            for k in ("running", "waiting", "usage"):
                if k in cmd:
                    self._load[rank][k] = cmd[k]

    def sglang_loads(self):
        from sglang.srt.managers.load_snapshot import LoadSnapshot
        from sglang.version import __version__

        with self._lock:
            load = {r: dict(v) for r, v in self._load.items()}
        loads = []
        for r in range(self.dp_size):
            v = load[r]
            snap = LoadSnapshot(
                timestamp=time.time(),
                dp_rank=r,
                num_running_reqs=v["running"],
                num_waiting_reqs=v["waiting"],
                num_used_tokens=int(v["usage"] * self.max_total_tokens),
                max_total_num_tokens=self.max_total_tokens,
                token_usage=v["usage"],
            )
            loads.append(snap.to_dict())
        return {
            "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "version": __version__,
            "accelerator": None,
            "num_accelerators": 1,
            "loads": loads,
        }

    def render(self):
        with self._lock:
            load = {r: dict(v) for r, v in self._load.items()}
        out = []
        m = self.model
        if self.kind == "vllm":
            help_ = {
                "vllm:num_requests_running": "Number of requests in model execution batches.",
                "vllm:num_requests_waiting": "Number of requests waiting to be processed.",
                "vllm:kv_cache_usage_perc": "KV-cache usage. 1 means 100 percent usage.",
            }
            keys = {"vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting",
                    "vllm:kv_cache_usage_perc": "usage"}
            for name in VLLM_GAUGES:
                out.append("# HELP %s %s" % (name, help_[name]))
                out.append("# TYPE %s gauge" % name)
                for r in range(self.dp_size):
                    out.append('%s{engine="%d",model_name="%s"} %s' % (name, r, m, float(load[r][keys[name]])))
            out.append("# HELP %s Information of the LLMEngine CacheConfig" % VLLM_INFO)
            out.append("# TYPE %s gauge" % VLLM_INFO)
            for r in range(self.dp_size):
                out.append(
                    '%s{block_size="%d",cache_dtype="auto",enable_prefix_caching="True",engine="%d",'
                    'gpu_memory_utilization="0.9",num_cpu_blocks="None",num_gpu_blocks="%d"} 1.0'
                    % (VLLM_INFO, self.block_size, r, self.num_gpu_blocks)
                )
        else:
            for name in SGLANG_GAUGES:
                out.append("# HELP %s %s" % (name, name.split(":", 1)[1].replace("_", " ")))
                out.append("# TYPE %s gauge" % name)
                for r in range(self.dp_size):
                    v = load[r]
                    val = {
                        "sglang:num_running_reqs": v["running"],
                        "sglang:num_queue_reqs": v["waiting"],
                        "sglang:token_usage": v["usage"],
                        "sglang:num_used_tokens": int(v["usage"] * self.max_total_tokens),
                        "sglang:max_total_num_tokens": self.max_total_tokens,
                    }[name]
                    out.append(
                        '%s{dp_rank="%d",model_name="%s",pp_rank="0",tp_rank="0"} %s' % (name, r, m, float(val))
                    )
        return "\n".join(out) + "\n"

    def close(self):
        self._httpd.shutdown()
        self._httpd.server_close()
