#!/usr/bin/env bash
# Live peer comparison (make peer-bench): the real SGLang router (sglang-router from PyPI, in a
# venv cached under ${SLUICE_CACHE:-~/.cache/sluice}, pins in scripts/peer/requirements.txt) and
# sluice's gateway + decider + enginelink, against the same simulated SGLang engines (sluice
# simengine processes), with the same trace replay client (tests/peer), in interleaved rounds.
# One markdown table goes to stdout and to PEER_OUT (BENCHMARKS-peer.md).
#
# Usage: scripts/peer-bench.sh [peerbench flags]     e.g. -window 5m -speed 10 -rounds 2
#   (go run ./tests/peer/cmd/peerbench -h lists them: -trace, -window, -speed, -engines,
#   -rounds, -max-tokens-cap, -timeout, -out, -sglang-policies, -sluice-policies, ...)
#        scripts/peer-bench.sh -mode closed      closed-loop throughput: 1/16/64 clients of small chat
#   completions, req/s, p50/p99 and CPU ms per request per system (-clients, -duration, -warmup,
#   -closed-speed, -baseline-sluice BIN for a second sluice build; sluice policies POLICY+embedded
#   run the gateway with -embed-decider). The engines' and the load generator's CPU per request
#   are shown apart, with the throughput ratio that the shared cores allow.
#
# Environment:
#   PEER_TRACE                 trace file (default testdata/traces/conversation_trace.jsonl)
#   PEER_OUT                   output file (default BENCHMARKS-peer.md in the repository root)
#   SLUICE_TEST_KAFKA_BROKERS  use this Kafka instead of starting one (scripts/lib/kafka.sh)
#   SLUICE_CACHE               cache dir (venv, Kafka jars)
#   SLUICE_TEST_KEEP=1         keep the work dir (logs of every process) after the run
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=lib/common.sh
source "$ROOT/scripts/lib/common.sh"
# shellcheck source=lib/kafka.sh
source "$ROOT/scripts/lib/kafka.sh"

STATE_ROOT=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  if [[ -n "$STATE_ROOT" ]]; then
    kafka_teardown
    if [[ "${SLUICE_TEST_KEEP:-}" == 1 ]]; then
      log "kept $STATE_ROOT (SLUICE_TEST_KEEP=1)"
    else
      rm -rf "$STATE_ROOT"
    fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT
trap 'log "terminated"; exit 143' TERM

command -v go >/dev/null || die "go is not on PATH"

# The router's venv: the console entry point imports the whole package, MiniLB included.
peer_check() { "$1/bin/python" -m sglang_router.launch_router --help >/dev/null; }
log "peer-bench: sglang-router venv"
pinned_venv peer "$ROOT/scripts/peer/requirements.txt" peer_check
ROUTER_PY="$PINNED_VENV/bin/python"

STATE_ROOT="$(mktemp -d "${TMPDIR:-/tmp}/sluice-peer.XXXXXX")"
chmod 0755 "$STATE_ROOT"
KAFKA_KIND="external Kafka at ${SLUICE_TEST_KAFKA_BROKERS:-}"
KAFKA_PID=0
if [[ -z "${SLUICE_TEST_KAFKA_BROKERS:-}" ]]; then
  log "peer-bench: starting a real Apache Kafka broker (scripts/lib/kafka.sh)"
  kafka_setup "$STATE_ROOT"
  KAFKA_KIND="a real single-node Apache Kafka $(kafka_version) broker, KRaft, started by scripts/lib/kafka.sh"
  KAFKA_PID="$(cat "$SLUICE_TEST_KAFKA_STATE/kafka.pid")"
fi

log "peer-bench: go build sluice and peerbench"
go build -o "$STATE_ROOT/sluice" ./services/sluice
go build -o "$STATE_ROOT/peerbench" ./tests/peer/cmd/peerbench

log "peer-bench: running (progress below; logs in $STATE_ROOT/work)"
"$STATE_ROOT/peerbench" -sluice "$STATE_ROOT/sluice" -router-python "$ROUTER_PY" \
  -kafka-brokers "$SLUICE_TEST_KAFKA_BROKERS" -kafka-pid "$KAFKA_PID" -kafka-kind "$KAFKA_KIND" \
  -work-dir "$STATE_ROOT/work" -out "${PEER_OUT:-$ROOT/BENCHMARKS-peer.md}" "$@"
