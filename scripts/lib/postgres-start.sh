#!/usr/bin/env bash
# Starts (or restarts after postgres-stop.sh) the throwaway test cluster that
# scripts/test.sh created. Reads SLUICE_TEST_PG_BIN, SLUICE_TEST_PG_USER,
# SLUICE_TEST_PG_DATADIR, SLUICE_TEST_PG_PORT and SLUICE_TEST_PG_LOG.
# Idempotent: succeeds at once if the cluster is already running.
# Returns only once the server accepts TCP connections.
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
: "${SLUICE_TEST_PG_PORT:?not set: run via scripts/test.sh}"
pglog="${SLUICE_TEST_PG_LOG:-$(dirname "$SLUICE_TEST_PG_DATADIR")/postgres.log}"

if pg_as_owner "$SLUICE_TEST_PG_BIN/pg_ctl" -D "$SLUICE_TEST_PG_DATADIR" status >/dev/null 2>&1; then
  exit 0
fi
cd "$(dirname "$SLUICE_TEST_PG_DATADIR")"
if ! pg_as_owner "$SLUICE_TEST_PG_BIN/pg_ctl" -D "$SLUICE_TEST_PG_DATADIR" -l "$pglog" \
  -w -t 60 start >/dev/null; then
  show_log_tail "$pglog"
  die "postgres: pg_ctl start failed (data dir $SLUICE_TEST_PG_DATADIR)"
fi
for ((i = 0; i < 100; i++)); do
  port_open 127.0.0.1 "$SLUICE_TEST_PG_PORT" && exit 0
  sleep 0.1
done
show_log_tail "$pglog"
die "postgres: started but 127.0.0.1:$SLUICE_TEST_PG_PORT accepts no connection"
