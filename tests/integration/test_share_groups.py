"""Share groups (KIP-932) with confluent-kafka's ShareConsumer against a broker process:
several consumers draining one partition, each record processed once when acknowledged,
released records redelivered, rejected ones and those past the delivery limit never again,
expired locks, and the state across a SIGKILL of the broker."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Message, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.share_acknowledge.v1 import request as share_ack
from kio.schema.share_fetch.v1 import request as share_fetch
from kio.schema.types import GroupId
from kio.static.primitive import i8, i32, i64

from broker.protocol.errors import ErrorCode
from tests.support.configs import set_group_configs
from tests.support.harness import BrokerProcess
from tests.support.kafka_wire import connect, ms
from tests.support.share_wire import heartbeat

LOCK_MS = 1500
SETTINGS = {
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    "group.share.delivery.count.limit": "3",
}


@pytest.fixture(scope="module")
def share_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("share") / "broker", SETTINGS).start()
    yield broker
    broker.kill()


def _topic(bootstrap: str, name: str, partitions: int = 1) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(20)
    return name


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i, value in enumerate(values):
        producer.produce(topic, key=b"k%d" % i, value=value)
    assert producer.flush(30) == 0


@contextmanager
def _consumer(bootstrap: str, group: str, topic: str, **extra: str) -> Iterator[ShareConsumer]:
    # The group reads its partitions from the start: records produced before its first fetch
    # are its too (the default, latest, would leave them out).
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    consumer = ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "fetch.wait.max.ms": "200",
            **extra,
        }
    )
    consumer.subscribe([topic])
    try:
        yield consumer
    finally:
        consumer.close()


def _value(message: Message) -> bytes:
    value = message.value()
    assert isinstance(value, bytes)
    return value


def _poll(consumer: ShareConsumer, timeout: float = 0.5) -> list[Message]:
    out = []
    for message in consumer.poll(timeout):
        assert message.error() is None, message.error()
        out.append(message)
    return out


def _drain_until(
    consumer: ShareConsumer, done: Callable[[], bool], on_message: Callable[[Message], None], seconds: float = 30
) -> None:
    end = time.monotonic() + seconds
    while not done() and time.monotonic() < end:
        for message in _poll(consumer):
            on_message(message)
        consumer.commit_sync(10)


def test_three_consumers_share_one_partition_and_each_record_is_processed_once(share_broker: BrokerProcess) -> None:
    bootstrap = share_broker.bootstrap
    topic = _topic(bootstrap, "share-work-3")
    processed: Counter[bytes] = Counter()
    by_consumer: Counter[int] = Counter()
    lock = threading.Lock()
    values = [b"job-%04d" % i for i in range(600)]
    ready = threading.Barrier(4)
    stop = threading.Event()
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            with _consumer(bootstrap, "workers", topic, **{"max.poll.records": "20"}) as consumer:
                _poll(consumer, 1.0)
                ready.wait(30)
                while not stop.is_set():
                    for message in _poll(consumer, 0.3):
                        consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                        with lock:
                            processed[_value(message)] += 1
                            by_consumer[index] += 1
                        time.sleep(0.002)  # some work, so the three take turns
                    consumer.commit_sync(10)
        except BaseException as e:  # surfaced by the assertion below
            errors.append(e)
            ready.abort()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    ready.wait(30)
    for start in range(0, len(values), 20):  # as work arrives: each fetch finds some, not all
        _produce(bootstrap, topic, values[start : start + 20])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(processed) < len(values):
        time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join(30)
    assert errors == []
    assert set(processed) == set(values)  # every record delivered
    assert max(processed.values()) == 1  # and processed once: accepted records never come back
    assert len(by_consumer) == 3, by_consumer  # all three drained the one partition


def test_released_records_are_redelivered_and_rejected_ones_never(share_broker: BrokerProcess) -> None:
    bootstrap = share_broker.bootstrap
    topic = _topic(bootstrap, "share-release")
    seen: list[tuple[bytes, int]] = []
    with _consumer(bootstrap, "releasers", topic) as consumer:
        _produce(bootstrap, topic, [b"a", b"b", b"c"])

        def decide(message: Message) -> None:
            value = _value(message)
            seen.append((value, message.delivery_count() or 0))
            if value == b"a":
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
            elif value == b"b":  # released until the limit (3), then archived by the broker
                consumer.acknowledge(message, AcknowledgeType.RELEASE)
            else:
                consumer.acknowledge(message, AcknowledgeType.REJECT)

        _drain_until(consumer, lambda: sum(1 for v, _ in seen if v == b"b") >= 3, decide)
        # Nothing more comes: a was accepted, c rejected, b archived at its third release.
        quiet_until = time.monotonic() + 1
        _drain_until(consumer, lambda: time.monotonic() > quiet_until, decide)
    assert [c for v, c in seen if v == b"a"] == [1]
    assert [c for v, c in seen if v == b"c"] == [1]
    assert [c for v, c in seen if v == b"b"] == [1, 2, 3]


def test_a_lock_that_runs_out_redelivers_the_record_to_another_member(share_broker: BrokerProcess) -> None:
    bootstrap = share_broker.bootstrap
    topic = _topic(bootstrap, "share-locks")
    with _consumer(bootstrap, "lockers", topic) as holder:
        _produce(bootstrap, topic, [b"held"])
        got: list[Message] = []
        end = time.monotonic() + 20
        while not got and time.monotonic() < end:
            got = _poll(holder, 0.3)
        assert [m.value() for m in got] == [b"held"]
        acquired = time.monotonic()
        # The holder sits on it (no acknowledgement, no poll): once its lock runs out the
        # record is available again, here for another member, with its delivery count raised.
        with _consumer(bootstrap, "lockers", topic) as other:
            again: list[Message] = []
            while not again and time.monotonic() - acquired < 20:
                again = _poll(other, 0.3)
            waited = time.monotonic() - acquired
            assert [m.value() for m in again] == [b"held"]
            assert again[0].delivery_count() == 2
            assert waited >= LOCK_MS / 1000 * 0.9  # not before the lock ran out
            other.acknowledge(again[0], AcknowledgeType.ACCEPT)
            assert all(error is None for error in other.commit_sync(10).values())


def test_state_survives_a_sigkill_of_the_broker(tmp_path_factory: pytest.TempPathFactory) -> None:
    broker = BrokerProcess(tmp_path_factory.mktemp("share-kill") / "broker", SETTINGS).start()
    try:
        topic = _topic(broker.bootstrap, "share-durable")
        values = [b"r-%03d" % i for i in range(100)]
        accepted: list[bytes] = []
        with _consumer(broker.bootstrap, "durable", topic, **{"max.poll.records": "10"}) as consumer:
            _produce(broker.bootstrap, topic, values)

            def accept(message: Message) -> None:
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                accepted.append(_value(message))

            _drain_until(consumer, lambda: len(accepted) >= 40, accept)
            result = consumer.commit_sync(10)
            assert all(error is None for error in result.values())
            broker.kill()  # SIGKILL: the acknowledged state is on disk or the commit failed
        broker.start()
        redelivered: list[Message] = []
        with _consumer(broker.bootstrap, "durable", topic) as consumer:

            def keep(message: Message) -> None:
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                redelivered.append(message)

            done = set(accepted)
            _drain_until(consumer, lambda: {m.value() for m in redelivered} | done >= set(values), keep)
        assert {m.value() for m in redelivered} | set(accepted) == set(values)  # nothing lost
        assert not {m.value() for m in redelivered} & set(accepted)  # nothing accepted comes back
    finally:
        broker.kill()


def test_read_committed_share_groups_never_see_aborted_records(share_broker: BrokerProcess) -> None:
    bootstrap = share_broker.bootstrap
    topic = _topic(bootstrap, "share-txn")
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "share-txn-producer"})
    producer.init_transactions(20)
    for values, commit in (([b"c1", b"c2"], True), ([b"a1", b"a2"], False), ([b"c3"], True)):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value=value)
        producer.flush(20)
        if commit:
            producer.commit_transaction(20)
        else:
            producer.abort_transaction(20)
    for level, expected in (
        ("read_committed", [b"c1", b"c2", b"c3"]),
        ("read_uncommitted", [b"c1", b"c2", b"a1", b"a2", b"c3"]),
    ):
        group = f"txn-{level}"
        set_group_configs(bootstrap, group, {"share.isolation.level": level})
        assert _accept_all(bootstrap, group, topic, len(expected)) == expected, level


def _accept_all(bootstrap: str, group: str, topic: str, count: int) -> list[bytes]:
    """Accept what the group is given until `count` records came and a second passed quietly."""
    got: list[bytes] = []
    with _consumer(bootstrap, group, topic) as consumer:

        def keep(message: Message) -> None:
            consumer.acknowledge(message, AcknowledgeType.ACCEPT)
            got.append(_value(message))

        _drain_until(consumer, lambda: len(got) >= count, keep, seconds=20)
        quiet_until = time.monotonic() + 1
        _drain_until(consumer, lambda: time.monotonic() > quiet_until, keep)
    return got


def _acks(offset: int, kind: int) -> Any:
    return share_fetch.AcknowledgementBatch(
        first_offset=i64(offset), last_offset=i64(offset), acknowledge_types=(i8(kind),)
    )


def test_bad_share_requests_get_clear_errors_and_cost_nothing(share_broker: BrokerProcess) -> None:
    """Over the wire: a member id the group does not have, a session that does not exist,
    acknowledgements on the opening request, ShareAcknowledge opening a session, and
    acknowledgements of records the member does not hold are refused with Kafka's errors; the
    records stay the group's and are delivered."""
    bootstrap = share_broker.bootstrap
    topic = _topic(bootstrap, "share-bad")
    set_group_configs(bootstrap, "bad", {"share.auto.offset.reset": "earliest"})
    _produce(bootstrap, topic, [b"kept"])
    with connect(bootstrap) as conn:
        topic_id = conn.request(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                include_topic_authorized_operations=False)).topics  # fmt: skip
        tid = next(t.topic_id for t in topic_id if t.name == topic)

        def fetch(epoch: int, acks: tuple[Any, ...] = ()) -> Any:
            part = share_fetch.FetchPartition(partition_index=i32(0), acknowledgement_batches=acks)
            return conn.request(
                share_fetch.ShareFetchRequest(
                    group_id=GroupId("bad"), member_id="m-1", share_session_epoch=i32(epoch), max_wait=ms(0),
                    min_bytes=i32(1), max_bytes=i32(1 << 20), max_records=i32(10), batch_size=i32(10),
                    topics=(share_fetch.FetchTopic(topic_id=tid, partitions=(part,)),), forgotten_topics_data=(),
                )
            )  # fmt: skip

        ack = _acks(0, 1)
        assert fetch(0).error_code == ErrorCode.unknown_member_id  # m-1 has not joined yet
        assert heartbeat(conn, "bad", "m-1", 0, [topic]).error_code == ErrorCode.none
        assert fetch(5).error_code == ErrorCode.share_session_not_found
        assert fetch(0, (ack,)).error_code == ErrorCode.invalid_request
        opened = conn.request(share_ack.ShareAcknowledgeRequest(
            group_id=GroupId("bad"), member_id="m-1", share_session_epoch=i32(0), topics=()))  # fmt: skip
        assert opened.error_code == ErrorCode.invalid_share_session_epoch
        first = fetch(0)  # opens the session and acquires the record
        assert first.error_code == ErrorCode.none
        assert [(a.first_offset, a.last_offset) for a in first.responses[0].partitions[0].acquired_records] == [(0, 0)]
        wrong = _acks(3, 1)
        refused = fetch(1, (wrong,)).responses[0].partitions[0]
        assert refused.acknowledge_error_code == ErrorCode.invalid_record_state
        malformed = share_fetch.AcknowledgementBatch(
            first_offset=i64(0), last_offset=i64(0), acknowledge_types=(i8(9),)
        )
        assert fetch(2, (malformed,)).responses[0].partitions[0].acknowledge_error_code == ErrorCode.invalid_request
        released = _acks(0, 2)
        again = fetch(3, (released,)).responses[0].partitions[0]
        assert again.acknowledge_error_code == ErrorCode.none
        assert [(a.first_offset, a.delivery_count) for a in again.acquired_records] == [(0, 2)]  # nothing lost
