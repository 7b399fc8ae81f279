"""The consumer group protocol (KIP-848) with real confluent-kafka consumers
(`group.protocol=consumer`): the broker assigns, members reconcile incrementally, a
departure is known at the next heartbeat, static members come back to their partitions,
topic patterns follow new topics, and the group and its offsets survive a broker SIGKILL."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support.group_clients import (
    Member,
    MemberPool,
    assert_at_least_once,
    assert_each_exactly_once,
    keyed_records,
    member_pool,
    produce,
    wait_balanced,
    wait_until,
)
from tests.support.harness import BrokerProcess, ThreadBroker
from tests.support.kafka_clients import create_topic

PARTITIONS = 12


@pytest.fixture
def pool() -> Iterator[MemberPool]:
    with member_pool() as p:
        yield p


def _member(pool: MemberPool, bootstrap: str, group: str, topic: str, **opts: Any) -> Member:
    return pool.thread("confluent", bootstrap, group, topic, protocol="consumer", **opts)


def _describe(bootstrap: str, group: str) -> Any:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group])[group].result(15)


def _changes(member: Member) -> list[frozenset[int]]:
    """The member's successive assignments (a callback that changed nothing is not a change)."""
    out: list[frozenset[int]] = []
    for a in member.assignments:
        if not out or out[-1] != a:
            out.append(a)
    return out


def test_four_members_share_the_partitions_and_a_departure_is_absorbed_at_heartbeat_speed(
    broker: ThreadBroker, pool: MemberPool
) -> None:
    topic = group = "kip848-four"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produced = produce(broker.bootstrap, topic, keyed_records(48, 10))
    members = [_member(pool, broker.bootstrap, group, topic) for _ in range(4)]
    wait_balanced(members, PARTITIONS, sizes=[3, 3, 3, 3])
    wait_until(lambda: len(pool.journal.records()) >= len(produced), 20, "every record processed")

    described = _describe(broker.bootstrap, group)
    assert described.type == ConsumerGroupType.CONSUMER
    assert described.partition_assignor == "uniform"
    assert {m.client_id for m in described.members} == {m.name for m in members}
    by_client = {m.client_id: {tp.partition for tp in m.assignment.topic_partitions} for m in described.members}
    assert by_client == {m.name: set(m.assignment) for m in members}

    leaver, rest = members[0], members[1:]
    kept = {m.name: set(m.assignment) for m in rest}
    started = time.monotonic()
    leaver.close()
    wait_balanced(rest, PARTITIONS, sizes=[4, 4, 4])
    took = time.monotonic() - started
    # The others hear of it at their next heartbeat (250 ms here), not at a session timeout
    # (45 s), nor by rejoining: nobody gave up what it had.
    assert took < 2.0, f"the departure took {took:.2f} s to absorb"
    assert all(kept[m.name] <= set(m.assignment) for m in rest)

    more = produce(broker.bootstrap, topic, keyed_records(48, 5, start=10))
    wait_until(lambda: len(pool.journal.records()) >= len(produced | more), 20, "the new records processed")
    assert_each_exactly_once(pool.journal.records(), produced | more)


def test_a_member_joining_does_not_stop_the_others(broker: ThreadBroker, pool: MemberPool) -> None:
    topic = group = "kip848-join"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    first = [_member(pool, broker.bootstrap, group, topic) for _ in range(3)]
    wait_balanced(first, PARTITIONS, sizes=[4, 4, 4])
    stop = threading.Event()
    produced: set[tuple[int, int]] = set()

    def keep_producing() -> None:
        start = 0
        while not stop.wait(0.05):  # paced: a steady trickle, not a load test
            produced.update(produce(broker.bootstrap, topic, keyed_records(24, 2, start=start)))
            start += 2

    producer = threading.Thread(target=keep_producing, daemon=True)
    producer.start()
    try:
        wait_until(lambda: all(m.processed for m in first), 20, "the first members consuming")
        before = {m.name: len(m.processed) for m in first}
        held = {m.name: (len(m.assignments), m.assignment) for m in first}  # balanced: 4 each
        late = _member(pool, broker.bootstrap, group, topic)
        wait_balanced([*first, late], PARTITIONS, sizes=[3, 3, 3, 3], timeout=20)
        # Each of the first three gave up one partition and kept the rest throughout:
        # incremental reconciliation, no stop-the-world rebalance.
        for m in first:
            seen, balanced = held[m.name]
            history = m.assignments[seen - 1 :]
            assert all(history), f"{m.name} was left with nothing at some point: {history}"
            assert len(history[-1]) == 3
            assert history[-1] < balanced, f"{m.name} held {set(balanced)}, then {set(history[-1])}"
        wait_until(lambda: all(len(m.processed) > before[m.name] for m in first), 20, "consumption going on")
    finally:
        stop.set()
        producer.join(30)
    wait_until(lambda: {(r.partition, r.offset) for r in pool.journal.records()} >= produced, 30, "every record")
    assert_at_least_once(pool.journal.records(), produced)


def test_a_static_member_back_under_a_new_id_keeps_its_partitions(broker: ThreadBroker, pool: MemberPool) -> None:
    topic = group = "kip848-static"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    a = _member(pool, broker.bootstrap, group, topic, instance_id="instance-a")
    b = _member(pool, broker.bootstrap, group, topic, instance_id="instance-b")
    wait_balanced([a, b], PARTITIONS, sizes=[6, 6])
    held_by_a = set(a.assignment)
    b_before = _changes(b)
    epoch = _describe(broker.bootstrap, group)
    epochs = {m.client_id: m for m in epoch.members}
    assert set(epochs) == {a.name, b.name}
    a.close()  # a static member's close leaves "for now" (member epoch -2): its partitions wait for it
    wait_until(lambda: not a.alive, 10, "the first incarnation closed")
    assert set(b.assignment) == set(range(PARTITIONS)) - held_by_a, "b must not take a's partitions"
    again = _member(pool, broker.bootstrap, group, topic, instance_id="instance-a")
    wait_balanced([again, b], PARTITIONS, sizes=[6, 6])
    assert set(again.assignment) == held_by_a
    assert _changes(b) == b_before, "b was rebalanced"


def test_a_topic_pattern_follows_topics_created_later(broker: ThreadBroker, pool: MemberPool) -> None:
    create_topic(broker.bootstrap, "kip848-rx-a", 2)
    create_topic(broker.bootstrap, "kip848-other", 2)
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "kip848-rx",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "topic.metadata.refresh.interval.ms": 500,
        }
    )
    seen: set[str] = set()
    try:
        consumer.subscribe(["^kip848-rx-.*"])
        produce(broker.bootstrap, "kip848-rx-a", keyed_records(2, 1))

        def got(topic: str) -> bool:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                seen.add(msg.topic() or "")
            return topic in seen

        wait_until(lambda: got("kip848-rx-a"), 20, "a record of the topic matching at subscribe time")
        create_topic(broker.bootstrap, "kip848-rx-b", 2)
        produce(broker.bootstrap, "kip848-rx-b", keyed_records(2, 1))
        produce(broker.bootstrap, "kip848-other", keyed_records(2, 1))
        wait_until(lambda: got("kip848-rx-b"), 20, "a record of the topic created after subscribing")
        member = _describe(broker.bootstrap, "kip848-rx").members[0]
        assert {tp.topic for tp in member.assignment.topic_partitions} == {"kip848-rx-a", "kip848-rx-b"}
        assert "kip848-other" not in seen
    finally:
        consumer.close()


def test_a_crashed_member_is_fenced_at_its_session_timeout(
    broker_factory: Callable[..., ThreadBroker], pool: MemberPool
) -> None:
    broker = broker_factory(settings={"group.consumer.session.timeout.ms": "1500"})
    topic = group = "kip848-crash"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    survivor = _member(pool, broker.bootstrap, group, topic)
    doomed = pool.child("confluent", broker.bootstrap, group, topic, protocol="consumer")
    wait_balanced([survivor, doomed], PARTITIONS, sizes=[6, 6])
    doomed.kill()  # SIGKILL: no leave heartbeat
    took = wait_until(lambda: set(survivor.assignment) == set(range(PARTITIONS)), 15, "the survivor owning all")
    assert took >= 1.0, "the partitions moved before the session timeout"


def test_the_group_and_its_offsets_survive_a_broker_sigkill(
    broker_process_factory: Callable[..., BrokerProcess], pool: MemberPool
) -> None:
    broker = broker_process_factory()
    topic = group = "kip848-durable"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produced = produce(broker.bootstrap, topic, keyed_records(48, 5))
    members = [_member(pool, broker.bootstrap, group, topic) for _ in range(3)]
    wait_balanced(members, PARTITIONS, sizes=[4, 4, 4])
    wait_until(lambda: len(pool.journal.records()) >= len(produced), 20, "every record processed")
    wait_until(lambda: sum(len(m.committed) for m in members) == PARTITIONS, 20, "every partition committed")
    before = _describe(broker.bootstrap, group)
    changes = {m.name: _changes(m) for m in members}

    broker.kill()
    broker.start()
    more = produce(broker.bootstrap, topic, keyed_records(48, 5, start=5))
    wait_until(lambda: len(pool.journal.records()) >= len(produced | more), 30, "the new records processed")
    after = _describe(broker.bootstrap, group)
    # The members carried on with the epochs and partitions the broker stored: no rebalance,
    # and nothing committed before the kill was read again.
    assert {m.member_id for m in after.members} == {m.member_id for m in before.members}
    assert {m.name: _changes(m) for m in members} == changes
    assert_each_exactly_once(pool.journal.records(), produced | more)


def test_a_classic_group_upgrades_online_and_downgrades_when_the_last_new_member_leaves(
    broker: ThreadBroker, pool: MemberPool
) -> None:
    """Kafka's rolling upgrade: consumers restarted one by one with the consumer protocol
    join the classic group's members in one group; the group keeps consuming throughout."""
    topic = group = "kip848-upgrade"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produced = produce(broker.bootstrap, topic, keyed_records(48, 5))
    classic = [pool.thread("confluent", broker.bootstrap, group, topic, heartbeat_interval_ms=500) for _ in range(2)]
    wait_balanced(classic, PARTITIONS, sizes=[6, 6])
    wait_until(lambda: len(pool.journal.records()) >= len(produced), 20, "the classic members' reading")

    upgraded = _member(pool, broker.bootstrap, group, topic)
    members = [*classic, upgraded]
    wait_balanced(members, PARTITIONS, sizes=[4, 4, 4], timeout=20)
    described = _describe(broker.bootstrap, group)
    assert described.type == ConsumerGroupType.CONSUMER
    assert len(described.members) == 3
    more = produce(broker.bootstrap, topic, keyed_records(48, 5, start=5))
    wait_until(lambda: {(r.partition, r.offset) for r in pool.journal.records()} >= produced | more, 20, "reading on")

    # The consumer-protocol member leaves: the classic members form a classic group again.
    upgraded.close()
    wait_balanced(classic, PARTITIONS, sizes=[6, 6], timeout=20)
    assert _describe(broker.bootstrap, group).type == ConsumerGroupType.CLASSIC
    last = produce(broker.bootstrap, topic, keyed_records(48, 2, start=10))
    everything = produced | more | last
    wait_until(lambda: {(r.partition, r.offset) for r in pool.journal.records()} >= everything, 20, "every record")
    assert_at_least_once(pool.journal.records(), everything)


def test_a_consumer_group_takes_over_an_empty_classic_groups_offsets(broker: ThreadBroker, pool: MemberPool) -> None:
    topic = group = "kip848-offline"
    create_topic(broker.bootstrap, topic, 4)
    produced = produce(broker.bootstrap, topic, keyed_records(8, 4))
    classic = pool.thread("confluent", broker.bootstrap, group, topic)
    wait_until(lambda: len(pool.journal.records()) >= len(produced), 20, "the classic member's reading")
    wait_until(lambda: sum(classic.committed.values()) == len(produced), 20, "its commits")
    classic.close()
    upgraded = _member(pool, broker.bootstrap, group, topic)
    wait_until(lambda: set(upgraded.assignment) == set(range(4)), 15, "the consumer-protocol member's assignment")
    more = produce(broker.bootstrap, topic, keyed_records(8, 2, start=4))
    wait_until(lambda: len(upgraded.processed) >= len(more), 20, "the new records")
    assert {(r.partition, r.offset) for r in upgraded.processed} == more, "it resumed from the classic offsets"


def test_an_admin_cannot_commit_into_an_active_consumer_group(broker: ThreadBroker) -> None:
    topic = group = "kip848-stale"
    create_topic(broker.bootstrap, topic, 2)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": "consumer"})
    try:
        consumer.subscribe([topic])
        wait_until(lambda: consumer.poll(0.05) is None and len(consumer.assignment()) == 2, 15, "the assignment")
        consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        # An admin's commit (no member, no epoch) into the active group is refused.
        try:
            result = admin.alter_consumer_group_offsets([_offsets_request(group, topic)])[group].result(15)
            errors = [tp.error for tp in result.topic_partitions]
        except KafkaException as e:
            errors = [e.args[0]]
        assert errors
        assert all(e is not None and e.name() == "UNKNOWN_MEMBER_ID" for e in errors), errors
    finally:
        consumer.close()


def _offsets_request(group: str, topic: str) -> Any:
    from confluent_kafka import ConsumerGroupTopicPartitions

    return ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 0)])
