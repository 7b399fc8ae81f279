"""Faults of the broker process, judged by histories (tests/support/history.py): SIGKILLed
again and again under an idempotent acks=all producer, and SIGSTOPped longer than the
clients' timeouts while a producer streams and a consumer group commits."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest

from tests.support.fault_clients import Fleet, KeyedProducer, producer_sessions, read_back, wait_until
from tests.support.harness import BrokerProcess
from tests.support.history import (
    Fault,
    History,
    Produced,
    Read,
    commit_regressed,
    duplicated_in_log,
    lost_acknowledged,
    lost_to_group,
    redelivered_after_commit,
)
from tests.support.kafka_clients import create_topic

pytestmark = pytest.mark.fault


def _acked(history: History) -> int:
    return sum(1 for p in history.of(Produced) if p.outcome == "acked")


def test_broker_sigkilled_three_times_under_idempotent_acks_all_loses_and_duplicates_nothing(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    """An idempotent acks=all producer streams to four partitions; three times the broker is
    SIGKILLed with records in flight and restarted at once.  The producer retries what was
    in flight: every acknowledged record is in the log at its acknowledged offset, and no
    record is stored twice (a retry of a batch written before the kill is recognised)."""
    broker = broker_process_factory()
    topic, partitions = "faults-kill", 4
    create_topic(broker.bootstrap, topic, partitions)
    history = History()
    producer = KeyedProducer(broker.bootstrap, topic, history, b"m", **{"message.timeout.ms": 60_000})
    for round_ in range(1, 4):
        target = round_ * 1500
        deadline = time.monotonic() + 60
        while _acked(history) < target:  # stream until well under way
            assert time.monotonic() < deadline, f"round {round_}: {_acked(history)} of {target} acknowledged"
            producer.send(50)
            producer.producer.poll(0.01)
        producer.send(400)  # in flight at the kill
        history.add(Fault(what="SIGKILL", target="broker", at=time.monotonic()))
        broker.kill()
        broker.start()
    assert producer.flush(60) == 0
    sent = producer.sent
    outcomes = [p.outcome for p in history.of(Produced)]
    assert len(outcomes) == sent

    stored = read_back(history, broker.bootstrap, topic, partitions)
    print(f"\n{sent} sent, {stored} stored; {history.summary()}")
    assert lost_acknowledged(history) == []
    assert duplicated_in_log(history) == []
    assert outcomes.count("acked") == sent  # the restarts were within the message timeout


def test_broker_sigstopped_longer_than_client_timeouts_keeps_acks_and_commits(
    broker_process_factory: Callable[..., BrokerProcess], fleet: Fleet
) -> None:
    """The broker is SIGSTOPped for longer than the producer's message timeout and the group's
    session timeout while a producer streams and two consumer processes of a group commit
    after each batch; then SIGCONTinued.  Records whose delivery timed out may or may not be in
    the log, but every acknowledged one is, none twice under one producer epoch; the group
    reads every stored record, and never again one below a commit it was told succeeded."""
    broker = broker_process_factory({"group.min.session.timeout.ms": "1000"})
    topic, partitions, group = "faults-pause", 3, "paused"
    create_topic(broker.bootstrap, topic, partitions)
    history = History()
    for name in ("c1", "c2"):
        fleet.start("consume", name, bootstrap=broker.bootstrap, topic=topic, group=group, member=name)
    producer = KeyedProducer(
        broker.bootstrap, topic, history, b"m", **{"message.timeout.ms": 3000, "request.timeout.ms": 2000}
    )

    def group_read() -> int:
        return sum(1 for name in ("c1", "c2") for e in fleet.history(name) if isinstance(e, Read))

    producer.stream(1.0)
    wait_until(lambda: group_read() > 0, "the group to read")
    assert broker.proc is not None
    pid = broker.proc.pid
    history.add(Fault(what="SIGSTOP", target="broker", at=time.monotonic()))
    os.kill(pid, signal.SIGSTOP)
    try:
        producer.stream(8.0)  # past the 3 s message timeout and the 6 s session timeout
    finally:
        history.add(Fault(what="SIGCONT", target="broker", at=time.monotonic()))
        os.kill(pid, signal.SIGCONT)
    producer.stream(2.0)
    assert producer.flush(30) == 0
    sent = producer.sent
    assert len(list(history.of(Produced))) == sent
    produced_history = History(list(history.events))
    stored = read_back(produced_history, broker.bootstrap, topic, partitions)
    sessions = producer_sessions(broker.bootstrap, topic, partitions)
    fleet.wait_for_group(produced_history, group, ["c1", "c2"])
    for name in ("c1", "c2"):
        fleet.stop(name)
    history = produced_history
    fleet.load_into(history)
    outcomes = [p.outcome for p in history.of(Produced)]
    print(f"\n{sent} sent, {stored} stored, {outcomes.count('unknown')} timed out; {history.summary()}")
    assert outcomes.count("unknown") > 0  # the pause did outlast the message timeout
    assert lost_acknowledged(history) == []
    # Timed-out records bump the producer's epoch, and a record resent under a new epoch is
    # a new record to any broker: copies are allowed across epochs, never within one.
    resent = len(duplicated_in_log(history)) - len(duplicated_in_log(history, sessions))
    print(f"{resent} records stored again under a later producer epoch")
    assert duplicated_in_log(history, sessions) == []
    assert lost_to_group(history, group) == []
    assert redelivered_after_commit(history) == []
    assert commit_regressed(history) == []
