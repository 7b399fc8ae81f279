"""Synchronous commits of different groups at once share the broker's fsync rounds; with
`__consumer_offsets` in one partition (the default) each round syncs one file for all of them."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import create_topic

TOPIC = "commits.shared"
COMMITTERS = 8
COMMITS = 40  # each, synchronous, of 4 offsets


def _groups(partition_for: Callable[[str], int], partitions: int) -> list[str]:
    """COMMITTERS group ids, in as many different partitions of `__consumer_offsets` as there
    are, placed by the coordinator's own `partition_for`."""
    names: list[str] = []
    used: set[int] = set()
    n = 0
    while len(names) < COMMITTERS:
        name, n = f"committer-{n}", n + 1
        partition = partition_for(name)
        if partition not in used or len(used) == partitions:
            used.add(partition)
            names.append(name)
    return names


def _commit_all_at_once(bootstrap: str, groups: list[str]) -> None:
    consumers = [Consumer({"bootstrap.servers": bootstrap, "group.id": g, "enable.auto.commit": False}) for g in groups]
    start = threading.Barrier(len(consumers))
    failures: list[BaseException] = []

    def commit(consumer: Consumer, offset: int) -> None:
        done = consumer.commit(offsets=[TopicPartition(TOPIC, p, offset) for p in range(4)], asynchronous=False)
        assert all(tp.error is None for tp in done or []), done

    def run(consumer: Consumer) -> None:
        try:
            start.wait(timeout=30)
            for i in range(1, COMMITS + 1):
                commit(consumer, i)
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)

    try:
        for consumer in consumers:
            commit(consumer, 0)  # each finds the coordinator before the committers start together
        threads = [threading.Thread(target=run, args=(c,)) for c in consumers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in threads), "a committer did not finish in 120 s"
    finally:
        for consumer in consumers:
            consumer.close()
    assert not failures, failures


@pytest.mark.parametrize("partitions", [None, 50])
def test_commits_of_different_groups_share_fsync_rounds(
    broker_factory: Callable[..., ThreadBroker], partitions: int | None
) -> None:
    """By default (one partition) a round syncs one file whatever the groups in it; with
    Kafka's 50 partitions the same commits need a file each."""
    broker = broker_factory(settings=None if partitions is None else {"offsets.topic.num.partitions": str(partitions)})
    coordinator, flusher = broker.broker.coordinator, broker.broker.flusher
    assert broker.call(lambda: coordinator.partitions) == (partitions or 1)
    create_topic(broker.bootstrap, TOPIC, 4)
    groups = broker.call(lambda: _groups(coordinator.partition_for, coordinator.partitions))
    rounds_before, files_before = broker.call(lambda: (flusher.rounds, flusher.fsyncs))
    _commit_all_at_once(broker.bootstrap, groups)
    rounds_after, files_after = broker.call(lambda: (flusher.rounds, flusher.fsyncs))
    rounds, files = rounds_after - rounds_before, files_after - files_before

    commits = COMMITTERS * COMMITS + COMMITTERS  # the first commit of each group counts too
    assert 0 < rounds <= commits // 2  # the committers waited on shared rounds (measured: 89-136)
    # __consumer_offsets is made by the first commit: its topic record is synced with it, once.
    topic_record = 1
    if partitions is None:
        assert files == rounds + topic_record  # the one file of __consumer_offsets, once per round
    else:
        assert files == commits + topic_record  # each group in a file of its own: one fdatasync per commit
