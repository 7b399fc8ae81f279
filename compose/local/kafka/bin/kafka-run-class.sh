#!/usr/bin/env bash
# kafka-run-class.sh CLASS [ARGS...]: one of Kafka's main classes from /opt/kafka/libs, with the
# environment variables Kafka's own script of this name reads: KAFKA_HEAP_OPTS (default
# -Xmx256M), KAFKA_JVM_PERFORMANCE_OPTS (default: G1, as Kafka's), KAFKA_GC_LOG_OPTS,
# KAFKA_JMX_OPTS, KAFKA_LOG4J_OPTS (default: the tools' logging, WARN and above to stderr),
# KAFKA_OPTS, CLASSPATH (after the libs) and JAVA_HOME.  Its -daemon, -name and -loggc options
# are not supported: a container runs one process in the foreground.
set -euf  # -f: the *_OPTS variables are split into words, never expanded as file names

if [ $# -lt 1 ]; then
  echo "USAGE: $0 classname [opts]" >&2
  exit 1
fi
class=$1
shift

java=java
[ -z "${JAVA_HOME-}" ] || java=$JAVA_HOME/bin/java
heap=${KAFKA_HEAP_OPTS:--Xmx256M}
performance=${KAFKA_JVM_PERFORMANCE_OPTS:--server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true}
log4j=${KAFKA_LOG4J_OPTS:--Dlog4j2.configurationFile=/opt/kafka/config/tools-log4j2.properties}

# shellcheck disable=SC2086  # word splitting of the options is intended, as in Kafka's script
exec "$java" $heap $performance ${KAFKA_GC_LOG_OPTS-} ${KAFKA_JMX_OPTS-} $log4j \
  -cp "/opt/kafka/libs/*${CLASSPATH:+:$CLASSPATH}" ${KAFKA_OPTS-} "$class" "$@"
