"""A deleted topic's share-group state goes with it (DeleteTopics): a topic created again under
the same name is read by the group from where `share.auto.offset.reset` says, and the old
state is not brought back by a restart.  confluent-kafka against an in-process broker."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import connect
from tests.support.share_clients import drain_share
from tests.support.share_wire import offsets_of

GROUP, TOPIC = "deletion", "doomed"


def _produce(bootstrap: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for value in values:
        producer.produce(TOPIC, value=value)
    assert producer.flush(30) == 0


def _state_of(broker: ThreadBroker, topic_id: uuid.UUID) -> list[object]:
    """The share partitions the broker holds for `topic_id`, in any group."""
    return broker.call(lambda: [k for k in broker.broker.shares.partitions if k[1] == topic_id])


def test_a_topic_deleted_and_created_again_starts_the_group_afresh(broker_factory: Callable[..., ThreadBroker]) -> None:
    broker = broker_factory()
    bootstrap = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(20)
    old = {b"old-%d" % i for i in range(5)}
    _produce(bootstrap, sorted(old))
    assert drain_share(bootstrap, GROUP, TOPIC, old) == old
    old_id = broker.call(lambda: broker.broker.store.get(TOPIC).topic_id)
    assert _state_of(broker, old_id) != []

    admin.delete_topics([TOPIC])[TOPIC].result(20)
    assert _state_of(broker, old_id) == []  # gone from memory with the topic
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(20)
            break
        except Exception:  # the name is reserved until the deleted topic's files are gone
            time.sleep(0.1)
    new = {b"new-0", b"new-1"}
    _produce(bootstrap, sorted(new))

    broker.restart()
    assert _state_of(broker, old_id) == []  # the tombstones keep it gone after a replay
    with connect(bootstrap) as conn:
        assert offsets_of(conn, GROUP, {TOPIC: [0]}) == {(TOPIC, 0): -1}  # no state yet
    assert drain_share(bootstrap, GROUP, TOPIC, new) == new  # from the earliest: nothing old
    with connect(bootstrap) as conn:
        assert offsets_of(conn, GROUP, {TOPIC: [0]}) == {(TOPIC, 0): 2}
