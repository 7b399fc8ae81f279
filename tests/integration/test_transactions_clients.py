"""Transactions with the three Python clients: each client's transactional producer commits,
aborts, sends offsets to its transaction, flushes on commit, runs empty transactions and is
fenced by a newer instance; each client's read_committed consumer sees committed records only,
its read_uncommitted consumer everything."""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import confluent_produce, create_topic
from tests.support.txn_clients import CLIENTS, TxnProducer, committed_offset, producer, read_values


def _send_and_commit(p: TxnProducer, topic: str, value: bytes) -> None:
    p.send(topic, value)
    p.commit()


@pytest.mark.parametrize("client", CLIENTS)
def test_commit_abort_empty_and_flush_on_commit(broker: ThreadBroker, client: str) -> None:
    topic = f"txn-{client}"
    create_topic(broker.bootstrap, topic, 2)
    p = producer(client, broker.bootstrap, f"tid-{client}")
    try:
        p.init()
        p.begin()
        for i in range(3):
            p.send(topic, b"committed-%d" % i, partition=i % 2)
        p.commit()
        p.begin()
        for i in range(3):
            p.send(topic, b"aborted-%d" % i, partition=i % 2)
        p.flush()  # on disk, then aborted: read_committed readers must skip them
        p.abort()
        p.begin()  # an empty transaction
        p.commit()
        p.begin()
        for i in range(50):  # no flush: commit sends what is pending first
            p.send(topic, b"late-%d" % i, partition=i % 2)
        p.commit()
        p.begin()
        p.send(topic, b"last-0", partition=0)
        p.send(topic, b"last-1", partition=1)
        p.commit()
    finally:
        p.close()
    committed = [b"committed-%d" % i for i in range(3)] + [b"late-%d" % i for i in range(50)] + [b"last-0", b"last-1"]
    for reader in CLIENTS:
        got = read_values(reader, broker.bootstrap, topic, committed=True, until=b"last", partitions=2)
        assert sorted(got) == sorted(committed), reader
    everything = read_values(client, broker.bootstrap, topic, committed=False, until=b"last", partitions=2)
    assert sorted(everything) == sorted(committed + [b"aborted-%d" % i for i in range(3)])
    txn = broker.call(lambda: broker.broker.transactions.txns[f"tid-{client}"])
    assert txn.state.value == "CompleteCommit"
    # Partition 0 holds no open transaction: its last stable offset is its end.
    plog = broker.broker.store.partition_log(topic, 0)
    assert plog is not None
    assert plog.last_stable_offset == plog.high_watermark
    assert [t.producer_id for t in plog.txn_index.entries] == [txn.producer_id]


@pytest.mark.parametrize("client", CLIENTS)
def test_offsets_sent_to_a_transaction_count_only_when_it_commits(broker: ThreadBroker, client: str) -> None:
    source, sink, group = f"in-{client}", f"out-{client}", f"eos-{client}"
    create_topic(broker.bootstrap, source)
    create_topic(broker.bootstrap, sink)
    confluent_produce(broker.bootstrap, source, [{"value": b"order-%d" % i} for i in range(5)])
    p = producer(client, broker.bootstrap, f"eos-{client}")
    try:
        p.init()
        p.begin()
        p.send(sink, b"doomed")
        p.send_offsets({(source, 0): 3}, group)
        p.abort()
        assert committed_offset(broker.bootstrap, group, source) == -1
        p.begin()
        for i in range(5):
            p.send(sink, b"delivered-%d" % i)
        p.send_offsets({(source, 0): 5}, group)
        p.flush()
        # Sent to the transaction, not yet committed: invisible to the group; a read_committed
        # consumer asking for stable offsets (KIP-447) waits until the transaction ends.
        assert committed_offset(broker.bootstrap, group, source) == -1
        with ThreadPoolExecutor(1) as pool:
            stable = pool.submit(committed_offset, broker.bootstrap, group, source, isolation="read_committed")
            time.sleep(0.5)
            assert not stable.done()
            p.commit()
            assert stable.result(15) == 5
    finally:
        p.close()
    assert committed_offset(broker.bootstrap, group, source) == 5
    got = read_values(client, broker.bootstrap, sink, committed=True, until=b"delivered-4")
    assert got == [b"delivered-%d" % i for i in range(5)]


@pytest.mark.parametrize("client", CLIENTS)
def test_a_new_instance_fences_the_old_one_and_aborts_its_transaction(broker: ThreadBroker, client: str) -> None:
    topic = f"fence-{client}"
    create_topic(broker.bootstrap, topic)
    zombie = producer(client, broker.bootstrap, f"fenced-{client}")
    successor = producer(client, broker.bootstrap, f"fenced-{client}")
    try:
        zombie.init()
        zombie.begin()
        zombie.send(topic, b"zombie")
        zombie.flush()
        successor.init()  # bumps the epoch: the zombie's open transaction is aborted
        with pytest.raises(zombie.errors):  # refused at the send, or at the commit that follows
            _send_and_commit(zombie, topic, b"zombie-again")
        successor.begin()
        successor.send(topic, b"fresh")
        successor.commit()
    finally:
        for p in (zombie, successor):
            with contextlib.suppress(*zombie.errors):  # the fenced client may report it as it closes
                p.close()
    assert read_values(client, broker.bootstrap, topic, committed=True, until=b"fresh") == [b"fresh"]
    assert b"zombie" in read_values(client, broker.bootstrap, topic, committed=False, until=b"fresh")
