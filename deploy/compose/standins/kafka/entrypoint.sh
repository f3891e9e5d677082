#!/bin/sh
# Writes /opt/kafka/config/server.properties from the environment the way the apache/kafka
# image does (KAFKA_FOO_BAR -> foo.bar; ___ -> -, __ -> _), formats KRaft storage with
# CLUSTER_ID on first start, then runs the broker in the foreground.
set -eu
conf=/opt/kafka/config/server.properties
: >"$conf"
env | sort | while IFS='=' read -r name value; do
  case "$name" in
    KAFKA_HEAP_OPTS | KAFKA_OPTS | KAFKA_JVM_PERFORMANCE_OPTS | KAFKA_LOG4J_OPTS | KAFKA_JMX_OPTS | KAFKA_DEBUG) continue ;;
    KAFKA_*) ;;
    *) continue ;;
  esac
  key="$(printf '%s' "${name#KAFKA_}" | sed -e 's/___/-/g' -e 's/__/@/g' -e 's/_/./g' -e 's/@/_/g' | tr '[:upper:]' '[:lower:]')"
  printf '%s=%s\n' "$key" "$value" >>"$conf"
done
if [ -z "${CLUSTER_ID:-}" ]; then
  echo "kafka stand-in: CLUSTER_ID is not set: set a base64url UUID in the service's environment" >&2
  exit 1
fi
grep -q '^log.dirs=' "$conf" || echo "log.dirs=/var/lib/kafka/data" >>"$conf"
dirs="$(sed -n 's/^log\.dirs=//p' "$conf")"
# shellcheck disable=SC2046 # log.dirs is a comma-separated list of paths without spaces
mkdir -p $(echo "$dirs" | tr ',' ' ')
java -Xmx256m -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.yaml -cp '/opt/kafka/libs/*' \
  kafka.tools.StorageTool format --ignore-formatted -t "$CLUSTER_ID" -c "$conf"
# shellcheck disable=SC2086 # the heap options are a list of JVM flags
exec java ${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m} -XX:+UseG1GC -Djava.awt.headless=true \
  -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.yaml -cp '/opt/kafka/libs/*' \
  kafka.Kafka "$conf"
