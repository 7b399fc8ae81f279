"""Committed offsets survive the broker: after a clean restart (SIGTERM) or a crash
(SIGKILL) of the broker process, a group resumes exactly after its last committed offset
in every partition, with both clients, and the offsets' metadata strings are kept."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import OffsetAndMetadata
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, KafkaException, TopicPartition

from tests.support.harness import BrokerProcess
from tests.support.kafka_clients import confluent_produce, create_topic

TOPIC, GROUP = "payments", "billing"
PARTITIONS, PER_PARTITION = 3, 30
# The group commits after processing each record up to these offsets (the next offset
# to read), then processes the rest of each partition without committing.
COMMIT_TO = {0: 7, 1: 19, 2: PER_PARTITION}
RESUME = {(p, o) for p, c in COMMIT_TO.items() for o in range(c, PER_PARTITION)}  # what must come back
# Let the clients find the restarted broker promptly.
CONFLUENT_RECONNECT = {"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200}


def _metadata(partition: int, offset: int) -> str:
    return f"processed {partition}/{offset}"


def _setup(proc: BrokerProcess) -> None:
    create_topic(proc.bootstrap, TOPIC, PARTITIONS)
    records = [
        {"partition": p, "key": f"k{p}".encode(), "value": f"{p}:{i}".encode()}
        for i in range(PER_PARTITION)
        for p in range(PARTITIONS)
    ]
    confluent_produce(proc.bootstrap, TOPIC, records, {"acks": "all"})


def _restart(proc: BrokerProcess, how: str) -> None:
    if how == "sigterm":
        assert proc.stop() == 0
    else:
        proc.kill()
    proc.start()


def _check_committed(bootstrap: str) -> None:
    """The group's committed offsets and metadata, as any client reads them back."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        committed = consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        consumer.close()
    assert {tp.partition: tp.offset for tp in committed} == COMMIT_TO
    assert {tp.partition: tp.metadata for tp in committed} == {p: _metadata(p, c - 1) for p, c in COMMIT_TO.items()}


# --- confluent-kafka ---------------------------------------------------------------------


def _confluent_consumer(bootstrap: str) -> Any:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **CONFLUENT_RECONNECT,
        }
    )
    consumer.subscribe([TOPIC])
    return consumer


def _confluent_process(
    consumer: Any, until: set[tuple[int, int]], commit: bool, timeout: float = 10
) -> list[tuple[int, int]]:
    """Poll until every record in `until` was processed; with `commit`, commit after each
    record below COMMIT_TO (synchronously: the commit is acknowledged)."""
    seen: list[tuple[int, int]] = []
    deadline = time.monotonic() + timeout
    while not until <= set(seen):
        assert time.monotonic() < deadline, f"only {len(set(seen))} of {len(until)} records arrived"
        msg = consumer.poll(0.05)
        if msg is None:
            continue
        if msg.error() is not None:
            raise KafkaException(msg.error())
        p, o = msg.partition(), msg.offset()
        seen.append((p, o))
        if commit and o < COMMIT_TO[p]:
            consumer.commit(offsets=[TopicPartition(TOPIC, p, o + 1, _metadata(p, o))], asynchronous=False)
    return seen


@pytest.mark.parametrize("how", [pytest.param("sigterm", marks=pytest.mark.slow), "sigkill"])
def test_confluent_group_resumes_after_its_last_committed_offset_across_broker_restart(
    broker_process_factory: Callable[..., BrokerProcess], how: str
) -> None:
    """A confluent-kafka group member processes every record and commits after each one
    up to a different offset per partition, then goes on without committing.  The
    broker is restarted (SIGTERM) or crashes right after the last commit was acknowledged
    (SIGKILL, the member still connected).  A new member of the group receives exactly
    the records from each partition's last committed offset on: none before, none twice."""
    proc = broker_process_factory()
    _setup(proc)
    everything = {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
    consumer = _confluent_consumer(proc.bootstrap)
    try:
        _confluent_process(consumer, everything, commit=True)
        if how == "sigkill":
            _restart(proc, how)
            # The member lived through the crash: once it has found the broker again (so
            # that closing it leaves the group), it reads the commits back.
            committed = consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
            assert {tp.partition: tp.offset for tp in committed} == COMMIT_TO
    finally:
        consumer.close()
    if how == "sigterm":
        _restart(proc, how)

    _check_committed(proc.bootstrap)
    consumer = _confluent_consumer(proc.bootstrap)
    try:
        resumed = _confluent_process(consumer, RESUME, commit=False)
    finally:
        consumer.close()
    assert sorted(resumed) == sorted(RESUME)  # exactly those: none before the commit, none twice
    firsts = {p: min(o for q, o in resumed if q == p) for p in range(PARTITIONS) if COMMIT_TO[p] < PER_PARTITION}
    assert firsts == {p: c for p, c in COMMIT_TO.items() if c < PER_PARTITION}


# --- aiokafka ----------------------------------------------------------------------------


def _aiokafka_consumer(bootstrap: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        TOPIC, bootstrap_servers=bootstrap, group_id=GROUP, auto_offset_reset="earliest", enable_auto_commit=False
    )


async def _aiokafka_process(
    consumer: AIOKafkaConsumer, until: set[tuple[int, int]], commit: bool
) -> list[tuple[int, int]]:
    seen: list[tuple[int, int]] = []
    async with asyncio.timeout(10):
        while not until <= set(seen):
            batches = await consumer.getmany(timeout_ms=50)
            for tp, records in batches.items():
                for rec in records:
                    seen.append((rec.partition, rec.offset))
                    if commit and rec.offset < COMMIT_TO[rec.partition]:
                        meta = OffsetAndMetadata(rec.offset + 1, _metadata(rec.partition, rec.offset))
                        await consumer.commit({AioTopicPartition(tp.topic, tp.partition): meta})
    return seen


@pytest.mark.parametrize("how", [pytest.param("sigterm", marks=pytest.mark.slow), "sigkill"])
async def test_aiokafka_group_resumes_after_its_last_committed_offset_across_broker_restart(
    broker_process_factory: Callable[..., BrokerProcess], how: str
) -> None:
    """The same with aiokafka: commits after each record up to a different offset per
    partition, then none; the broker is restarted (SIGTERM) or crashes right after the
    last acknowledged commit (SIGKILL, the member still connected); a new member of the
    group receives exactly the records from each partition's last committed offset on."""
    proc = broker_process_factory()
    _setup(proc)
    everything = {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
    consumer = _aiokafka_consumer(proc.bootstrap)
    await consumer.start()
    try:
        await _aiokafka_process(consumer, everything, commit=True)
        if how == "sigkill":
            await asyncio.to_thread(_restart, proc, how)
            # The member lived through the crash: once it has found the broker again (so
            # that stopping it leaves the group), it reads the commits back.
            for p, offset in COMMIT_TO.items():
                assert await consumer.committed(AioTopicPartition(TOPIC, p)) == offset
            await consumer.getmany(timeout_ms=200)  # the fetcher reconnects too
    finally:
        await consumer.stop()
    if how == "sigterm":
        _restart(proc, how)

    await asyncio.to_thread(_check_committed, proc.bootstrap)
    consumer = _aiokafka_consumer(proc.bootstrap)
    await consumer.start()
    try:
        resumed = await _aiokafka_process(consumer, RESUME, commit=False)
    finally:
        await consumer.stop()
    assert sorted(resumed) == sorted(RESUME)
    firsts = {p: min(o for q, o in resumed if q == p) for p in range(PARTITIONS) if COMMIT_TO[p] < PER_PARTITION}
    assert firsts == {p: c for p, c in COMMIT_TO.items() if c < PER_PARTITION}
