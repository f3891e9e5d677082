#!/bin/sh
# kafka-run-class.sh CLASS ARGS...: runs a Kafka tool from /opt/kafka/libs with a small heap and
# a quick-starting JIT (the health check runs one every few seconds).
exec java -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Djava.awt.headless=true \
  -Dlog4j2.configurationFile=/opt/kafka/config/log4j2-tools.yaml -cp '/opt/kafka/libs/*' "$@"
