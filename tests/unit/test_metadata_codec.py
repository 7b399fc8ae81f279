"""The Metadata response spliced from cached topic encodings is byte for byte what kio
encodes for the whole response, in every version the broker speaks."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.core import Broker
from broker.handlers.base import ALL_TOPIC_OPERATIONS, NOT_REQUESTED_OPERATIONS
from broker.handlers.metadata import MAX_VERSION, MIN_VERSION, _response
from broker.protocol.codec import build, encode_body, nested, response_type
from broker.protocol.errors import ErrorCode

_ZERO = uuid.UUID(int=0)


def _kio_response(broker: Broker, version: int, entries: list[Any], include_ops: bool) -> bytes:
    cls = response_type(3, version)
    topic_cls = nested(cls, "MetadataResponseTopic")
    partition_cls = nested(cls, "MetadataResponsePartition")
    broker_cls = nested(cls, "MetadataResponseBroker")
    node = broker.node_id
    topics = []
    for name, topic_id, code, topic in entries:
        partitions = tuple(
            build(
                partition_cls,
                error_code=ErrorCode.none,
                partition_index=p,
                leader_id=node,
                leader_epoch=0,
                replica_nodes=(node,),
                isr_nodes=(node,),
                offline_replicas=(),
            )
            for p in range(topic.partitions if topic else 0)
        )
        topics.append(
            build(
                topic_cls,
                error_code=code,
                name=name,
                topic_id=topic_id or _ZERO,
                is_internal=bool(topic and topic.internal),
                partitions=partitions,
                topic_authorized_operations=ALL_TOPIC_OPERATIONS if include_ops else NOT_REQUESTED_OPERATIONS,
            )
        )
    host, port = broker.advertised
    return encode_body(
        build(
            cls,
            throttle_time=0,
            brokers=(build(broker_cls, node_id=node, host=host, port=port, rack=None),),
            cluster_id=broker.cluster_id,
            controller_id=node,
            topics=tuple(topics),
            cluster_authorized_operations=NOT_REQUESTED_OPERATIONS,
            error_code=ErrorCode.none,
        )
    )


@pytest.fixture
def broker(tmp_path: Path) -> Broker:
    b = Broker(BrokerConfig(data_dir=tmp_path / "b"))
    b.store.create_topic("orders", 6, {})
    b.store.create_topic("__consumer_offsets", 3, {}, internal=True)
    return b


@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
@pytest.mark.parametrize("include_ops", [False, True])
def test_spliced_metadata_equals_kios_encoding(broker: Broker, version: int, include_ops: bool) -> None:
    orders = broker.store.get("orders")
    internal = broker.store.get("__consumer_offsets")
    assert orders is not None
    assert internal is not None
    entries = [
        ("orders", orders.topic_id, ErrorCode.none, orders),
        ("__consumer_offsets", internal.topic_id, ErrorCode.none, internal),
        ("missing", None, ErrorCode.unknown_topic_or_partition, None),
    ]
    if version >= 12:
        entries.append((None, uuid.uuid4(), ErrorCode.unknown_topic_id, None))
    listener = broker.first_listener
    ops = (lambda name: ALL_TOPIC_OPERATIONS) if include_ops else None
    for _ in range(2):  # the second time from the cache
        raw = _response(broker, version, listener, entries, ops=ops, cluster_ops=NOT_REQUESTED_OPERATIONS)
        assert b"".join(raw.parts) == _kio_response(broker, version, entries, include_ops)
        assert raw.flexible == (version >= 9)
    for empty in ([], [entries[2]]):
        assert b"".join(
            _response(broker, version, listener, empty, ops=ops, cluster_ops=NOT_REQUESTED_OPERATIONS).parts
        ) == _kio_response(broker, version, empty, include_ops)
