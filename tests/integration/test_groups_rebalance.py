"""The members of a group split its partitions, and rebalancing moves partitions when
members come and go, leave cleanly or crash, without losing a record.  Real aiokafka and
confluent-kafka consumers, in threads or (to be SIGKILLed) in child processes."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from tests.support.group_clients import (
    CLIENTS,
    ChildMember,
    Member,
    MemberPool,
    assert_at_least_once,
    assert_each_exactly_once,
    assert_runs_in_order,
    coverage,
    is_balanced,
    keyed_records,
    member_pool,
    produce,
    wait_balanced,
    wait_until,
)
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import create_topic

# A crashed member is noticed at its session timeout: keep it short (the broker's
# minimum is lowered to allow it) and heartbeat often, so survivors hear of the
# rebalance promptly.
FAST_GROUP_SETTINGS = {"group.min.session.timeout.ms": "500"}
FAST = {"session_timeout_ms": 1500, "heartbeat_interval_ms": 200}


@pytest.fixture
def pool() -> Iterator[MemberPool]:
    with member_pool() as p:
        yield p


@pytest.fixture
def fast_broker(broker_factory: Callable[..., ThreadBroker]) -> ThreadBroker:
    return broker_factory(settings=FAST_GROUP_SETTINGS)


def _processed_by(members: list[Member]) -> set[tuple[int, int]]:
    return {(r.partition, r.offset) for m in members for r in m.processed}


def _broker_assignments(bootstrap: str, group: str) -> dict[str, set[int]] | None:
    """Client id -> partitions, as the broker describes the group (DescribeGroups);
    None while it is not Stable."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(10)
    if described.state.name != "STABLE":
        return None
    return {m.client_id: {tp.partition for tp in m.assignment.topic_partitions} for m in described.members}


def _wait_settled(bootstrap: str, group: str, members: list[Member], sizes: list[int]) -> None:
    """Wait until the members share the 6 partitions with these assignment sizes, and
    the broker describes the group as Stable with exactly these members (by client id)
    and the assignments the clients report."""
    wait_balanced(members, 6, sizes=sizes)

    def agreed() -> bool:
        clients = {m.name: set(m.assignment) for m in members}
        return _broker_assignments(bootstrap, group) == clients and is_balanced(members, 6)

    wait_until(agreed, 5, f"the broker to describe {members}")
    assert sorted(len(m.assignment) for m in members) == sizes


def _committed_through(broker: ThreadBroker, group: str, produced: set[tuple[int, int]]) -> Callable[[], bool]:
    ends: dict[int, int] = {}
    for p, o in produced:
        ends[p] = max(ends.get(p, -1), o + 1)

    def check() -> bool:
        committed = broker.call(lambda: broker.broker.coordinator.committed(group))
        return all(committed.get(("t", p)) is not None and committed[("t", p)].offset == e for p, e in ends.items())

    return check


@pytest.mark.parametrize("client", CLIENTS)
def test_three_members_get_two_of_six_partitions_each_and_a_leaving_members_partitions_move(
    fast_broker: ThreadBroker, pool: MemberPool, client: str
) -> None:
    """A group of 3 on 6 partitions: each member gets 2 (the clients' and the broker's
    view agree).  When one member closes (LeaveGroup), its partitions move to the other
    two (3 each), which process what is produced to them afterwards: every record is
    processed exactly once, since everything before the leave was committed."""
    bootstrap = fast_broker.bootstrap
    create_topic(bootstrap, "t", 6)
    members = [pool.thread(client, bootstrap, "split", "t", **FAST) for _ in range(3)]
    _wait_settled(bootstrap, "split", members, [2, 2, 2])

    first = produce(bootstrap, "t", keyed_records(keys=12, per_key=10))
    wait_until(lambda: _processed_by(members) >= first, 10, "the first half to be processed")
    wait_until(_committed_through(fast_broker, "split", first), 10, "the first half to be committed")

    leaver, stayers = members[0], members[1:]
    moved = leaver.assignment
    leaver.close()
    _wait_settled(bootstrap, "split", stayers, [3, 3])

    second = produce(bootstrap, "t", keyed_records(keys=12, per_key=10, start=10))
    wait_until(lambda: _processed_by(stayers) >= second, 10, "the second half to be processed")
    pool.close_all()
    assert_each_exactly_once([r for m in members for r in m.processed], first | second)
    moved_records = {po for po in second if po[0] in moved}
    assert moved_records
    after_leave = {(r.partition, r.offset) for m in stayers for r in m.processed if r.partition in moved}
    assert after_leave == moved_records  # the survivors took them over


@pytest.mark.parametrize("client", CLIENTS)
def test_a_seventh_member_on_six_partitions_stays_idle(broker: ThreadBroker, pool: MemberPool, client: str) -> None:
    """A group of 7 on a 6-partition topic: six members get one partition each, the
    seventh gets none and processes nothing, while the group processes every record."""
    create_topic(broker.bootstrap, "t", 6)
    members = [pool.thread(client, broker.bootstrap, "seven", "t") for _ in range(7)]
    _wait_settled(broker.bootstrap, "seven", members, [0, 1, 1, 1, 1, 1, 1])  # all 7 are members

    produced = produce(broker.bootstrap, "t", keyed_records(keys=30, per_key=4))
    assert {p for p, _ in produced} == set(range(6))
    wait_until(lambda: _processed_by(members) >= produced, 10, "every record to be processed")
    idle = [m for m in members if not m.assignment]
    pool.close_all()
    assert len(idle) == 1
    assert idle[0].processed == []
    assert_each_exactly_once([r for m in members for r in m.processed], produced)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_killed_members_partitions_move_to_the_others_and_nothing_is_lost(
    fast_broker: ThreadBroker, pool: MemberPool, client: str
) -> None:
    """Three members in child processes share 6 partitions.  One is SIGKILLed (no
    LeaveGroup): after its session timeout (1.5 s) the broker drops it and its
    partitions move to the two survivors, which process the records produced to them
    while the dead member still held them.  Every record is processed at least once."""
    bootstrap = fast_broker.bootstrap
    create_topic(bootstrap, "t", 6)
    members = [pool.child(client, bootstrap, "crash", "t", **FAST) for _ in range(3)]
    wait_balanced(members, 6, sizes=[2, 2, 2], timeout=12)
    first = produce(bootstrap, "t", keyed_records(keys=12, per_key=10))
    wait_until(lambda: _processed_by(members) >= first, 10, "the first half to be processed")

    victim, survivors = members[0], members[1:]
    assert isinstance(victim, ChildMember)
    orphaned = victim.assignment
    victim.kill()
    killed_at = time.monotonic()
    second = produce(bootstrap, "t", keyed_records(keys=12, per_key=10, start=10))
    wait_balanced(survivors, 6, sizes=[3, 3], timeout=10)
    print(f"\npartitions of the killed member moved {time.monotonic() - killed_at:.2f} s after SIGKILL")
    wait_until(lambda: _processed_by(survivors) >= second, 10, "the second half to be processed")
    pool.close_all()

    assert_at_least_once([r for m in members for r in m.processed], first | second)
    orphaned_records = {po for po in second if po[0] in orphaned}
    assert orphaned_records
    assert orphaned_records <= _processed_by(survivors)
    assert not {(r.partition, r.offset) for r in victim.processed} & second  # it was dead by then


def _churn_producer(bootstrap: str, stop: threading.Event, produced: list[tuple[int, int]]) -> Callable[[], None]:
    def run() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
        errors: list[Any] = []

        def report(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                produced.append((msg.partition(), msg.offset()))

        seq = 0
        try:
            while not stop.is_set():
                for k in range(20):
                    producer.produce("t", key=f"k{k}".encode(), value=f"k{k}:{seq}".encode(), on_delivery=report)
                seq += 1
                producer.poll(0)
                stop.wait(0.02)  # pacing: at most ~1000 records/s, steady rather than a flood
        finally:
            assert producer.flush(15) == 0
        assert not errors, errors

    return run


@pytest.mark.slow
@pytest.mark.parametrize("client", CLIENTS)
def test_at_least_once_and_per_key_order_while_members_join_leave_and_crash(
    fast_broker: ThreadBroker, pool: MemberPool, client: str
) -> None:
    """While a producer writes 20 keys to 6 partitions without pause, members (child
    processes) join, leave cleanly (SIGTERM: LeaveGroup) and crash (SIGKILL): 6 joins, 1
    leave, 3 crashes (one of a member
    killed right after subscribing), each step taken once the group
    has made progress since the previous one (a joiner once it has processed
    records).  At the end:

    - every produced record was processed at least once by some member, and
    - per-key order held within every contiguous processing run — the records one
      member processed from one partition between two of its rebalance callbacks: in
      each run offsets rise by exactly 1, and each key's sequence numbers rise by
      exactly 1 (in production order, none skipped, none repeated).  Redelivery after a
      rebalance (at-least-once) starts a new run and may repeat records; it never skips.
    """
    bootstrap = fast_broker.bootstrap
    create_topic(bootstrap, "t", 6)
    stop = threading.Event()
    produced: list[tuple[int, int]] = []
    producer_thread = threading.Thread(target=_churn_producer(bootstrap, stop, produced), name="churn-producer")

    def join() -> None:
        """Start a member and wait until it took part: got partitions, processed some."""
        member = pool.child(client, bootstrap, "churn", "t", **FAST)
        live.append(member)
        wait_until(lambda: member.processed, 12, f"{member.name} to join and process records")

    def progress(n: int = 200) -> None:
        """Wait until the group processed `n` more records than now."""
        base = len(pool.journal.records())
        wait_until(lambda: len(pool.journal.records()) >= base + n, 10, f"{n} more records processed")

    live: list[ChildMember] = []
    producer_thread.start()
    try:
        join()
        join()
        progress()
        join()
        progress()
        live.pop(0).close()  # leave
        progress()
        live.pop(0).kill()  # crash: its partitions stall until its session expires...
        join()  # ...and this join completes only then
        progress()
        join()
        live.pop(1).kill()  # another crash
        progress()
        doomed = pool.child(client, bootstrap, "churn", "t", **FAST)
        wait_until(doomed.started.is_set, 10, "a member to subscribe")
        doomed.kill()  # a crash right after subscribing, its join under way: no waiting for it for ever
        progress()
        join()
        progress()
    finally:
        stop.set()
        producer_thread.join(20)
    assert not producer_thread.is_alive()
    everything = set(produced)
    assert len(everything) == len(produced) > 1000
    wait_until(lambda: set(coverage(pool.journal.records())) >= everything, 12, "every produced record to be processed")
    assert is_balanced(live, 6)
    pool.close_all()

    records = pool.journal.records()
    assert_at_least_once(records, everything)
    run_count = assert_runs_in_order(records)
    assert run_count > 6  # the partitions did move around
    duplicates = sum(coverage(records).values()) - len(everything)
    print(f"\n{len(everything)} records, {run_count} runs, {duplicates} redelivered")


# --- rebalance speed ---------------------------------------------------------------------


async def test_a_new_aiokafka_group_of_four_is_balanced_promptly(broker: ThreadBroker) -> None:
    """Four aiokafka consumers with default settings subscribe together to an
    8-partition topic: every partition is assigned, 2 each. The time is printed; how fast is
    measured by `python -m loadtest.bench_groups`, not asserted here."""
    create_topic(broker.bootstrap, "speed", 8)
    consumers = [AIOKafkaConsumer("speed", bootstrap_servers=broker.bootstrap, group_id="speed") for _ in range(4)]
    start = time.monotonic()
    try:
        await asyncio.gather(*(c.start() for c in consumers))
        async with asyncio.timeout(60):
            while sorted(len(c.assignment()) for c in consumers) != [2, 2, 2, 2]:
                await asyncio.gather(*(c.getmany(timeout_ms=10) for c in consumers))
        elapsed = time.monotonic() - start
        assert sorted(tp.partition for c in consumers for tp in c.assignment()) == list(range(8))
    finally:
        await asyncio.gather(*(c.stop() for c in consumers))
    print(f"\naiokafka group of 4 balanced {elapsed * 1000:.0f} ms after subscribing")


def test_a_new_confluent_group_of_four_is_balanced_promptly(broker: ThreadBroker) -> None:
    """Four confluent-kafka consumers with default settings subscribe together to an
    8-partition topic: every partition is assigned, 2 each. The time is printed; how fast is
    measured by `python -m loadtest.bench_groups`, not asserted here."""
    create_topic(broker.bootstrap, "speed", 8)
    consumers = [Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "speed"}) for _ in range(4)]
    try:
        start = time.monotonic()
        for c in consumers:
            c.subscribe(["speed"])
        deadline = start + 60
        while sorted(len(c.assignment()) for c in consumers) != [2, 2, 2, 2]:
            assert time.monotonic() < deadline, "the group was not balanced within 60 s"
            for c in consumers:
                c.poll(0.005)
        elapsed = time.monotonic() - start
        assert sorted(tp.partition for c in consumers for tp in c.assignment()) == list(range(8))
    finally:
        for c in consumers:
            c.close()
    print(f"\nconfluent-kafka group of 4 balanced {elapsed * 1000:.0f} ms after subscribing")
