"""A share group crosses runs of offsets that hold no record, however much wider they are than
its in-flight window (`group.share.partition.max.record.locks`, 100 here): offsets the cleaner
compacted away, offsets DeleteRecords removed, and an aborted transaction read committed.
confluent-kafka's ShareConsumer against an in-process broker."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from broker.protocol.errors import ErrorCode
from tests.support.configs import set_group_configs
from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import batch, connect
from tests.support.share_clients import drain_share

WINDOW = 100
SETTINGS = {"group.share.partition.max.record.locks": str(WINDOW), "log.cleaner.backoff.ms": "50"}


def test_offsets_compacted_away_are_crossed(broker_factory: Callable[..., ThreadBroker]) -> None:
    """300 versions of one key, then five other keys: once compacted, the first record left is
    at offset 299, three windows past the group's start offset 0."""
    broker = broker_factory(settings=SETTINGS)
    configs = {
        "cleanup.policy": "compact",
        "segment.bytes": "4096",
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0",
    }
    keys = [b"same"] * 300 + [b"k%d" % i for i in range(5)] + [b"tail-%d" % i for i in range(30)]
    values = [b"v%04d-" % i + b"x" * 60 for i in range(len(keys))]
    with connect(broker.bootstrap) as c:
        assert c.create_topic("gaps-compacted", 1, configs).error_code == ErrorCode.none
        for i in range(0, len(keys), 5):
            produced = c.produce("gaps-compacted", 0, batch(values[i : i + 5], keys=keys[i : i + 5]))
            assert produced.error_code == ErrorCode.none
        deadline = time.monotonic() + 30
        while c.read_all("gaps-compacted", 0)[0].offset < 299 and time.monotonic() < deadline:
            time.sleep(0.1)
        records = c.read_all("gaps-compacted", 0)
    assert records[0].offset >= 299, "the cleaner did not compact the first key's versions"
    survivors = {r.value for r in records if r.value is not None}
    assert drain_share(broker.bootstrap, "gaps-compacted", "gaps-compacted", survivors) == survivors


def test_offsets_removed_by_delete_records_are_crossed(broker_factory: Callable[..., ThreadBroker]) -> None:
    """The group holds records at its window's head when DeleteRecords removes the 300 after
    them: the group goes on from the new log start."""
    broker = broker_factory(settings=SETTINGS)
    bootstrap = broker.bootstrap
    with connect(bootstrap) as c:
        assert c.create_topic("gaps-deleted", 1).error_code == ErrorCode.none
        for i in range(0, 310, 10):
            values = [b"r%03d" % n for n in range(i, i + 10)]
            assert c.produce("gaps-deleted", 0, batch(values)).error_code == ErrorCode.none
    first = drain_share(bootstrap, "gaps-deleted", "gaps-deleted", {b"r000"}, seconds=20)
    assert b"r000" in first
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deleted = admin.delete_records([TopicPartition("gaps-deleted", 0, 300)])
    for future in deleted.values():
        future.result(20)
    expected = {b"r%03d" % n for n in range(300, 310)}
    got = drain_share(bootstrap, "gaps-deleted", "gaps-deleted", expected)
    assert expected <= got
    assert all(int(v[1:]) >= 300 or v in first for v in got)


def test_an_aborted_transaction_read_committed_is_crossed(broker_factory: Callable[..., ThreadBroker]) -> None:
    """300 aborted records and their marker, then 5 committed ones: read committed, the group
    is given the 5, none of the aborted ones."""
    broker = broker_factory(settings=SETTINGS)
    bootstrap = broker.bootstrap
    with connect(bootstrap) as c:
        assert c.create_topic("gaps-aborted", 1).error_code == ErrorCode.none
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "gaps-aborted", "linger.ms": 5})
    producer.init_transactions(20)
    for values, commit in (([b"a%03d" % i for i in range(300)], False), ([b"c%d" % i for i in range(5)], True)):
        producer.begin_transaction()
        for value in values:
            producer.produce("gaps-aborted", value=value)
        producer.flush(20)
        if commit:
            producer.commit_transaction(20)
        else:
            producer.abort_transaction(20)
    set_group_configs(bootstrap, "gaps-aborted", {"share.isolation.level": "read_committed"})
    expected = {b"c%d" % i for i in range(5)}
    assert drain_share(bootstrap, "gaps-aborted", "gaps-aborted", expected) == expected
