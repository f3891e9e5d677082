#!/usr/bin/env bash
# Starts (or restarts after kafka-stop.sh) the test broker whose state directory
# is SLUICE_TEST_KAFKA_STATE (written by scripts/lib/kafka.sh: server.properties,
# kafka.env, data/). Idempotent: succeeds at once if the broker is running.
# Returns once the broker logged "Kafka Server started" and its PLAINTEXT port
# accepts connections; fails after SLUICE_TEST_KAFKA_START_TIMEOUT seconds (120)
# or as soon as the JVM dies, printing the end of its log.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=common.sh
source "$here/common.sh"

state="${SLUICE_TEST_KAFKA_STATE:?not set: run via scripts/test.sh}"
[[ -f "$state/kafka.env" ]] || die "kafka: $state/kafka.env missing: not a test broker state dir"
# shellcheck source=/dev/null
source "$state/kafka.env"
timeout_s="${SLUICE_TEST_KAFKA_START_TIMEOUT:-120}"
logf="$state/kafka.log"

if [[ -f "$state/kafka.pid" ]] && pid_alive "$(cat "$state/kafka.pid")"; then
  exit 0
fi
# Keep earlier runs' logs (a restart test may want them) but wait on a fresh file.
if [[ -s "$logf" ]]; then cat "$logf" >>"$state/kafka.previous.log"; fi
: >"$logf"

# setsid: the broker must not get the terminal's Ctrl-C before test.sh's trap stops
# it in order; all fds redirected so a Go test calling this script is not held open.
# shellcheck disable=SC2086 # KAFKA_HEAP_OPTS is a list of JVM flags.
setsid java $KAFKA_HEAP_OPTS -XX:+UseG1GC -Djava.awt.headless=true \
  -Dlog4j2.configurationFile="$state/log4j2.yaml" \
  -cp "$KAFKA_LIBS/*" kafka.Kafka "$state/server.properties" \
  </dev/null >>"$logf" 2>&1 &
pid=$!
echo "$pid" >"$state/kafka.pid"

deadline=$((SECONDS + timeout_s))
while ((SECONDS < deadline)); do
  if ! pid_alive "$pid"; then
    show_log_tail "$logf" 80
    die "kafka: broker JVM (pid $pid) exited during start-up"
  fi
  if grep -q 'Kafka Server started' "$logf" && port_open 127.0.0.1 "$KAFKA_PORT"; then
    exit 0
  fi
  sleep 0.2
done
show_log_tail "$logf" 80
stop_pid "$pid" kafka 10
rm -f "$state/kafka.pid"
die "kafka: broker not ready within ${timeout_s}s"
