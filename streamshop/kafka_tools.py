"""Apache Kafka's command-line tools by the names of their bin/*.sh scripts, run from the
jars `streamshop kafka-cluster fetch` resolves: the same tools against the bundled broker
and a Kafka cluster, for users without a Kafka installation."""

from __future__ import annotations

import subprocess
from pathlib import Path

from streamshop.kafka_jars import resolve, run_java

_T = "org.apache.kafka.tools"
# Each script's main class in Kafka 4.1 (the last line of bin/NAME.sh).
TOOLS: dict[str, str] = {
    "kafka-topics": f"{_T}.TopicCommand",
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-console-producer": f"{_T}.ConsoleProducer",
    "kafka-console-consumer": f"{_T}.consumer.ConsoleConsumer",
    "kafka-consumer-groups": f"{_T}.consumer.group.ConsumerGroupCommand",
    "kafka-get-offsets": f"{_T}.GetOffsetShell",
    "kafka-broker-api-versions": f"{_T}.BrokerApiVersionsCommand",
    "kafka-producer-perf-test": f"{_T}.ProducerPerformance",
    "kafka-consumer-perf-test": f"{_T}.ConsumerPerformance",
    "kafka-delete-records": f"{_T}.DeleteRecordsCommand",
    "kafka-dump-log": "kafka.tools.DumpLogSegments",
    "kafka-metadata-quorum": f"{_T}.MetadataQuorumCommand",
    "kafka-leader-election": f"{_T}.LeaderElectionCommand",
    "kafka-reassign-partitions": f"{_T}.reassign.ReassignPartitionsCommand",
    "kafka-log-dirs": f"{_T}.LogDirsCommand",
    "kafka-cluster": f"{_T}.ClusterTool",
    "kafka-acls": f"{_T}.AclCommand",
    "kafka-transactions": f"{_T}.TransactionsCommand",
}


def run(
    name: str,
    *args: str,
    stdin: str | None = None,
    timeout: float | None = None,
    capture: bool = True,
    lib: Path | None = None,
    heap_mb: int = 192,
) -> subprocess.CompletedProcess[str]:
    """Run tool `name` (a key of TOOLS) with `args` to its end; `capture=False` leaves it this
    process's standard streams (its stdin too, when `stdin` is None)."""
    return run_java(
        lib or resolve(),
        TOOLS[name],
        *args,
        family="kafka-tools",
        heap_mb=heap_mb,
        stdin=stdin,
        timeout=timeout,
        capture=capture,
    )
