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
#
# Tests read the services through internal/testenv. Tests that stop and restart a
# service (testenv.StopKafka, ...) must be named TestOutage*: they are skipped in
# the main, parallel run and run afterwards one package at a time (SLUICE_TEST_OUTAGE=1),
# so an outage never hits another package's tests.
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
# shellcheck source=lib/pyenv.sh
source "$ROOT/scripts/lib/pyenv.sh"

STEP="setup"
DONE=()
STATE_ROOT=""
START=$SECONDS

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
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

# --- vet first: fails fast, needs no services --------------------------------------
STEP="go vet"
log "go vet ${PKGS[*]}"
go vet "${PKGS[@]}"
DONE+=("vet")

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
  # The engine interop test's Python (real vLLM/SGLang wheels), cached; only when it runs.
  if pyenv_wanted "${PKGS[@]}"; then
    STEP="python venv"
    pyenv_setup
    DONE+=("pyenv")
  fi
fi

# --- tests -----------------------------------------------------------------------------
STEP="go test"
unset SLUICE_TEST_OUTAGE
RACE=(-race)
if [[ "${SLUICE_TEST_RACE:-1}" == 0 ]]; then
  [[ -z "${CI:-}" ]] || die "SLUICE_TEST_RACE=0 is for benchmarks on a developer machine; CI always runs -race"
  RACE=()
fi
log "go test ${RACE[*]} -count=1 -p 2 -timeout 30m ${TEST_ARGS[*]}"
go test "${RACE[@]}" -count=1 -p 2 -timeout 30m "${TEST_ARGS[@]}"
DONE+=("tests")

# Outage phase: packages holding TestOutage* tests, serially, with only those tests.
STEP="outage tests"
mapfile -t dirs < <(go list -e -f '{{.Dir}}' "${PKGS[@]}" 2>/dev/null || true)
OUTAGE_PKGS=()
for d in "${dirs[@]}"; do
  [[ -n "$d" ]] || continue
  if grep -lqE '^func TestOutage[A-Za-z0-9_]*\(' "$d"/*_test.go 2>/dev/null; then
    OUTAGE_PKGS+=("./${d#"$ROOT"/}")
  fi
done
if [[ "${SLUICE_TEST_NO_SERVICES:-}" == 1 ]]; then
  OUTAGE_PKGS=()
fi
if ((${#OUTAGE_PKGS[@]} > 0)); then
  log "outage phase: go test -race -count=1 -p 1 -run '^TestOutage' ${OUTAGE_PKGS[*]}"
  SLUICE_TEST_OUTAGE=1 go test -race -count=1 -p 1 -timeout 30m -run '^TestOutage' "${OUTAGE_PKGS[@]}"
  DONE+=("outage-tests")
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
