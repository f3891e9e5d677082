#!/usr/bin/env bash
# Stops the test broker whose state directory is SLUICE_TEST_KAFKA_STATE:
# SIGTERM (controlled shutdown), SIGKILL after 30 s. Idempotent: succeeds if the
# broker is not running. Data stays, so kafka-start.sh brings the same log back.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$here/common.sh"

state="${SLUICE_TEST_KAFKA_STATE:?not set: run via scripts/test.sh}"
[[ -f "$state/kafka.pid" ]] || exit 0
stop_pid "$(cat "$state/kafka.pid")" kafka "${SLUICE_TEST_KAFKA_STOP_GRACE:-30}"
rm -f "$state/kafka.pid"
