"""Power loss and lost writeback, judged by histories.  The broker runs on a modelled disk
(tests/support/lostwrites.py): what no fsync covered is gone after a simulated power loss,
and an fsync can fail with its pages lost.  The durability contract says acks=all records,
acknowledged commits and committed transactions survive the machine, not just the process;
these tests hold the broker to it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from tests.support.fault_clients import Fleet, KeyedProducer, read_back, wait_until
from tests.support.harness import BrokerProcess
from tests.support.history import (
    Committed,
    Fault,
    History,
    Produced,
    Stored,
    Transaction,
    duplicated_in_log,
    lost_acknowledged,
    lost_to_group,
    partial_transactions,
    redelivered_after_commit,
)
from tests.support.kafka_clients import create_topic
from tests.support.kafka_wire import batch, connect
from tests.support.lostwrites import Disk

pytestmark = pytest.mark.fault


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Disk]:
    proc = BrokerProcess(tmp_path / "broker", {"group.min.session.timeout.ms": "1000"})
    modelled = Disk(proc, tmp_path / "build")
    proc.env = modelled.env()
    try:
        yield modelled
    finally:
        proc.kill()


def test_power_loss_keeps_every_acks_all_record_commit_and_committed_transaction(disk: Disk, fleet: Fleet) -> None:
    """An idempotent acks=all producer, a consumer group committing after each batch and a
    transactional producer run while the machine loses power twice (the broker SIGKILLed and
    every write no fsync covered dropped), the broker restarted each time.  Every acknowledged
    record is in the log at its offset, once; the group never reads again below a commit it
    was told succeeded and misses nothing; every transaction is all or nothing under
    read_committed, every committed one visible."""
    broker = disk.proc.start()
    topic, partitions, group, txn_topic = "power", 3, "survivors", "power-txn"
    create_topic(broker.bootstrap, topic, partitions)
    create_topic(broker.bootstrap, txn_topic, 2)
    history = History()
    fleet.start("consume", "c1", bootstrap=broker.bootstrap, topic=topic, group=group, member="c1")
    fleet.start(
        "transact", "tx", bootstrap=broker.bootstrap, topic=txn_topic, transactional_id="tx", partitions=2, records=4
    )
    producer = KeyedProducer(broker.bootstrap, topic, history, b"p", **{"message.timeout.ms": 60_000})

    acks_one = "power-acks1"
    create_topic(broker.bootstrap, acks_one, 1)
    unsynced: list[bytes] = []
    losses: list[tuple[int, int]] = []
    for _ in range(2):
        commits, txns = fleet.count("c1", Committed), fleet.count("tx", Transaction)
        producer.stream(1.0)
        wait_until(lambda c=commits: fleet.count("c1", Committed) > c, "the group to commit")  # type: ignore[misc]
        wait_until(lambda t=txns: fleet.count("tx", Transaction) > t + 2, "transactions to end")  # type: ignore[misc]
        with connect(broker.bootstrap) as c:  # acks=1: in the OS, not on the device
            for i in range(10):
                value = b"one-%d-%d" % (len(losses), i)
                if c.produce(acks_one, 0, batch([value]), acks=1).error_code == ErrorCode.none:
                    unsynced.append(value)
        history.add(Fault(what="power loss", target="broker", at=time.monotonic()))
        losses.append(disk.power_loss())
        broker.start()
    producer.stream(1.0)
    assert producer.flush(60) == 0
    sent = producer.sent
    assert len(list(history.of(Produced))) == sent

    produced = History(list(history.events))
    stored = read_back(produced, broker.bootstrap, topic, partitions)
    fleet.wait_for_group(produced, group, ["c1"])
    fleet.stop("c1")
    fleet.stop("tx")
    history = produced
    history.extend(fleet.history("c1"))
    transactions = History(fleet.history("tx"))
    read_back(transactions, broker.bootstrap, txn_topic, 2)
    print(f"\n{sent} sent, {stored} stored; files reset/emptied per power loss: {losses}; {history.summary()}")
    print(f"transactions: {transactions.summary()}")
    with connect(broker.bootstrap) as c:
        survived = [r.value for r in c.read_all(acks_one, 0)]
    print(f"acks=1 records that outlived the power losses: {len(survived)} of {len(unsynced)}")
    assert all(reset + emptied for reset, emptied in losses)  # each dropped writes no fsync covered
    assert len(survived) < len(unsynced)  # acks=1 promises the process, not the machine
    assert lost_acknowledged(history) == []
    assert duplicated_in_log(history) == []
    assert redelivered_after_commit(history) == []
    assert lost_to_group(history, group) == []
    assert partial_transactions(transactions) == []
    assert any(t.outcome == "committed" for t in transactions.of(Transaction))


def test_an_fsync_that_lost_its_pages_is_never_acknowledged_and_the_retry_is_stored_once(disk: Disk) -> None:
    """The fsync of a produce fails and the device never gets the batch (the kernel dropped
    the pages it could not write): the producer is told KAFKA_STORAGE_ERROR, its retry too,
    while the broker runs; after a power loss and restart the retry is stored, once."""
    broker = disk.proc.start()
    with connect(broker.bootstrap) as c:
        assert c.create_topic("fsyncgate", 1).error_code == ErrorCode.none
        producer_id, epoch = c.init_producer_id()

        def attempt(seq: int, value: bytes) -> ErrorCode:
            sent = batch([value], producer_id=producer_id, producer_epoch=epoch, base_sequence=seq)
            return ErrorCode(c.produce("fsyncgate", 0, sent).error_code)

        assert attempt(0, b"kept") == ErrorCode.none
        disk.fail_fsync()
        assert attempt(1, b"lost") == ErrorCode.kafka_storage_error
        disk.fail_fsync(False)
        assert attempt(1, b"lost") == ErrorCode.kafka_storage_error  # no second chance
    disk.power_loss()
    broker.start()
    with connect(broker.bootstrap) as c:
        assert [r.value for r in c.read_all("fsyncgate", 0)] == [b"kept"]  # the device never had it
        sent = batch([b"lost"], producer_id=producer_id, producer_epoch=epoch, base_sequence=1)
        assert c.produce("fsyncgate", 0, sent).error_code == ErrorCode.none
        assert [r.value for r in c.read_all("fsyncgate", 0)] == [b"kept", b"lost"]


def test_power_loss_keeps_the_cluster_id_deleted_records_and_aborted_transactions_hidden(disk: Disk) -> None:
    """The state beside the segments survives the machine too: the cluster id clients compare,
    a DeleteRecords that was acknowledged (its records stay gone), and the aborted
    transactions a read_committed consumer must never see."""
    broker = disk.proc.start()
    with connect(broker.bootstrap) as c:
        cluster_id = c.metadata([]).cluster_id
    create_topic(broker.bootstrap, "kept", 1)
    create_topic(broker.bootstrap, "txns", 1)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(10):
        producer.produce("kept", value=b"r%d" % i)
    assert producer.flush(30) == 0
    deleted = admin.delete_records([TopicPartition("kept", 0, 4)], operation_timeout=30)
    assert deleted[TopicPartition("kept", 0, 4)].result(30).low_watermark == 4

    transactional = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "pl", "linger.ms": 0})
    transactional.init_transactions(30)
    for i in range(6):
        transactional.begin_transaction()
        transactional.produce("txns", value=b"t%d-%s" % (i, b"commit" if i % 2 else b"abort"))
        if i % 2:
            transactional.commit_transaction(30)
        else:
            transactional.abort_transaction(30)
    disk.power_loss()
    broker.start()
    with connect(broker.bootstrap) as c:
        assert c.metadata([]).cluster_id == cluster_id
        assert c.fetch_partition("kept", 0, 0).error_code == ErrorCode.offset_out_of_range
        assert c.list_offsets("kept", 0, -2).offset == 4  # the earliest offset, as acknowledged
    history = History()
    read_back(history, broker.bootstrap, "txns", 1)
    assert sorted(s.value for s in history.of(Stored)) == [b"t1-commit", b"t3-commit", b"t5-commit"]
