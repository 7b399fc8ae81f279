"""Two ShareConsumers of one group on one partition, the recipe of a service whose instances
stop once a batch is done: each record is handled once when the consumer's last
acknowledgements reach the broker before it leaves, by `commit_sync()` (implicit mode: close()
alone releases the last poll's records, as Kafka's KafkaShareConsumer documents, and another
member is given them) or by explicit acknowledgements, which close() sends with its final
ShareAcknowledge and which the broker applies before it releases what the member still holds."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.harness import ThreadBroker

pytestmark = pytest.mark.slow

RECORDS = 100


def _run(
    bootstrap: str, topic: str, group: str, mode: str, before_close: Callable[[ShareConsumer], object]
) -> dict[int, int]:
    """Two members poll until they have seen RECORDS distinct offsets between them, then each
    runs `before_close` and closes; returns how often each offset was handed out."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
    seen: dict[int, int] = {}
    lock = threading.Lock()
    done = threading.Event()
    polling = threading.Barrier(3)
    errors: list[BaseException] = []

    def member() -> None:
        consumer = ShareConsumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": mode}
        )
        consumer.subscribe([topic])
        try:
            consumer.poll(0.5)  # joined, its share session open: it starts at the end, before the records
            polling.wait(30)
            while not done.is_set():
                for message in consumer.poll(0.5):
                    assert message.error() is None, message.error()
                    if mode == "explicit":
                        consumer.acknowledge(message)
                    offset = message.offset()
                    assert offset is not None
                    with lock:
                        seen[offset] = seen.get(offset, 0) + 1
                        if len(seen) >= RECORDS:
                            done.set()
            before_close(consumer)
        except BaseException as e:  # surfaced by the assertion below
            errors.append(e)
            polling.abort()
            done.set()
        finally:
            consumer.close()

    threads = [threading.Thread(target=member) for _ in range(2)]
    for t in threads:
        t.start()
    polling.wait(30)
    time.sleep(1)  # both members' fetches under way (a fetch started after the records finds them too)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(RECORDS):
        producer.produce(topic, value=b"%d" % i)
    assert producer.flush(30) == 0
    for t in threads:
        t.join(60)
    assert errors == []
    # Whatever a closing member released would reach the other one: give it the time to.
    time.sleep(1)
    return seen


def test_implicit_acknowledgement_committed_before_close_hands_each_record_out_once(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    broker = broker_factory()
    seen = _run(broker.bootstrap, "sq-implicit", "bar-share", "implicit", lambda c: c.commit_sync(10))
    assert len(seen) == RECORDS
    assert max(seen.values()) == 1, {o: n for o, n in seen.items() if n > 1}


def test_explicit_acknowledgements_sent_at_close_are_applied_before_the_release(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    broker = broker_factory()
    seen = _run(broker.bootstrap, "sq-explicit", "bar-share-explicit", "explicit", lambda c: None)
    assert len(seen) == RECORDS
    assert max(seen.values()) == 1, {o: n for o, n in seen.items() if n > 1}
