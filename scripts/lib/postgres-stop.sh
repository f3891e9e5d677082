#!/usr/bin/env bash
# Stops the throwaway test cluster that scripts/test.sh created (fast shutdown:
# clients are disconnected). Reads SLUICE_TEST_PG_BIN, SLUICE_TEST_PG_USER and
# SLUICE_TEST_PG_DATADIR. Idempotent: succeeds if the cluster is not running.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$here/common.sh"
# shellcheck source=postgres.sh
source "$here/postgres.sh"

: "${SLUICE_TEST_PG_BIN:?not set: run via scripts/test.sh}"
: "${SLUICE_TEST_PG_USER:?not set: run via scripts/test.sh}"
: "${SLUICE_TEST_PG_DATADIR:?not set: run via scripts/test.sh}"

[[ -d "$SLUICE_TEST_PG_DATADIR" ]] || exit 0
cd "$(dirname "$SLUICE_TEST_PG_DATADIR")"
if ! pg_as_owner "$SLUICE_TEST_PG_BIN/pg_ctl" -D "$SLUICE_TEST_PG_DATADIR" status >/dev/null 2>&1; then
  exit 0
fi
if ! pg_as_owner "$SLUICE_TEST_PG_BIN/pg_ctl" -D "$SLUICE_TEST_PG_DATADIR" -m fast -w -t 30 stop >/dev/null; then
  log "postgres: fast stop failed, trying immediate"
  pg_as_owner "$SLUICE_TEST_PG_BIN/pg_ctl" -D "$SLUICE_TEST_PG_DATADIR" -m immediate -w -t 30 stop >/dev/null
fi
