"""The loss window of log.durability=page-cache, judged by histories: acknowledgements wait
for the write to the page cache, not for fdatasync.  A SIGKILL of the broker (a process crash)
loses nothing acknowledged, since the kernel keeps what was written; a power loss (modelled by
tests/support/lostwrites.py) loses exactly what was acknowledged since the last fsync, and
recovery opens a consistent log.  The fsync mode, measured the same way, loses nothing."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from tests.support.fault_clients import Fleet, KeyedProducer, confluent_delivery, read_back, wait_until
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

PAGE_CACHE = {"log.durability": "page-cache", "group.min.session.timeout.ms": "1000"}


def test_sigkill_in_page_cache_mode_loses_no_acknowledged_record_commit_or_transaction(
    broker_process_factory: Callable[..., BrokerProcess], fleet: Fleet
) -> None:
    """An idempotent acks=all producer, a consumer group committing after each batch and a
    transactional producer run while the page-cache broker is SIGKILLed three times, with
    records in flight, and restarted at once.  Nothing acknowledged is lost or stored twice,
    the group never reads again below an acknowledged commit and misses nothing, and every
    transaction is all or nothing."""
    broker = broker_process_factory(PAGE_CACHE)
    topic, partitions, group, txn_topic = "cache-kill", 3, "cache-readers", "cache-kill-txn"
    create_topic(broker.bootstrap, topic, partitions)
    create_topic(broker.bootstrap, txn_topic, 2)
    history = History()
    fleet.start("consume", "c1", bootstrap=broker.bootstrap, topic=topic, group=group, member="c1")
    fleet.start(
        "transact", "tx", bootstrap=broker.bootstrap, topic=txn_topic, transactional_id="tx", partitions=2, records=4
    )
    producer = KeyedProducer(broker.bootstrap, topic, history, b"k", **{"message.timeout.ms": 60_000})
    for _ in range(3):
        commits, txns = fleet.count("c1", Committed), fleet.count("tx", Transaction)
        producer.stream(1.0)
        wait_until(lambda c=commits: fleet.count("c1", Committed) > c, "the group to commit")  # type: ignore[misc]
        wait_until(lambda t=txns: fleet.count("tx", Transaction) > t + 2, "transactions to end")  # type: ignore[misc]
        producer.send(10)  # in flight at the kill
        history.add(Fault(what="SIGKILL", target="broker", at=time.monotonic()))
        broker.kill()
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
    print(f"\n{sent} sent, {stored} stored; {history.summary()}; transactions: {transactions.summary()}")
    assert sum(1 for c in history.of(Committed) if c.outcome == "acked") > 3
    assert lost_acknowledged(history) == []
    assert duplicated_in_log(history) == []
    assert redelivered_after_commit(history) == []
    assert lost_to_group(history, group) == []
    assert partial_transactions(transactions) == []
    assert any(t.outcome == "committed" for t in transactions.of(Transaction))


@pytest.fixture
def disk_for(tmp_path: Path) -> Iterator[Callable[[str], Disk]]:
    """A broker in the given durability mode on a modelled disk (killed at teardown)."""
    made: list[Disk] = []

    def make(mode: str) -> Disk:
        proc = BrokerProcess(tmp_path / "broker", {"log.durability": mode})
        disk = Disk(proc, tmp_path / "build")
        proc.env = disk.env()
        made.append(disk)
        return disk

    yield make
    for disk in made:
        disk.proc.kill()


def _produce(history: History, bootstrap: str, topic: str, label: str, count: int) -> None:
    """`count` acks=all records, each acknowledged, into `history`."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    report = confluent_delivery(history, label)
    for i in range(count):
        producer.produce(topic, value=b"%s-%04d" % (label.encode(), i), on_delivery=report)
        producer.poll(0)
    assert producer.flush(30) == 0


def _commit(bootstrap: str, topic: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "window", "enable.auto.commit": False})
    try:
        done = consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
        assert all(tp.error is None for tp in done or [])
    finally:
        consumer.close()


def _committed(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "window", "enable.auto.commit": False})
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=30)
        return tp.offset
    finally:
        consumer.close()


@pytest.mark.parametrize("mode", ["fsync", "page-cache"])
def test_power_loss_loses_what_page_cache_mode_acknowledged_since_the_last_fsync(
    disk_for: Callable[[str], Disk], mode: str
) -> None:
    """Records and a commit acknowledged, then fsynced by a clean restart; more records and a
    commit acknowledged; then the machine loses power.  fsync mode: everything survives.
    page-cache mode: what the clean shutdown fsynced survives, everything acknowledged after it
    is gone (no flush.messages, flush.ms or roll fsynced it), and the recovered log is
    consistent: what it holds is what was acknowledged at those offsets, and it takes appends
    at the offset after its last record."""
    disk = disk_for(mode)
    broker = disk.proc.start()
    topic = "window"
    create_topic(broker.bootstrap, topic, 1)
    history = History()
    _produce(history, broker.bootstrap, topic, "before", 50)
    _commit(broker.bootstrap, topic, 20)
    broker.restart()  # a clean shutdown fsyncs everything, in either mode
    _produce(history, broker.bootstrap, topic, "after", 50)
    _commit(broker.bootstrap, topic, 70)
    history.add(Fault(what="power loss", target="broker", at=time.monotonic()))
    disk.power_loss()
    broker.start()

    read_back(history, broker.bootstrap, topic, 1, isolation="read_uncommitted")
    lost = lost_acknowledged(history)
    kept = [s.value for s in sorted(history.of(Stored), key=lambda s: s.offset)]
    committed = _committed(broker.bootstrap, topic)
    print(f"\n{mode}: {len(lost)} acknowledged records lost, {len(kept)} kept; committed offset {committed}")
    before = [p.value for p in history.of(Produced) if p.client == "before"]
    after = [p.value for p in history.of(Produced) if p.client == "after"]
    assert duplicated_in_log(history) == []
    if mode == "fsync":
        assert lost == []
        assert kept == before + after
        assert committed == 70
    else:
        assert len(lost) == len(after)  # the window: acknowledged since the last fsync
        assert kept == before
        assert committed == 20
    # Recovery left a log that continues where its records end.
    appended = History()
    _produce(appended, broker.bootstrap, topic, "later", 1)
    [later] = appended.of(Produced)
    assert later.offset == len(kept)
    disk.proc.stop()


def _synced(disk: Disk, topic: str) -> bool:
    """The device holds everything of the partition's segment that the OS holds."""
    [log] = (disk.data / f"{topic}-0").glob("*.log")
    kept = disk.shadow / log.relative_to(disk.data)
    return kept.is_file() and kept.stat().st_size == log.stat().st_size > 0


def test_flush_messages_bounds_the_page_cache_window_and_an_offline_directory_still_refuses(
    disk_for: Callable[[str], Disk],
) -> None:
    """page-cache mode, a topic with flush.messages=1: each acks=all record is answered at once
    and fsynced in the background, so once that fsync is done a power loss keeps them all.
    Then fsyncs fail: the background fsync of the next record takes the directory offline, and
    from then on produce is refused with KAFKA_STORAGE_ERROR though no answer waits for fsync."""
    disk = disk_for("page-cache")
    broker = disk.proc.start()
    create_topic(broker.bootstrap, "flushed", 1, {"flush.messages": "1"})
    with connect(broker.bootstrap) as c:
        for i in range(20):
            assert c.produce("flushed", 0, batch([b"f%d" % i])).error_code == ErrorCode.none
    wait_until(lambda: _synced(disk, "flushed"), "flush.messages' background fsync")
    disk.power_loss()
    broker.start()
    with connect(broker.bootstrap) as c:
        assert [r.value for r in c.read_all("flushed", 0)] == [b"f%d" % i for i in range(20)]
        disk.fail_fsync()
        assert c.produce("flushed", 0, batch([b"doomed"])).error_code == ErrorCode.none  # not waiting for it
        deadline = time.monotonic() + 60
        while (code := c.produce("flushed", 0, batch([b"refused"])).error_code) == ErrorCode.none:
            assert time.monotonic() < deadline, "the failed fsync did not take the directory offline"
            time.sleep(0.05)
        assert code == ErrorCode.kafka_storage_error


def test_a_rolled_segment_is_fsynced_in_page_cache_mode_so_a_power_loss_takes_only_the_active_tail(
    disk_for: Callable[[str], Disk],
) -> None:
    """page-cache mode, segment.bytes=4096, no flush.messages nor flush.ms: as Kafka flushes a
    segment when it rolls, every rolled segment reaches the device in the background, and a
    power loss loses at most what the active segment held."""
    disk = disk_for("page-cache")
    broker = disk.proc.start()
    create_topic(broker.bootstrap, "rolled", 1, {"segment.bytes": "4096"})
    sent = [b"r%03d-" % i + bytes(300) for i in range(60)]
    with connect(broker.bootstrap) as c:
        for value in sent:
            assert c.produce("rolled", 0, batch([value])).error_code == ErrorCode.none
    logs = sorted((disk.data / "rolled-0").glob("*.log"))
    assert len(logs) > 3
    active = int(logs[-1].stem)  # the first offset of the active segment

    def rolled_synced() -> bool:
        for log in logs[:-1]:
            kept = disk.shadow / log.relative_to(disk.data)
            if not kept.is_file() or kept.stat().st_size != log.stat().st_size:
                return False
        return True

    wait_until(rolled_synced, "the rolled segments' background fsync")
    disk.power_loss()
    broker.start()
    with connect(broker.bootstrap) as c:
        kept = [r.value for r in c.read_all("rolled", 0)]
    print(f"\n{len(kept)} of {len(sent)} records kept; the active segment began at {active}")
    assert active <= len(kept) <= len(sent)
    assert kept == sent[: len(kept)]
