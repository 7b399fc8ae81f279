"""Leaders, replica assignments and log directories: ElectLeaders, AlterPartitionReassignments,
ListPartitionReassignments and AlterReplicaLogDirs, answered as Kafka answers them for a cluster
of one broker.

The broker is every partition's only replica, its preferred leader and its leader, and it has
one log directory, its data dir.  So an election is never needed, the only assignment a
partition can have is the one it has (and no reassignment is ever in progress), and a replica can
only be "moved" to the directory it is in.  Each answer is Kafka's for that state, error codes
and messages included, so `kafka-leader-election`, `kafka-reassign-partitions` and
`kafka-log-dirs` run against the broker as against a one-broker Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from broker.handlers.base import Messages, RequestContext, Serial
from broker.handlers.services import HasNodeId, HasSecurity, HasStore, VisibleTopics
from broker.handlers.stepped import Steps, stepped
from broker.protocol.codec import build, nested
from broker.protocol.errors import ErrorCode
from broker.security.acls import Operation

if TYPE_CHECKING:
    from broker.handlers.kio_types import (
        AlterPartitionReassignmentsRequest,
        AlterPartitionReassignmentsResponse,
        AlterReplicaLogDirsRequest,
        AlterReplicaLogDirsResponse,
        ElectLeadersRequest,
        ElectLeadersResponse,
        ListPartitionReassignmentsRequest,
        ListPartitionReassignmentsResponse,
    )

ELECT_LEADERS: Messages[ElectLeadersRequest, ElectLeadersResponse] = Messages(43, 0, 2)
# v1 (KIP-860's AllowReplicationFactorChange) is Kafka 4.1's.
ALTER_REASSIGNMENTS: Messages[AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse] = Messages(
    45, 0, 1
)
LIST_REASSIGNMENTS: Messages[ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse] = Messages(46, 0, 0)
# Kafka 4.0 removed v0 (KIP-896).
ALTER_REPLICA_LOG_DIRS: Messages[AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse] = Messages(34, 1, 2)

PREFERRED, UNCLEAN = 0, 1  # ElectionType
_NOT_NEEDED = "Leader election not needed for topic partition."


class ReplicasBroker(HasSecurity, HasStore, HasNodeId, VisibleTopics, Protocol):
    """What the replica requests use of the broker."""

    @property
    def data_dir(self) -> Path: ...


def _partition_error(broker: ReplicasBroker, topic: str, partition: int) -> tuple[ErrorCode, str] | None:
    """Kafka's controller's words for a partition that does not exist, else None."""
    if broker.store.get(topic) is None:
        return ErrorCode.unknown_topic_or_partition, f"No such topic as {topic}"
    if broker.store.partition_log(topic, partition) is None:
        return ErrorCode.unknown_topic_or_partition, f"No such partition as {topic}-{partition}"
    return None


def elect_leaders(
    broker: ReplicasBroker, ctx: RequestContext, request: ElectLeadersRequest
) -> ElectLeadersResponse | Serial:
    """Every partition already has its preferred leader, and a leader: ELECTION_NOT_NEEDED.  Asked
    for every partition (a null list), Kafka answers every topic and leaves out the partitions
    that need no election: here, all of them."""
    asked = request.topic_partitions
    entries = len(broker.store.topics) if asked is None else sum(1 + len(t.partitions) for t in asked)
    return stepped(_elections(broker, ctx, request), entries)


def _elections(
    broker: ReplicasBroker, ctx: RequestContext, request: ElectLeadersRequest
) -> Steps[ElectLeadersResponse]:
    """Each partition looked up on its own, the loop free between steps of them."""
    cls = ELECT_LEADERS.response(ctx.api_version)
    topic_cls = nested(cls, "ReplicaElectionResult")
    part_cls = nested(cls, "PartitionResult")
    election = getattr(request, "election_type", PREFERRED)  # v0 has only preferred elections
    asked = request.topic_partitions
    code: ErrorCode | None = None
    if not broker.security.cluster(ctx.session, Operation.ALTER):
        code = ErrorCode.cluster_authorization_failed
    elif election not in (PREFERRED, UNCLEAN):
        code = ErrorCode.invalid_request
    if code is not None:  # refused: each partition asked answered with the error
        refused = []
        for t in asked or ():
            partitions = []
            for p in t.partitions:
                yield
                partitions.append(build(part_cls, partition_id=p, error_code=code, error_message=None))
            yield
            refused.append(build(topic_cls, topic=t.topic, partition_result=tuple(partitions)))
        return build(cls, throttle_time=0, error_code=code, replica_election_results=tuple(refused))
    if asked is None:
        every = []
        for topic in broker.visible_topics():
            yield
            every.append(build(topic_cls, topic=topic.name, partition_result=()))
        return build(cls, throttle_time=0, error_code=ErrorCode.none, replica_election_results=tuple(every))
    results = []
    for t in asked:
        partitions = []
        for p in t.partitions:
            yield
            code, message = _partition_error(broker, t.topic, p) or (ErrorCode.election_not_needed, _NOT_NEEDED)
            partitions.append(build(part_cls, partition_id=p, error_code=code, error_message=message))
        yield
        results.append(build(topic_cls, topic=t.topic, partition_result=tuple(partitions)))
    return build(cls, throttle_time=0, error_code=ErrorCode.none, replica_election_results=tuple(results))


def _reassignment_error(
    broker: ReplicasBroker, topic: str, partition: int, replicas: Iterable[int] | None
) -> tuple[ErrorCode, str | None]:
    if broker.store.get(topic) is None:
        return ErrorCode.unknown_topic_or_partition, f"Unable to find a topic named {topic}."
    if broker.store.partition_log(topic, partition) is None:
        return ErrorCode.unknown_topic_or_partition, f"Unable to find partition {topic}:{partition}."
    if replicas is None:  # a cancellation
        return ErrorCode.no_reassignment_in_progress, "No partition reassignment is in progress."
    target = list(replicas)
    if not target:
        return ErrorCode.invalid_replica_assignment, "The manual partition assignment includes an empty replica list."
    seen: set[int] = set()
    for replica in target:
        if replica in seen:
            return (
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes the broker {replica} more than once.",
            )
        seen.add(replica)
        if replica != broker.node_id:
            return (
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes broker {replica}, but no such broker is registered.",
            )
    return ErrorCode.none, None  # [this broker]: the assignment it has, nothing to move


def alter_partition_reassignments(
    broker: ReplicasBroker, ctx: RequestContext, request: AlterPartitionReassignmentsRequest
) -> AlterPartitionReassignmentsResponse | Serial:
    entries = sum(1 + len(t.partitions) for t in request.topics)
    return stepped(_reassignments(broker, ctx, request), entries)


def _reassignments(
    broker: ReplicasBroker, ctx: RequestContext, request: AlterPartitionReassignmentsRequest
) -> Steps[AlterPartitionReassignmentsResponse]:
    """Each partition judged on its own, the loop free between steps of them."""
    cls = ALTER_REASSIGNMENTS.response(ctx.api_version)
    topic_cls = nested(cls, "ReassignableTopicResponse")
    part_cls = nested(cls, "ReassignablePartitionResponse")
    allowed = broker.security.cluster(ctx.session, Operation.ALTER)
    top = ErrorCode.none if allowed else ErrorCode.cluster_authorization_failed
    responses = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            yield
            code, message = (
                _reassignment_error(broker, topic.name, p.partition_index, p.replicas) if allowed else (top, None)
            )
            partitions.append(
                build(part_cls, partition_index=p.partition_index, error_code=code, error_message=message)
            )
        yield
        responses.append(build(topic_cls, name=topic.name, partitions=tuple(partitions)))
    return build(
        cls,
        throttle_time=0,
        error_code=top,
        error_message=None,
        allow_replication_factor_change=getattr(request, "allow_replication_factor_change", True),
        responses=tuple(responses),
    )


def list_partition_reassignments(
    broker: ReplicasBroker, ctx: RequestContext, request: ListPartitionReassignmentsRequest
) -> ListPartitionReassignmentsResponse:
    """No reassignment is ever in progress: the list is empty, whichever topics were asked for."""
    cls = LIST_REASSIGNMENTS.response(ctx.api_version)
    allowed = broker.security.cluster(ctx.session, Operation.DESCRIBE)
    code = ErrorCode.none if allowed else ErrorCode.cluster_authorization_failed
    return build(cls, throttle_time=0, error_code=code, error_message=None, topics=())


def alter_replica_log_dirs(
    broker: ReplicasBroker, ctx: RequestContext, request: AlterReplicaLogDirsRequest
) -> AlterReplicaLogDirsResponse:
    """A replica may be "moved" only to the log directory it is in (a no-op): any other path is
    LOG_DIR_NOT_FOUND, and a partition the broker does not host REPLICA_NOT_AVAILABLE, as Kafka."""
    cls = ALTER_REPLICA_LOG_DIRS.response(ctx.api_version)
    topic_cls = nested(cls, "AlterReplicaLogDirTopicResult")
    part_cls = nested(cls, "AlterReplicaLogDirPartitionResult")
    allowed = broker.security.cluster(ctx.session, Operation.ALTER)
    log_dir = str(broker.data_dir.absolute())  # the path DescribeLogDirs reports
    results: dict[str, dict[int, ErrorCode]] = {}
    for asked in request.dirs:
        for topic in asked.topics:
            for p in topic.partitions:
                if not allowed:
                    code = ErrorCode.cluster_authorization_failed
                elif asked.path != log_dir:
                    code = ErrorCode.log_dir_not_found
                elif _partition_error(broker, topic.name, p) is not None:
                    code = ErrorCode.replica_not_available
                else:
                    code = ErrorCode.none
                results.setdefault(topic.name, {})[p] = code
    topics = tuple(
        build(
            topic_cls,
            topic_name=name,
            partitions=tuple(build(part_cls, partition_index=p, error_code=c) for p, c in parts.items()),
        )
        for name, parts in results.items()
    )
    return build(cls, throttle_time=0, results=topics)
