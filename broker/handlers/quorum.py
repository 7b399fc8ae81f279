"""DescribeQuorum (KIP-595, KIP-836, KIP-853): the metadata quorum, as a single combined KRaft
node (broker and controller in one) answers it: `__cluster_metadata` partition 0, led by this
node, which is its one voter and has no observers.  The high watermark and the voter's log end
offset are the metadata log's.  `kafka-metadata-quorum describe --status` reads it.

The node never holds an election, so its leader epoch is the first one, 1; and its voter is a
static one, with no directory id.  v2's nodes list this node with the listeners it serves
clients on: it has no separate controller listener.  DESCRIBE on the cluster is required.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Protocol

from broker.clock import Clock
from broker.handlers.base import Messages, RequestContext
from broker.handlers.services import HasNodeId, HasSecurity, HasStore
from broker.metadata import METADATA_TOPIC
from broker.protocol.codec import build, nested, nested_or_none
from broker.protocol.errors import ErrorCode
from broker.security.acls import Operation

if TYPE_CHECKING:
    from kio.static.protocol import Entity

    from broker.handlers.kio_types import DescribeQuorumRequest, DescribeQuorumResponse

API_KEY = 55
MESSAGES: Messages[DescribeQuorumRequest, DescribeQuorumResponse] = Messages(API_KEY, 0, 2)
LEADER_EPOCH = 1
_NO_DIRECTORY = uuid.UUID(int=0)


class QuorumBroker(HasSecurity, HasStore, HasNodeId, Protocol):
    """What DescribeQuorum uses of the broker."""

    @property
    def clock(self) -> Clock: ...

    @property
    def advertised(self) -> tuple[str, int]: ...

    @property
    def first_listener(self) -> str: ...

    @property
    def endpoints(self) -> dict[str, tuple[str, int]]: ...


def handle(broker: QuorumBroker, ctx: RequestContext, request: DescribeQuorumRequest) -> DescribeQuorumResponse:
    cls = MESSAGES.response(ctx.api_version)
    if not broker.security.cluster(ctx.session, Operation.DESCRIBE):
        return _error(cls, ErrorCode.cluster_authorization_failed)
    # As Kafka's raft client: exactly the metadata partition, else UNKNOWN_TOPIC_OR_PARTITION.
    topics = request.topics
    if not (
        len(topics) == 1
        and topics[0].topic_name == METADATA_TOPIC
        and len(topics[0].partitions) == 1
        and topics[0].partitions[0].partition_index == 0
    ):
        return _error(cls, ErrorCode.unknown_topic_or_partition)
    meta_log = broker.store.meta_log
    now = broker.clock.now_ms()
    node = broker.node_id
    # The leader reports itself fetched and caught up now, as Kafka's leader does.
    voter = build(
        nested(cls, "ReplicaState"),
        replica_id=node,
        replica_directory_id=_NO_DIRECTORY,
        log_end_offset=meta_log.next_offset,
        last_fetch_timestamp=now,
        last_caught_up_timestamp=now,
    )
    partition = build(
        nested(cls, "PartitionData"),
        partition_index=0,
        error_code=ErrorCode.none,
        error_message=None,
        leader_id=node,
        leader_epoch=LEADER_EPOCH,
        high_watermark=meta_log.high_watermark,
        current_voters=(voter,),
        observers=(),
    )
    topic = build(nested(cls, "TopicData"), topic_name=METADATA_TOPIC, partitions=(partition,))
    nodes: tuple[Entity, ...] = ()
    node_cls, listener_cls = nested_or_none(cls, "Node"), nested_or_none(cls, "Listener")
    if node_cls is not None and listener_cls is not None:
        listeners = tuple(
            build(listener_cls, name=name, host=host, port=port)
            for name, (host, port) in sorted(_endpoints(broker).items())
        )
        nodes = (build(node_cls, node_id=node, listeners=listeners),)
    return build(cls, error_code=ErrorCode.none, error_message=None, topics=(topic,), nodes=nodes)


def _endpoints(broker: QuorumBroker) -> dict[str, tuple[str, int]]:
    return broker.endpoints or {broker.first_listener: broker.advertised}


def _error(cls: type[DescribeQuorumResponse], error: ErrorCode) -> DescribeQuorumResponse:
    return build(cls, error_code=error, error_message=None, topics=(), nodes=())
