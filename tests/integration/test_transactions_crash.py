"""Transactions across crashes: a producer SIGKILLed mid-transaction holds read_committed
readers back only until the broker aborts it at its timeout; a broker SIGKILLed mid-transaction
comes back with its committed transactions visible, its open one still open (and then aborted
by the producer's next instance), and no aborted record ever visible at read_committed."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from broker.txn.state import TxnMetadata, TxnState
from tests.support.harness import REPO, BrokerProcess, ThreadBroker
from tests.support.kafka_clients import confluent_produce, create_topic
from tests.support.kafka_wire import connect
from tests.support.txn_clients import committed_offset, producer, read_values

READ_COMMITTED = 1
TIMEOUT_MS = 3000

# A transactional producer that commits one transaction, leaves a second open with its
# records on disk, says so, and waits to be killed.
_HANGING = """
import sys, time
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": "hanging",
              "transaction.timeout.ms": int(sys.argv[3])})
p.init_transactions(15)
p.begin_transaction()
p.produce(sys.argv[2], value=b"before")
p.commit_transaction(15)
p.begin_transaction()
for i in range(3):
    p.produce(sys.argv[2], value=b"hanging-%d" % i)
assert p.flush(15) == 0
print("open", flush=True)
time.sleep(600)
"""


def _lso(bootstrap: str, topic: str) -> tuple[int, int]:
    """(last stable offset, high watermark) of partition 0, from ListOffsets."""
    with connect(bootstrap) as conn:
        committed = conn.list_offsets(topic, 0, -1, isolation=READ_COMMITTED).offset
        latest = conn.list_offsets(topic, 0, -1).offset
    return committed, latest


def _settled(broker: ThreadBroker, transactional_id: str) -> TxnMetadata:
    """The id's state once its transaction is completed (the markers are readable a moment
    before the completion is stored)."""
    deadline = time.monotonic() + 10
    while True:
        txn = broker.call(lambda: broker.broker.transactions.txns[transactional_id])
        if txn.state.settled or time.monotonic() > deadline:
            return txn
        time.sleep(0.05)


def test_a_killed_producers_transaction_blocks_readers_until_its_timeout(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    broker = broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    topic = "hang"
    create_topic(broker.bootstrap, topic)
    # The transaction begins after this and before "open" is read: the broker's timeout, counted
    # from its beginning, cannot end it before started + timeout, nor after opened + timeout.
    started = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-c", _HANGING, broker.bootstrap, topic, str(TIMEOUT_MS)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "open"
        opened = time.monotonic()
    finally:
        child.kill()  # SIGKILL: the transaction is left open
        child.wait(10)
        if child.stdout is not None:
            child.stdout.close()
    confluent_produce(broker.bootstrap, topic, [{"value": b"after"}])
    stable, end = _lso(broker.bootstrap, topic)
    # before (0), its commit marker (1), three open records (2-4), then "after" (5).
    assert (stable, end) == (2, 6)
    with connect(broker.bootstrap) as conn:
        held = conn.fetch(topic, {0: 0}, isolation=READ_COMMITTED)[0]
    assert held.last_stable_offset == 2
    assert held.high_watermark == 6
    # Until the timeout, read_committed stops at the open transaction.
    early = read_values("confluent", broker.bootstrap, topic, committed=True, until=b"after", timeout=1)
    assert early == [b"before"]
    assert time.monotonic() - opened < TIMEOUT_MS / 1000, "the check ran too late to see the block"
    # The broker aborts it at its timeout, with a bumped epoch; then "after" is readable.
    seen = read_values("confluent", broker.bootstrap, topic, committed=True, until=b"after", timeout=30)
    assert seen == [b"before", b"after"]
    assert time.monotonic() - started >= TIMEOUT_MS / 1000
    stable, end = _lso(broker.bootstrap, topic)
    assert stable == end == 7  # the abort marker came last
    txn = _settled(broker, "hanging")
    assert (txn.state.value, txn.producer_epoch) == ("CompleteAbort", 1)
    assert broker.broker.transactions.timed_out == 1
    with connect(broker.bootstrap) as conn:
        part = conn.fetch(topic, {0: 0}, isolation=READ_COMMITTED)[0]
    assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(txn.producer_id, 2)]


@pytest.mark.slow
def test_broker_sigkill_mid_transaction_keeps_commits_and_never_shows_the_open_one(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    proc = broker_process_factory()
    topic = "crash"
    create_topic(proc.bootstrap, topic, 2)
    p = producer("confluent", proc.bootstrap, "crashing")
    p.init()
    p.begin()
    p.send(topic, b"committed-0", partition=0)
    p.send(topic, b"committed-1", partition=1)
    p.commit()
    p.begin()
    for i in range(20):
        p.send(topic, b"open-%d" % i, partition=i % 2)
    p.flush()  # on disk, undecided
    proc.kill()
    proc.start()
    # The open transaction survives the crash: still open, still holding read_committed back.
    committed_only = read_values("confluent", proc.bootstrap, topic, committed=True, until=b"committed", partitions=2)
    assert sorted(committed_only) == [b"committed-0", b"committed-1"]
    stable, end = _lso(proc.bootstrap, topic)
    assert stable == 2  # committed-0 and its marker
    assert end == 12
    # The producer's next instance fences the old one and aborts its transaction.
    successor = producer("confluent", proc.bootstrap, "crashing")
    try:
        successor.init()
        successor.begin()
        successor.send(topic, b"after-0", partition=0)
        successor.send(topic, b"after-1", partition=1)
        successor.commit()
    finally:
        successor.close()
    got = read_values("confluent", proc.bootstrap, topic, committed=True, until=b"after", partitions=2)
    assert sorted(got) == [b"after-0", b"after-1", b"committed-0", b"committed-1"]
    everything = read_values("confluent", proc.bootstrap, topic, committed=False, until=b"after", partitions=2)
    assert len(everything) == 24
    # And again after a second kill: the aborted range is recovered, not re-exposed.
    proc.kill()
    proc.start()
    for client in ("confluent", "aiokafka", "kafka-python"):
        again = read_values(client, proc.bootstrap, topic, committed=True, until=b"after", partitions=2)
        assert sorted(again) == sorted(got), client


def test_a_decided_transaction_is_completed_by_the_next_start(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    """A stop between the stored decision (PrepareCommit) and the markers: the next start
    writes the markers and commits the transaction's offsets."""
    broker = broker_factory(name="decided")
    create_topic(broker.bootstrap, "src")
    create_topic(broker.bootstrap, "dst", 2)
    p = producer("confluent", broker.bootstrap, "decided")
    try:
        p.init()
        p.begin()
        p.send("dst", b"out-0", partition=0)
        p.send("dst", b"out-1", partition=1)
        p.send_offsets({("src", 0): 7}, "decider")
        p.flush()

        async def decide_then_stop() -> None:
            coordinator = broker.broker.transactions
            meta = coordinator.txns["decided"]
            await coordinator._store(meta.evolve(state=TxnState.PREPARE_COMMIT), "decided")

        broker.run(decide_then_stop())
    finally:
        p.close()
    broker.close()  # the decision is stored; no marker was written
    restarted = broker_factory(name="decided")
    txn = _settled(restarted, "decided")
    assert txn.state == TxnState.COMPLETE_COMMIT
    got = read_values("confluent", restarted.bootstrap, "dst", committed=True, until=b"out", partitions=2)
    assert sorted(got) == [b"out-0", b"out-1"]
    assert committed_offset(restarted.bootstrap, "decider", "src") == 7
