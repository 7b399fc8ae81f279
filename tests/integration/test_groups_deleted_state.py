"""State goes with what it belongs to, for a classic and a consumer-protocol (KIP-848)
group alike, and stays gone after a clean restart (SIGTERM) or a crash (SIGKILL) of the
broker process:

- a deleted topic takes the groups' committed offsets in it: a topic created again under
  its name starts every group at `auto.offset.reset`, not where the old topic's readers were;
- a deleted group is not listed, described nor holding offsets again after a restart.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    ConsumerGroupState,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32

from broker.protocol.errors import ErrorCode
from tests.support.harness import BrokerProcess
from tests.support.kafka_clients import confluent_produce, create_topic
from tests.support.kafka_wire import connect

pytestmark = pytest.mark.slow

TOPIC, PARTITIONS, PER_PARTITION = "ledger", 2, 5
GROUPS = {"ledger-classic": "classic", "ledger-consumer": "consumer"}  # group id -> group.protocol
DEADLINE_S = 60
RECONNECT = {"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200}  # find a restarted broker promptly


def _produce(bootstrap: str, tag: str) -> set[bytes]:
    values = [f"{tag}-{p}-{i}".encode() for p in range(PARTITIONS) for i in range(PER_PARTITION)]
    confluent_produce(
        bootstrap, TOPIC, [{"partition": int(v.split(b"-")[1]), "value": v} for v in values], {"acks": "all"}
    )
    return set(values)


def _read(bootstrap: str, group: str, count: int, *, commit: bool) -> set[bytes]:
    """A member of `group` (with its protocol) subscribes, reads until `count` records
    came (auto.offset.reset=earliest where it has no committed offset), commits its
    position if `commit`, and leaves."""
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": GROUPS[group],
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    consumer = Consumer(conf)
    got: set[bytes] = set()
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            value = msg.value()
            assert value is not None
            got.add(value)
        if commit:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def _committed(bootstrap: str, group: str) -> dict[int, int]:
    """OffsetFetch for `group`, as a tool asks it (no membership)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        partitions = consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=15)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in partitions}


def _groups_commit(bootstrap: str) -> set[bytes]:
    """Both groups read the whole topic and commit its end."""
    values = _produce(bootstrap, "old")
    for group in GROUPS:
        assert _read(bootstrap, group, len(values), commit=True) == values
        assert _committed(bootstrap, group) == dict.fromkeys(range(PARTITIONS), PER_PARTITION)
    return values


def _restart(proc: BrokerProcess, how: str) -> None:
    if how == "sigterm":
        assert proc.stop() == 0
    else:
        proc.kill()
    proc.start()


def _recreate(bootstrap: str) -> None:
    """Create the topic again (its old files may still be going away: retry meanwhile)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            create_topic(bootstrap, TOPIC, PARTITIONS)
            return
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_a_recreated_topic_starts_every_group_at_the_reset_position_not_the_deleted_topics_offsets(
    broker_process_factory: Any, how: str
) -> None:
    proc: BrokerProcess = broker_process_factory()
    create_topic(proc.bootstrap, TOPIC, PARTITIONS)
    old = _groups_commit(proc.bootstrap)

    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    admin.delete_topics([TOPIC], operation_timeout=15)[TOPIC].result(20)
    _recreate(proc.bootstrap)
    new = _produce(proc.bootstrap, "new")
    for group in GROUPS:  # gone at once ...
        assert _committed(proc.bootstrap, group) == dict.fromkeys(range(PARTITIONS), OFFSET_INVALID)

    _restart(proc, how)
    for group in GROUPS:  # ... and after a restart: the deletion's tombstones were stored
        assert _committed(proc.bootstrap, group) == dict.fromkeys(range(PARTITIONS), OFFSET_INVALID)
        # From the beginning of the new topic (the old offsets would have skipped all of it).
        got = _read(proc.bootstrap, group, len(new), commit=False)
        assert got == new
        assert not got & old


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_a_deleted_group_stays_deleted_after_a_restart(broker_process_factory: Any, how: str) -> None:
    proc: BrokerProcess = broker_process_factory()
    create_topic(proc.bootstrap, TOPIC, PARTITIONS)
    _groups_commit(proc.bootstrap)
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    for future in admin.delete_consumer_groups(list(GROUPS), request_timeout=15).values():
        future.result(20)

    _restart(proc, how)
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    listed = admin.list_consumer_groups(request_timeout=15).result(20)
    assert not listed.errors
    assert {g.group_id for g in listed.valid} & set(GROUPS) == set()
    for group, future in admin.describe_consumer_groups(list(GROUPS), request_timeout=15).items():
        assert future.result(20).state == ConsumerGroupState.DEAD
        assert _committed(proc.bootstrap, group) == dict.fromkeys(range(PARTITIONS), OFFSET_INVALID)
    # Deleting it again finds nothing to delete.
    for future in admin.delete_consumer_groups(list(GROUPS), request_timeout=15).values():
        with pytest.raises(KafkaException, match="GROUP_ID_NOT_FOUND"):
            future.result(20)


@pytest.mark.parametrize("crash", [False, True], ids=["running", "crash-before-commit"])
def test_offsets_pending_in_a_transaction_die_with_their_topic(broker_process_factory: Any, crash: bool) -> None:
    """Offsets sent to a transaction, whose topic is deleted (and created again) before the
    transaction commits, are not committed with it: also when the broker crashes (SIGKILL)
    between the deletion and the commit, which the transaction survives."""
    proc: BrokerProcess = broker_process_factory()
    create_topic(proc.bootstrap, TOPIC, PARTITIONS)
    group = "ledger-transactional"
    consumer = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": group, "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": proc.bootstrap, "transactional.id": "ledger-mover", **RECONNECT})
    try:
        producer.init_transactions(15)
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            [TopicPartition(TOPIC, p, 3) for p in range(PARTITIONS)], consumer.consumer_group_metadata(), 15
        )
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        admin.delete_topics([TOPIC], operation_timeout=15)[TOPIC].result(20)
        _recreate(proc.bootstrap)
        if crash:
            proc.kill()
            proc.start()
        producer.commit_transaction(DEADLINE_S)
    finally:
        consumer.close()
        producer.flush(5)
    assert _committed(proc.bootstrap, group) == dict.fromkeys(range(PARTITIONS), OFFSET_INVALID)
    proc.kill()
    proc.start()
    assert _committed(proc.bootstrap, group) == dict.fromkeys(range(PARTITIONS), OFFSET_INVALID)


def test_a_deleted_groups_offsets_pending_in_a_transaction_do_not_bring_it_back(broker_process_factory: Any) -> None:
    """A group deleted while a transaction holds offsets for it stays deleted when the
    transaction commits, and after a crash and restart."""
    proc: BrokerProcess = broker_process_factory()
    create_topic(proc.bootstrap, TOPIC, PARTITIONS)
    group = "ledger-transactional"
    consumer = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": group, "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": proc.bootstrap, "transactional.id": "ledger-mover"})
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, p, 1) for p in range(PARTITIONS)], asynchronous=False)
        producer.init_transactions(15)
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            [TopicPartition(TOPIC, p, 3) for p in range(PARTITIONS)], consumer.consumer_group_metadata(), 15
        )
        admin.delete_consumer_groups([group], request_timeout=15)[group].result(20)
        producer.commit_transaction(15)
    finally:
        consumer.close()
        producer.flush(5)
    for restarted in (False, True):
        if restarted:
            proc.kill()
            proc.start()
            admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        listed = admin.list_consumer_groups(request_timeout=15).result(20)
        assert group not in {g.group_id for g in listed.valid}
        assert _committed(proc.bootstrap, group) == dict.fromkeys(range(PARTITIONS), OFFSET_INVALID)


def test_offsets_deleted_while_pending_in_a_transaction_stay_deleted_when_it_commits(
    broker_process_factory: Any,
) -> None:
    """OffsetDelete takes the group's offsets of those partitions held with an open
    transaction too; the transaction's other offsets are committed with it."""
    proc: BrokerProcess = broker_process_factory()
    create_topic(proc.bootstrap, TOPIC, PARTITIONS)
    group = "ledger-transactional"
    consumer = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": group, "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": proc.bootstrap, "transactional.id": "ledger-mover"})
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, p, 1) for p in range(PARTITIONS)], asynchronous=False)
        producer.init_transactions(15)
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            [TopicPartition(TOPIC, p, 3) for p in range(PARTITIONS)], consumer.consumer_group_metadata(), 15
        )
        with connect(proc.bootstrap) as conn:  # OffsetDelete (confluent-kafka's admin client has none)
            response = conn.request(
                OffsetDeleteRequest(
                    group_id=GroupId(group),
                    topics=(
                        OffsetDeleteRequestTopic(
                            name=TopicName(TOPIC), partitions=(OffsetDeleteRequestPartition(partition_index=i32(0)),)
                        ),
                    ),
                )
            )
        assert response.error_code == ErrorCode.none
        assert [p.error_code for t in response.topics for p in t.partitions] == [ErrorCode.none]
        producer.commit_transaction(15)
    finally:
        consumer.close()
        producer.flush(5)
    assert _committed(proc.bootstrap, group) == {0: OFFSET_INVALID, 1: 3}
