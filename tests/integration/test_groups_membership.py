"""Group membership with real clients (confluent-kafka/librdkafka and aiokafka): static
members that restart within their session timeout get their partitions back without a
rebalance; cooperative-sticky moves only the partitions a newcomer takes; every
client-side assignor produces a complete, non-overlapping assignment.

The broker's own view (state, generation, rebalance count, the assignment the leader
sent for each member) is read from its coordinator on the broker's loop thread.  Waits
are deadline polls on that view and on the clients' assignments.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from confluent_kafka import Consumer, TopicPartition

from broker.coordinator.consumer_protocol import assignment_partitions
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import create_topic

TIMEOUT = 20.0
SESSION_MS = 10_000
HEARTBEAT_MS = 300

Partitions = frozenset[tuple[str, int]]


@dataclass(frozen=True)
class GroupView:
    """The coordinator's state of one group."""

    state: str
    generation: int
    rebalances: int
    protocol: str | None
    assignments: dict[str, Partitions]  # member id -> what the leader assigned it
    instances: dict[str | None, str]  # group.instance.id -> member id (static members)


def view(broker: ThreadBroker, group_id: str) -> GroupView | None:
    def snapshot() -> GroupView | None:
        group = broker.broker.coordinator.groups.get(group_id)
        if group is None:
            return None
        assignments = {}
        for member in group.members.values():
            decoded = assignment_partitions(member.assignment) or {}
            assignments[member.member_id] = frozenset((t, p) for t, ps in decoded.items() for p in ps)
        return GroupView(
            state=group.state.value,
            generation=group.generation,
            rebalances=group.rebalances,
            protocol=group.protocol_name,
            assignments=assignments,
            instances={m.group_instance_id: m.member_id for m in group.members.values() if m.group_instance_id},
        )

    return broker.call(snapshot)


def settled(broker: ThreadBroker, group_id: str, client_assignments: Sequence[Partitions]) -> GroupView | None:
    """The group's view once it is Stable and every client holds exactly what the leader
    assigned to one member (so no client is still catching up); otherwise None."""
    v = view(broker, group_id)
    if v is None or v.state != "Stable" or len(v.assignments) != len(client_assignments):
        return None
    if sorted(map(sorted, v.assignments.values())) != sorted(map(sorted, client_assignments)):
        return None
    return v


class HeartbeatCounter:
    """Counts the heartbeats the coordinator has seen from one member (distinct values of
    its last-heartbeat time), so a test can let a member heartbeat a few times and then
    check that nothing happened meanwhile, without a fixed sleep."""

    def __init__(self, broker: ThreadBroker, group_id: str, member_id: str) -> None:
        self.broker, self.group_id, self.member_id = broker, group_id, member_id
        self.seen = {self._last()}

    def _last(self) -> int:
        def read() -> int:
            return int(self.broker.broker.coordinator.groups[self.group_id].members[self.member_id].last_heartbeat_ms)

        return self.broker.call(read)

    def at_least(self, count: int) -> bool:
        self.seen.add(self._last())
        return len(self.seen) > count


def all_partitions(topics: dict[str, int]) -> Partitions:
    return frozenset((t, p) for t, n in topics.items() for p in range(n))


def assert_complete_and_disjoint(v: GroupView, topics: dict[str, int]) -> None:
    held = list(v.assignments.values())
    assert frozenset().union(*held) == all_partitions(topics), "some partition is not assigned"
    assert sum(len(h) for h in held) == len(all_partitions(topics)), "a partition is assigned twice"
    sizes = [len(h) for h in held]
    assert min(sizes) >= 1
    assert max(sizes) - min(sizes) <= 1, f"unbalanced: {sizes}"


# --- confluent-kafka helpers ------------------------------------------------------------------


def confluent_consumer(broker: ThreadBroker, group_id: str, **conf: Any) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group_id,
            "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": HEARTBEAT_MS,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **conf,
        }
    )


class Callbacks:
    """Records a confluent consumer's rebalance callbacks."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Partitions]] = []

    def _record(self, kind: str) -> Callable[[Consumer, list[TopicPartition]], None]:
        def callback(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
            self.events.append((kind, frozenset((p.topic, p.partition) for p in partitions)))

        return callback

    def subscribe(self, consumer: Consumer, topics: list[str]) -> None:
        consumer.subscribe(
            topics, on_assign=self._record("assign"), on_revoke=self._record("revoke"), on_lost=self._record("lost")
        )


def held(consumer: Consumer) -> Partitions:
    return frozenset((p.topic, p.partition) for p in consumer.assignment())


def poll_until(consumers: Sequence[Consumer], condition: Callable[[], Any], what: str) -> Any:
    """Serve every consumer's callbacks until `condition()` is truthy; returns its value."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        for consumer in consumers:
            msg = consumer.poll(0.02)
            assert msg is None or msg.error() is None, msg.error()
        result = condition()
        if result:
            return result
    raise AssertionError(f"timed out waiting for {what}")


# --- aiokafka helpers -------------------------------------------------------------------------


class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.events: list[tuple[str, Partitions]] = []

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.events.append(("revoke", frozenset((tp.topic, tp.partition) for tp in revoked)))

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.events.append(("assign", frozenset((tp.topic, tp.partition) for tp in assigned)))


async def aio_consumer(broker: ThreadBroker, group_id: str, **kwargs: Any) -> AIOKafkaConsumer:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=group_id,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **kwargs,
    )
    await consumer.start()
    return consumer


def aio_held(consumer: AIOKafkaConsumer) -> Partitions:
    return frozenset((tp.topic, tp.partition) for tp in consumer.assignment())


async def wait_until(condition: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# --- static membership ------------------------------------------------------------------------


@pytest.mark.parametrize("restart", ["follower", "leader"])
def test_confluent_static_member_restart_gets_its_partitions_back_without_a_rebalance(
    broker: ThreadBroker, restart: str
) -> None:
    topic, group_id = f"static-c-{restart}", f"static-c-{restart}"
    create_topic(broker.bootstrap, topic, 4)
    callbacks = {"a": Callbacks(), "b": Callbacks()}
    consumers: dict[str, Consumer] = {}
    opened: list[Consumer] = []

    def start(instance: str) -> Consumer:
        consumer = confluent_consumer(broker, group_id, **{"group.instance.id": instance})
        opened.append(consumer)
        callbacks[instance].subscribe(consumer, [topic])
        consumers[instance] = consumer
        return consumer

    try:
        start("a")
        poll_until(list(consumers.values()), lambda: settled(broker, group_id, [held(consumers["a"])]), "a alone")
        start("b")
        before = poll_until(
            list(consumers.values()),
            lambda: settled(broker, group_id, [held(c) for c in consumers.values()]),
            "a and b balanced",
        )
        leader = broker.call(lambda: broker.broker.coordinator.groups[group_id].leader)
        restarting = "a" if before.instances["a"] == leader else "b"
        if restart == "follower":
            restarting = "b" if restarting == "a" else "a"
        staying = "b" if restarting == "a" else "a"
        partitions = held(consumers[restarting])
        assert len(partitions) == 2
        stayer_events = list(callbacks[staying].events)

        consumers.pop(restarting).close()  # a static member sends no LeaveGroup
        assert view(broker, group_id) == before  # the coordinator still counts it in
        start(restarting)
        after = poll_until(
            list(consumers.values()),
            lambda: settled(broker, group_id, [held(c) for c in consumers.values()]),
            "the restarted member's assignment",
        )
        assert held(consumers[restarting]) == partitions
        assert (after.generation, after.rebalances) == (before.generation, before.rebalances)
        assert after.instances[restarting] != before.instances[restarting]  # a new member id
        assert after.instances[staying] == before.instances[staying]
        # Several heartbeats later the member that stayed has seen no rebalance at all.
        beats = HeartbeatCounter(broker, group_id, after.instances[staying])
        poll_until(list(consumers.values()), lambda: beats.at_least(3), "3 heartbeats from the member that stayed")
        assert callbacks[staying].events == stayer_events
        assert view(broker, group_id) == after
    finally:
        for consumer in opened:
            consumer.close()


@pytest.mark.parametrize("restart", ["follower", "leader"])
async def test_aiokafka_static_member_restart_gets_its_partitions_back_without_a_rebalance(
    broker: ThreadBroker, restart: str
) -> None:
    topic, group_id = f"static-a-{restart}", f"static-a-{restart}"
    create_topic(broker.bootstrap, topic, 4)
    listeners = {"a": Listener(), "b": Listener()}
    consumers: dict[str, AIOKafkaConsumer] = {}
    opened: list[AIOKafkaConsumer] = []

    async def start(instance: str) -> None:
        consumer = await aio_consumer(broker, group_id, group_instance_id=instance)
        opened.append(consumer)
        consumer.subscribe([topic], listener=listeners[instance])
        consumers[instance] = consumer

    try:
        await start("a")
        await wait_until(lambda: settled(broker, group_id, [aio_held(consumers["a"])]), "a alone")
        await start("b")
        before = await wait_until(
            lambda: settled(broker, group_id, [aio_held(c) for c in consumers.values()]), "a and b balanced"
        )
        leader = broker.call(lambda: broker.broker.coordinator.groups[group_id].leader)
        restarting = "a" if before.instances["a"] == leader else "b"
        if restart == "follower":
            restarting = "b" if restarting == "a" else "a"
        staying = "b" if restarting == "a" else "a"
        partitions = aio_held(consumers[restarting])
        assert len(partitions) == 2
        stayer_events = list(listeners[staying].events)

        await consumers.pop(restarting).stop()  # a static member sends no LeaveGroup
        assert view(broker, group_id) == before
        await start(restarting)
        after = await wait_until(
            lambda: settled(broker, group_id, [aio_held(c) for c in consumers.values()]),
            "the restarted member's assignment",
        )
        assert aio_held(consumers[restarting]) == partitions
        assert (after.generation, after.rebalances) == (before.generation, before.rebalances)
        assert after.instances[restarting] != before.instances[restarting]
        # Several heartbeats later the member that stayed has seen no rebalance.
        beats = HeartbeatCounter(broker, group_id, after.instances[staying])
        await wait_until(lambda: beats.at_least(3), "3 heartbeats from the member that stayed")
        assert listeners[staying].events == stayer_events
        assert view(broker, group_id) == after
    finally:
        for consumer in opened:
            await consumer.stop()


# --- cooperative-sticky -----------------------------------------------------------------------


def test_confluent_cooperative_sticky_revokes_only_the_partitions_that_move(broker: ThreadBroker) -> None:
    topic = group_id = "coop-sticky"
    create_topic(broker.bootstrap, topic, 6)
    conf = {"partition.assignment.strategy": "cooperative-sticky"}
    first, second = Callbacks(), Callbacks()
    a = confluent_consumer(broker, group_id, **conf)
    b = None
    try:
        first.subscribe(a, [topic])
        poll_until([a], lambda: settled(broker, group_id, [held(a)]), "a holding all 6 partitions")
        everything = all_partitions({topic: 6})
        assert held(a) == everything
        assert first.events == [("assign", everything)]

        b = confluent_consumer(broker, group_id, **conf)
        second.subscribe(b, [topic])
        v = poll_until(
            [a, b],
            lambda: held(b) and settled(broker, group_id, [held(a), held(b)]),
            "the newcomer's share",
        )
        kept, moved = held(a), held(b)
        assert len(kept) == len(moved) == 3
        assert kept | moved == everything
        assert v.protocol == "cooperative-sticky"
        # Incremental: a was asked to give up exactly what moved, and never its kept
        # partitions; b was handed exactly what moved.
        revoked = frozenset().union(*(p for kind, p in first.events if kind == "revoke"))
        assert revoked == moved
        assert [kind for kind, p in first.events if p] == ["assign", "revoke"]
        assert not any(kind == "lost" for kind, _ in first.events)
        assert frozenset().union(*(p for kind, p in second.events if kind == "assign")) == moved
    finally:
        a.close()
        if b is not None:
            b.close()


# --- assignors --------------------------------------------------------------------------------

TOPICS = {"x": 4, "y": 3}  # 7 partitions over 3 members: 3, 2, 2


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_confluent_assignor_assigns_every_partition_exactly_once(broker: ThreadBroker, strategy: str) -> None:
    group_id = f"assignor-c-{strategy}"
    topics = {f"{group_id}-{t}": n for t, n in TOPICS.items()}
    for name, n in topics.items():
        create_topic(broker.bootstrap, name, n)
    consumers = [confluent_consumer(broker, group_id, **{"partition.assignment.strategy": strategy}) for _ in range(3)]
    try:
        for consumer in consumers:
            consumer.subscribe(list(topics))
        v = poll_until(consumers, lambda: settled(broker, group_id, [held(c) for c in consumers]), "3 members settled")
        assert v.protocol == strategy
        assert_complete_and_disjoint(v, topics)
    finally:
        for consumer in consumers:
            consumer.close()


@pytest.mark.parametrize(
    "assignor", [RangePartitionAssignor, RoundRobinPartitionAssignor, StickyPartitionAssignor], ids=lambda a: a.name
)
async def test_aiokafka_assignor_assigns_every_partition_exactly_once(broker: ThreadBroker, assignor: Any) -> None:
    group_id = f"assignor-a-{assignor.name}"
    topics = {f"{group_id}-{t}": n for t, n in TOPICS.items()}
    for name, n in topics.items():
        create_topic(broker.bootstrap, name, n)
    consumers: list[AIOKafkaConsumer] = []
    try:
        for _ in range(3):
            consumer = await aio_consumer(broker, group_id, partition_assignment_strategy=(assignor,))
            consumers.append(consumer)
            consumer.subscribe(list(topics))
        v = await wait_until(lambda: settled(broker, group_id, [aio_held(c) for c in consumers]), "3 members settled")
        assert v.protocol == assignor.name
        assert_complete_and_disjoint(v, topics)
    finally:
        for consumer in consumers:
            await consumer.stop()
