#!/usr/bin/env bash
# kafka-server-start.sh server.properties [--override property=value]...: the broker in the
# foreground, logging to stdout.  Its heap is KAFKA_HEAP_OPTS, by default 384 MB as the nodes of
# `streamshop kafka-cluster` (Kafka's own default, 1 GB, is a lot for three nodes on one host).
set -eu

if [ $# -lt 1 ]; then
  echo "USAGE: $0 server.properties [--override property=value]*" >&2
  exit 1
fi
export KAFKA_HEAP_OPTS=${KAFKA_HEAP_OPTS:--Xmx384m -Xms384m}
export KAFKA_LOG4J_OPTS=${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties}
exec /opt/kafka/bin/kafka-run-class.sh kafka.Kafka "$@"
