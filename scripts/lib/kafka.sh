# shellcheck shell=bash
# Single-node Apache Kafka broker (KRaft, combined broker+controller) for the
# integration tests, run from the jars that scripts/kafka/pom.xml names.
# Source after common.sh.
#
# kafka_setup DIR  fetches the jars once into the cache
#                  (${SLUICE_CACHE:-$HOME/.cache/sluice}/kafka-<version>/libs), writes a
#                  config under DIR/kafka, formats storage, starts the broker on free
#                  loopback ports and exports:
#                    SLUICE_TEST_KAFKA_BROKERS  127.0.0.1:PORT (PLAINTEXT listener)
#                    SLUICE_TEST_KAFKA_HOME     the libs directory (java -cp "$HOME/*")
#                    SLUICE_TEST_KAFKA_STATE    state dir: server.properties, data/, kafka.log, kafka.pid
#                    SLUICE_TEST_KAFKA_CONFIG   the server.properties path
#                  kafka-stop.sh / kafka-start.sh stop and restart it from SLUICE_TEST_KAFKA_STATE.
# kafka_teardown   stops the broker (the caller removes DIR).

# kafka_pom prints the path of scripts/kafka/pom.xml.
kafka_pom() { echo "$(cd "$(dirname "${BASH_SOURCE[0]}")/../kafka" && pwd)/pom.xml"; }

# kafka_version prints the kafka.version property of the pom.
kafka_version() {
  sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$(kafka_pom)" | head -n1
}

# kafka_provision makes sure java and the broker jars exist; sets KAFKA_LIBS.
kafka_provision() {
  local pom version cache dir stamp want tmp
  command -v java >/dev/null || apt_install openjdk-17-jre-headless
  java -version 2>&1 | grep -Eq 'version "(1[7-9]|[2-9][0-9])' ||
    die "kafka: need Java 17 or newer for the broker; found: $(java -version 2>&1 | head -n1)"
  pom="$(kafka_pom)"
  version="$(kafka_version)"
  [[ -n "$version" ]] || die "kafka: no <kafka.version> in $pom"
  cache="${SLUICE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/sluice}"
  dir="$cache/kafka-$version"
  KAFKA_LIBS="$dir/libs"
  want="$(sha256sum "$pom" | cut -d' ' -f1)"
  stamp="$dir/pom.sha256"
  mkdir -p "$dir"
  # One fetch at a time per cache, even with concurrent test.sh runs.
  exec {lockfd}>"$dir/.lock"
  flock "$lockfd"
  if [[ -d "$KAFKA_LIBS" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    exec {lockfd}>&-
    log "kafka: using cached jars $KAFKA_LIBS"
    return 0
  fi
  command -v mvn >/dev/null || apt_install maven
  log "kafka: fetching Kafka $version jars from Maven Central into $KAFKA_LIBS"
  tmp="$dir/libs.tmp.$$"
  rm -rf "$tmp"
  if ! mvn -q -B -f "$pom" dependency:copy-dependencies -DoutputDirectory="$tmp" >"$dir/mvn.log" 2>&1; then
    exec {lockfd}>&-
    show_log_tail "$dir/mvn.log" 80
    die "kafka: mvn dependency:copy-dependencies failed"
  fi
  rm -rf "$KAFKA_LIBS"
  mv "$tmp" "$KAFKA_LIBS"
  echo "$want" >"$stamp"
  exec {lockfd}>&-
}

# kafka_cluster_id prints a random KRaft cluster id (16 random bytes, base64url, no padding).
# Ids starting with '-' are drawn again: the storage tool's argument parser would read one as an
# option (a 1-in-64 start-up failure).
kafka_cluster_id() {
  local id
  while :; do
    id=$(head -c16 /dev/urandom | base64 | tr '+/' '-_' | cut -c1-22)
    [[ "$id" == -* ]] || break
  done
  printf '%s\n' "$id"
}

# kafka_setup DIR: see the file comment.
kafka_setup() {
  local root="$1" state p1 p2 ports
  kafka_provision
  state="$root/kafka"
  mkdir -p "$state/data"
  mapfile -t ports < <(free_ports 2)
  p1="${ports[0]}" p2="${ports[1]}"

  cat >"$state/server.properties" <<EOF
# Written by scripts/lib/kafka.sh: throwaway single-node KRaft broker for tests.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$p2
listeners=PLAINTEXT://127.0.0.1:$p1,CONTROLLER://127.0.0.1:$p2
advertised.listeners=PLAINTEXT://127.0.0.1:$p1
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$state/data
num.partitions=4
auto.create.topics.enable=true
# Room for one KV-event record of an SGLang page-size-1 prompt of 100k+ tokens (~1.3 MB); the
# README tells operators to give their KV topic the same (max.message.bytes) and enginelink
# -kafka-max-batch-bytes.
message.max.bytes=16777216
group.initial.rebalance.delay.ms=0
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
EOF
  cat >"$state/log4j2.yaml" <<'EOF'
Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: STDOUT
    Logger:
      - name: org.apache.kafka.common.config.AbstractConfig
        level: WARN
EOF
  cat >"$state/kafka.env" <<EOF
KAFKA_LIBS='$KAFKA_LIBS'
KAFKA_PORT='$p1'
KAFKA_HEAP_OPTS='${SLUICE_TEST_KAFKA_HEAP:--Xms128m -Xmx512m}'
EOF

  log "kafka: formatting storage in $state/data"
  if ! java -Xmx256m -Dlog4j2.configurationFile="$state/log4j2.yaml" -cp "$KAFKA_LIBS/*" \
    kafka.tools.StorageTool format -t "$(kafka_cluster_id)" -c "$state/server.properties" \
    >"$state/format.log" 2>&1; then
    show_log_tail "$state/format.log"
    die "kafka: storage format failed"
  fi
  export SLUICE_TEST_KAFKA_STATE="$state"
  export SLUICE_TEST_KAFKA_HOME="$KAFKA_LIBS"
  export SLUICE_TEST_KAFKA_CONFIG="$state/server.properties"
  "$(dirname "${BASH_SOURCE[0]}")/kafka-start.sh" || die "kafka: broker failed to start"
  export SLUICE_TEST_KAFKA_BROKERS="127.0.0.1:$p1"
  log "kafka: ready at $SLUICE_TEST_KAFKA_BROKERS"
}

# kafka_teardown stops the broker if kafka_setup started one.
kafka_teardown() {
  [[ -n "${SLUICE_TEST_KAFKA_STATE:-}" && -d "${SLUICE_TEST_KAFKA_STATE:-}" ]] || return 0
  "$(dirname "${BASH_SOURCE[0]}")/kafka-stop.sh" || true
}
