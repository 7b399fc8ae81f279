"""confluent-kafka's ShareConsumer in tests: drain what a share group is given."""

from __future__ import annotations

import time

from confluent_kafka import ShareConsumer

from tests.support.configs import set_group_configs


def drain_share(bootstrap: str, group: str, topic: str, expected: set[bytes], seconds: float = 30) -> set[bytes]:
    """The values `group` is given from `topic` (from its earliest records, implicitly accepted
    and committed before the consumer closes) until `expected` came or time ran out."""
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "fetch.wait.max.ms": "200"})
    consumer.subscribe([topic])
    got: set[bytes] = set()
    deadline = time.monotonic() + seconds
    try:
        while not expected <= got and time.monotonic() < deadline:
            for message in consumer.poll(0.5):
                assert message.error() is None, message.error()
                value = message.value()
                assert isinstance(value, bytes)
                got.add(value)
        consumer.commit_sync(10)  # implicit mode: close alone would release the last poll's records
    finally:
        consumer.close()
    return got
