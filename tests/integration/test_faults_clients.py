"""Faults of the clients, judged by histories (tests/support/history.py): a consumer group
member SIGKILLed mid-stream, a share-group member SIGKILLed while it holds records, and
members of every group type racing their first requests.  The members are child processes
(tests/support/fault_clients.py) writing what they were told and what they read."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from tests.support.configs import set_group_configs
from tests.support.fault_clients import Barrier, Fleet, confluent_delivery, read_back, wait_until
from tests.support.harness import BrokerProcess
from tests.support.history import (
    Acknowledged,
    Committed,
    History,
    Owned,
    Read,
    Stored,
    accepted_redelivered,
    commit_regressed,
    held_by_two,
    lost_acknowledged,
    lost_to_group,
    owned_by_two,
    redelivered_after_commit,
    repeated_delivery_count,
)
from tests.support.kafka_clients import create_topic

pytestmark = pytest.mark.fault

LOCK_MS = 3000
SETTINGS = {
    # Dead members' partitions move within seconds, not Kafka's 45 s.
    "group.min.session.timeout.ms": "1000",
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.session.timeout.ms": "6000",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.record.lock.duration.ms": str(LOCK_MS),
}


def _produce(history: History, bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    report = confluent_delivery(history, "producer")
    for i, value in enumerate(values):
        producer.produce(topic, key=b"%d" % (i % 64), value=value, on_delivery=report)
        producer.poll(0)
    assert producer.flush(30) == 0


def _with(history: History, fleet: Fleet, names: list[str]) -> History:
    h = History(list(history.events))
    for name in names:
        h.extend(fleet.history(name))
    return h


def _accepted(fleet: Fleet, names: list[str]) -> set[tuple[str, int, int]]:
    return {
        (e.topic, e.partition, e.offset)
        for name in names
        for e in fleet.history(name)
        if isinstance(e, Acknowledged) and e.ack == "accept" and e.outcome == "acked"
    }


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_consumer_sigkilled_mid_stream_loses_nothing_and_no_commit_is_read_again(
    broker_process_factory: Callable[..., BrokerProcess], fleet: Fleet, protocol: str
) -> None:
    """Three consumer processes of a group read four partitions while records arrive, each
    committing after every batch; one is SIGKILLed mid-stream.  The other two take its
    partitions over: the group reads every record, no partition is owned by two members at
    once, and no record below a commit the group was told succeeded is read again (records
    the killed member read but had not committed may be: at-least-once)."""
    broker = broker_process_factory(SETTINGS)
    topic, partitions, group = f"faults-member-{protocol}", 4, f"members-{protocol}"
    create_topic(broker.bootstrap, topic, partitions)
    history = History()
    names = ["m1", "m2", "m3"]
    for name in names:
        fleet.start("consume", name, bootstrap=broker.bootstrap, topic=topic, group=group, member=name,
                    protocol=protocol)  # fmt: skip

    def read_by(name: str) -> int:
        return sum(1 for e in fleet.history(name) if isinstance(e, Read))

    sent = 0
    while read_by("m1") < 200:  # mid-stream: m1 reads and commits while records still arrive
        _produce(history, broker.bootstrap, topic, [b"r%06d" % (sent + i) for i in range(100)])
        sent += 100
        assert sent < 20_000, "m1 read nothing"
    fleet.kill("m1", history)
    for _ in range(10):
        _produce(history, broker.bootstrap, topic, [b"r%06d" % (sent + i) for i in range(100)])
        sent += 100
    stored = read_back(history, broker.bootstrap, topic, partitions)
    wait_until(lambda: lost_to_group(_with(history, fleet, names), group) == [], "the group to read everything")
    for name in names[1:]:
        fleet.stop(name)
    fleet.load_into(history)
    print(f"\n{protocol}: {sent} sent, {stored} stored; {history.summary()}")
    assert lost_acknowledged(history) == []
    assert lost_to_group(history, group) == []
    assert owned_by_two(history) == []
    assert redelivered_after_commit(history) == []
    assert commit_regressed(history) == []


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_consumer_sigstopped_past_its_session_never_commits_over_its_successors(
    broker_process_factory: Callable[..., BrokerProcess], fleet: Fleet, protocol: str
) -> None:
    """One of three consumer processes of a group is SIGSTOPped for longer than its session
    timeout while records arrive; the others take its partitions over and commit.  Resumed,
    whatever it fetched before the pause and commits now is refused, as its membership
    (generation, member epoch) is gone.  The group reads every record and never again one
    below a commit it was told succeeded."""
    broker = broker_process_factory(SETTINGS)
    topic, partitions, group = f"faults-zombie-{protocol}", 4, f"zombies-{protocol}"
    create_topic(broker.bootstrap, topic, partitions)
    history = History()
    names = ["m1", "m2", "m3"]
    for name in names:
        fleet.start("consume", name, bootstrap=broker.bootstrap, topic=topic, group=group, member=name,
                    protocol=protocol)  # fmt: skip
    sent = 0

    def produce(batches: int) -> None:
        nonlocal sent
        for _ in range(batches):
            _produce(history, broker.bootstrap, topic, [b"z%06d" % (sent + i) for i in range(100)])
            sent += 100

    def owns(name: str) -> bool:
        return any(isinstance(e, Owned) for e in fleet.history(name))

    wait_until(lambda: all(owns(n) for n in names), "every member to own partitions")
    produce(3)
    fleet.pause("m1", history)

    # Past the 6 s session timeout: the others own every partition again and read on.
    def taken_over() -> bool:
        h = _with(History(), fleet, names[1:])
        return {(o.topic, o.partition) for o in _owned_now(h)} == {(topic, p) for p in range(partitions)}

    produce(3)
    wait_until(taken_over, "the other members to take the paused one's partitions")
    produce(3)
    fleet.resume("m1", history)
    produce(3)
    stored = read_back(history, broker.bootstrap, topic, partitions)
    wait_until(lambda: lost_to_group(_with(history, fleet, names), group) == [], "the group to read everything")
    for name in names:
        fleet.stop(name)
    fleet.load_into(history)
    refused = sum(1 for c in history.of(Committed) if c.member == "m1" and c.outcome == "failed")
    print(f"\n{protocol}: {sent} sent, {stored} stored, {refused} of m1's commits refused; {history.summary()}")
    assert lost_acknowledged(history) == []
    assert lost_to_group(history, group) == []
    assert redelivered_after_commit(history) == []
    assert commit_regressed(history) == []


def _owned_now(history: History) -> list[Owned]:
    """The ownerships a history leaves open."""
    latest: dict[tuple[str, str, int, float], Owned] = {}
    for o in history.of(Owned):
        key = (o.member, o.topic, o.partition, o.since)
        if key not in latest or o.until is not None:
            latest[key] = o
    return [o for o in latest.values() if o.until is None]


def _share_checks(history: History) -> list[str]:
    return held_by_two(history, LOCK_MS) + repeated_delivery_count(history) + accepted_redelivered(history)


@pytest.mark.parametrize("fault", ["SIGKILL", "SIGSTOP"])
def test_a_share_member_that_dies_or_stalls_holding_records_never_shares_them_while_held(
    broker_process_factory: Callable[..., BrokerProcess], fleet: Fleet, fault: str
) -> None:
    """A share-group member takes records and holds them unacknowledged while two others
    accept everything else; then it is SIGKILLed (its connection, and so its share session,
    ends: Kafka releases what it held at once) or SIGSTOPped (its session stays open: what it
    held goes only when the locks run out, each a delivery more).  No record is ever held by
    two members at once, each delivery has a delivery count of its own (a stalled member's
    records come back with a higher one), every record is accepted in the end and none
    accepted is delivered again."""
    broker = broker_process_factory(SETTINGS)
    topic, group = "faults-share", "share-held"
    create_topic(broker.bootstrap, topic, 1)
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    history = History()
    _produce(history, broker.bootstrap, topic, [b"s%05d" % i for i in range(300)])
    fleet.start("share", "holder", bootstrap=broker.bootstrap, topic=topic, group=group, member="holder", hold=True,
                max_records=20)  # fmt: skip
    wait_until(lambda: any(isinstance(e, Read) for e in fleet.history("holder")), "the holder to take records")
    _produce(history, broker.bootstrap, topic, [b"s%05d" % i for i in range(300, 600)])  # the others' share
    workers = ["w1", "w2"]
    for name in workers:
        fleet.start("share", name, bootstrap=broker.bootstrap, topic=topic, group=group, member=name, max_records=20)
    wait_until(lambda: len(_accepted(fleet, workers)) > 50, "the workers to accept records")
    (fleet.kill if fault == "SIGKILL" else fleet.pause)("holder", history)
    held = {(e.topic, e.partition, e.offset) for e in fleet.history("holder") if isinstance(e, Read)}
    stored = read_back(history, broker.bootstrap, topic, 1)
    everything = {(topic, 0, o) for o in range(stored)}
    wait_until(lambda: _accepted(fleet, workers) == everything, "every record to be accepted", timeout=90)
    for name in workers:
        fleet.stop(name)
    fleet.load_into(history)
    print(f"\n{fault}: {len(held)} held by the holder; {history.summary()}")
    assert held
    assert held <= _accepted(fleet, workers)
    assert _share_checks(history) == []
    if fault == "SIGSTOP":
        counts = {e.offset: e.delivery_count for e in history.of(Read) if e.member in workers}
        assert all((counts[o] or 0) >= 2 for _, _, o in held)


def test_share_members_closing_with_acknowledgements_pending_never_see_them_delivered_again(
    broker_process_factory: Callable[..., BrokerProcess], fleet: Fleet
) -> None:
    """Share-group members, one after the other, take records, accept them and close at once,
    the acceptances riding on the close (which returns when the broker confirmed them); then a
    worker accepts what is left.  No accepted record is delivered again, none is held by two
    members at once, and every record is accepted."""
    broker = broker_process_factory(SETTINGS)
    topic, group = "faults-share-close", "share-close"
    create_topic(broker.bootstrap, topic, 1)
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    history = History()
    closers = [f"closer{i}" for i in range(4)]
    for name in closers:
        _produce(history, broker.bootstrap, topic, [b"%s-%03d" % (name.encode(), i) for i in range(100)])
        proc = fleet.start("share", name, bootstrap=broker.bootstrap, topic=topic, group=group, member=name,
                           close_with_acks=True)  # fmt: skip
        assert proc.wait(60) == 0
    _produce(history, broker.bootstrap, topic, [b"after-%03d" % i for i in range(100)])
    fleet.start("share", "worker", bootstrap=broker.bootstrap, topic=topic, group=group, member="worker")
    stored = read_back(history, broker.bootstrap, topic, 1)
    everything = {(topic, 0, o) for o in range(stored)}
    members = ["worker", *closers]
    wait_until(lambda: _accepted(fleet, members) == everything, "every record to be accepted", timeout=90)
    fleet.stop("worker")
    fleet.load_into(history)
    print(f"\n{history.summary()}")
    assert _accepted(fleet, closers) == {(topic, 0, o) for o in range(400)}  # each closer accepted its 100
    assert _share_checks(history) == []


def test_members_racing_their_first_requests_each_own_a_partition_or_hold_a_record_alone(
    broker_process_factory: Callable[..., BrokerProcess], fleet: Fleet
) -> None:
    """Three classic consumers, three `group.protocol=consumer` consumers and three share
    consumers, each group in its own processes, send their first requests at the same instant
    (a start time all of them wait for).  In each consumer group every partition is owned by
    one member at a time and every record read, none again below an acknowledged commit; in
    the share group every record is accepted, never held by two members at once."""
    broker = broker_process_factory(SETTINGS)
    topic, partitions = "faults-race", 6
    create_topic(broker.bootstrap, topic, partitions)
    set_group_configs(broker.bootstrap, "race-share", {"share.auto.offset.reset": "earliest"})
    history = History()
    _produce(history, broker.bootstrap, topic, [b"q%05d" % i for i in range(1200)])
    stored = read_back(history, broker.bootstrap, topic, partitions)
    barrier = Barrier(fleet.directory / "go")
    groups = {"race-classic": "classic", "race-consumer": "consumer"}
    for group, protocol in groups.items():
        for i in range(3):
            name = f"{protocol}{i}"
            fleet.start("consume", name, bootstrap=broker.bootstrap, topic=topic, group=group, member=name,
                        protocol=protocol, barrier=barrier.path)  # fmt: skip
    sharers = [f"share{i}" for i in range(3)]
    for name in sharers:
        fleet.start("share", name, bootstrap=broker.bootstrap, topic=topic, group="race-share", member=name,
                    max_records=10, barrier=barrier.path)  # fmt: skip
    try:
        go = barrier.release_when_ready(fleet, list(fleet.procs))
    finally:
        barrier.close()
    consumers = [name for name in fleet.procs if name not in sharers]
    everything = {(topic, p, o) for p, o in ((s.partition, s.offset) for s in history.of(Stored))}
    for group in groups:

        def read_all(group: str = group) -> bool:
            return lost_to_group(_with(history, fleet, consumers), group) == []

        wait_until(read_all, f"{group} to read every record")
    wait_until(lambda: _accepted(fleet, sharers) == everything, "race-share to accept every record", timeout=90)
    codes = {name: fleet.stop(name) for name in list(fleet.procs)}
    fleet.load_into(history)
    print(f"\n{stored} records; {history.summary()}")
    assert codes == dict.fromkeys(codes, 0)
    first = {e.member: e.received for e in sorted(history.of(Read), key=lambda e: -e.received)}
    print(f"first records {min(first.values()) - go:.3f} to {max(first.values()) - go:.3f} s after the release")
    for group in groups:
        assert lost_to_group(history, group) == []
    assert owned_by_two(history) == []
    assert redelivered_after_commit(history) == []
    assert commit_regressed(history) == []
    assert _share_checks(history) == []
