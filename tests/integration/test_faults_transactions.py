"""Transactions under faults, judged by histories (tests/support/history.py): a transactional
producer (confluent-kafka, a child process) SIGKILLed mid-transaction, and the broker
SIGKILLed while a producer commits.  Read back under read_committed, every transaction is
wholly visible or wholly invisible, and every one the producer was told committed is visible."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.support.fault_clients import Fleet, read_back, wait_until
from tests.support.harness import BrokerProcess
from tests.support.history import Fault, History, Stored, Transaction, partial_transactions
from tests.support.kafka_clients import create_topic

pytestmark = pytest.mark.fault

PARTITIONS = 2


def _committed(fleet: Fleet, name: str) -> int:
    return sum(1 for e in fleet.history(name) if isinstance(e, Transaction) and e.outcome == "committed")


def _producer(fleet: Fleet, name: str, bootstrap: str, topic: str, transactional_id: str, **options: object) -> None:
    fleet.start("transact", name, bootstrap=bootstrap, topic=topic, transactional_id=transactional_id,
                records=5, partitions=PARTITIONS, **options)  # fmt: skip


def test_a_transactional_producer_sigkilled_mid_transaction_leaves_it_wholly_invisible(
    broker_process_factory: Callable[..., BrokerProcess], fleet: Fleet
) -> None:
    """A producer commits twenty transactions of five records over two partitions, then
    writes half of the next one and is SIGKILLed; a successor with the same transactional id
    fences it (its open transaction is aborted) and commits five more.  Under read_committed
    every transaction is all or nothing (the half-written one, in the log as read_uncommitted
    shows, is invisible), and each one reported committed is there."""
    broker = broker_process_factory()
    topic = "faults-txn-client"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    history = History()
    _producer(fleet, "first", broker.bootstrap, topic, "tx-a", stall_at=20)
    wait_until(lambda: fleet.path("first").with_suffix(".stalled").exists(), "the producer to stall mid-transaction")
    fleet.kill("first", history)
    _producer(fleet, "second", broker.bootstrap, topic, "tx-a", transactions=5)
    assert fleet.procs["second"].wait(60) == 0
    stored = read_back(history, broker.bootstrap, topic, PARTITIONS)
    fleet.load_into(history)
    uncommitted = History()
    read_back(uncommitted, broker.bootstrap, topic, PARTITIONS, isolation="read_uncommitted")
    print(f"\n{stored} records visible; {history.summary()}")
    assert _committed(fleet, "first") == 20
    assert _committed(fleet, "second") == 5
    assert {s.value for s in uncommitted.of(Stored)} >= {b"first-20-0", b"first-20-1"}  # half of it was written
    assert partial_transactions(history) == []


def test_the_broker_sigkilled_mid_commit_keeps_every_transaction_all_or_nothing(
    broker_process_factory: Callable[..., BrokerProcess], fleet: Fleet
) -> None:
    """A producer commits transactions back to back while the broker is SIGKILLed (most of
    the producer's time is spent committing) and restarted, twice.  The producer carries on
    after each restart; under read_committed every transaction is all or nothing, and each
    one reported committed is there."""
    broker = broker_process_factory()
    topic = "faults-txn-broker"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    history = History()
    _producer(fleet, "producer", broker.bootstrap, topic, "tx-b")
    for round_ in range(2):
        target = _committed(fleet, "producer") + 10

        def progressed(target: int = target) -> bool:
            return _committed(fleet, "producer") >= target

        wait_until(progressed, f"round {round_}: ten more transactions")
        history.add(Fault(what="SIGKILL", target="broker", at=time.monotonic()))
        broker.kill()
        broker.start()
    done = _committed(fleet, "producer")
    wait_until(lambda: _committed(fleet, "producer") >= done + 10, "ten transactions after the last restart")
    assert fleet.stop("producer") == 0
    stored = read_back(history, broker.bootstrap, topic, PARTITIONS)
    fleet.load_into(history)
    print(f"\n{stored} records visible; {history.summary()}")
    assert partial_transactions(history) == []
