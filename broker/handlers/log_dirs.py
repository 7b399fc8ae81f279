"""DescribeLogDirs: bytes on disk per partition, and the volume's space (v4+).

Dashboards read partition sizes this way because it works unchanged on Apache Kafka.
The broker has one log directory, its data dir, so every answer holds one result.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from broker.handlers.base import Messages, RequestContext
from broker.handlers.services import HasLogDir, HasSecurity, VisibleTopics
from broker.protocol.codec import build, nested
from broker.protocol.errors import ErrorCode
from broker.security.acls import Operation

if TYPE_CHECKING:
    from broker.handlers.kio_types import DescribeLogDirsRequest, DescribeLogDirsResponse

API_KEY = 35
# Kafka 4.0 removed v0 (KIP-896); v5 (IsCordoned) is newer than the 4.x baseline.
MIN_VERSION, MAX_VERSION = 1, 4
MESSAGES: Messages[DescribeLogDirsRequest, DescribeLogDirsResponse] = Messages(API_KEY, MIN_VERSION, MAX_VERSION)


class LogDirsBroker(HasSecurity, HasLogDir, VisibleTopics, Protocol):
    """What DescribeLogDirs uses of the broker."""

    @property
    def data_dir(self) -> Path: ...


def handle(broker: LogDirsBroker, ctx: RequestContext, request: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    cls = MESSAGES.response(ctx.api_version)
    result_cls = nested(cls, "DescribeLogDirsResult")
    topic_cls = nested(cls, "DescribeLogDirsTopic")
    partition_cls = nested(cls, "DescribeLogDirsPartition")
    if not broker.security.cluster(ctx.session, Operation.DESCRIBE):
        # v3+ carries the error; older versions answer with no log directories, as Kafka does
        return build(cls, throttle_time=0, error_code=ErrorCode.cluster_authorization_failed, results=())
    wanted: dict[str, set[int]] | None = None
    if request.topics is not None:
        wanted = {}
        for asked in request.topics:
            wanted.setdefault(asked.topic, set()).update(asked.partitions)
    topics = []
    # The cluster metadata log is left out: in KRaft it is not one of the LogManager's logs.
    for topic in broker.visible_topics():
        logs = topic.logs if wanted is None else [p for p in topic.logs if p.partition in wanted.get(topic.name, ())]
        # Unknown topics and partitions are simply absent, and so are topics with none of
        # the asked partitions (Kafka filters those since KAFKA-16807).
        if logs:
            partitions = tuple(
                build(
                    partition_cls,
                    partition_index=plog.partition,
                    partition_size=plog.size_bytes,  # Kafka's log.size: the .log files only
                    offset_lag=0,  # one replica: the log end offset is the high watermark
                    is_future_key=False,
                )
                for plog in logs
            )
            topics.append(build(topic_cls, name=topic.name, partitions=partitions))
    log_dir = str(broker.data_dir.absolute())
    if broker.log_dir.offline:
        # As Kafka reports a directory its LogDirFailureChannel took offline: the error, no topics.
        result = build(result_cls, error_code=ErrorCode.kafka_storage_error, log_dir=log_dir, topics=())
        return build(cls, throttle_time=0, error_code=ErrorCode.none, results=(result,))
    try:
        usage = shutil.disk_usage(broker.data_dir)  # one statvfs call
    except OSError:
        result = build(result_cls, error_code=ErrorCode.kafka_storage_error, log_dir=log_dir, topics=())
    else:
        result = build(
            result_cls,
            error_code=ErrorCode.none,
            log_dir=log_dir,
            topics=tuple(topics),
            total_bytes=usage.total,
            usable_bytes=usage.free,  # statvfs f_bavail, like Java's FileStore.getUsableSpace
        )
    return build(cls, throttle_time=0, error_code=ErrorCode.none, results=(result,))
