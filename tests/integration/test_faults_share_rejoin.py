"""Fault test: a confluent-kafka share consumer (a process of its own) SIGSTOPped past its
share session timeout is removed from the group with its share session; resumed, its fetches
are UNKNOWN_MEMBER_ID until it joins again, and then it reads the group's new records."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.types import GroupId

from broker.protocol.errors import ErrorCode
from tests.support.configs import set_group_configs
from tests.support.fault_clients import Fleet, wait_until
from tests.support.harness import BrokerProcess
from tests.support.history import History, Read
from tests.support.kafka_clients import create_topic
from tests.support.kafka_wire import connect

pytestmark = pytest.mark.fault

SETTINGS = {"group.share.session.timeout.ms": "3000", "group.share.heartbeat.interval.ms": "500"}


def _produce(bootstrap: str, topic: str, values: range) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in values:
        producer.produce(topic, value=b"r%05d" % i)
    assert producer.flush(30) == 0


def _members(bootstrap: str, group: str) -> int:
    with connect(bootstrap) as conn:
        described = conn.request(
            ShareGroupDescribeRequest(group_ids=(GroupId(group),), include_authorized_operations=False)
        ).groups[0]
    assert described.error_code == ErrorCode.none, described
    return len(described.members)


def test_a_share_consumer_stalled_past_its_session_rejoins_and_reads_again(
    broker_process_factory: Callable[..., BrokerProcess], fleet: Fleet
) -> None:
    broker = broker_process_factory(SETTINGS)
    topic, group = "share-rejoin", "share-rejoin"
    create_topic(broker.bootstrap, topic, 1)
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    _produce(broker.bootstrap, topic, range(50))
    fleet.start("share", "sleepy", bootstrap=broker.bootstrap, topic=topic, group=group, member="sleepy")

    def read() -> set[int]:
        return {e.offset for e in fleet.history("sleepy") if isinstance(e, Read)}

    wait_until(lambda: read() >= set(range(50)), "the member to read the first records")
    history = History()
    fleet.pause("sleepy", history)
    wait_until(lambda: _members(broker.bootstrap, group) == 0, "the stalled member to expire", timeout=60)
    _produce(broker.bootstrap, topic, range(50, 100))
    fleet.resume("sleepy", history)
    wait_until(lambda: read() >= set(range(100)), "the resumed member to rejoin and read the new records", timeout=90)
    assert _members(broker.bootstrap, group) == 1
