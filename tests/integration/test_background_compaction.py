"""The broker's periodic cleaner compacts a partition in a worker thread and swaps the new
segments in one at a time: a consumer reading from the start afterwards gets the latest value
of every key at its original offset, records appended while the cleaner ran are all there,
and the partition kept serving throughout."""

from __future__ import annotations

import time
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import batch, connect

KEYS = [f"k{i}".encode() for i in range(8)]


def test_the_periodic_cleaner_compacts_a_topic_while_it_keeps_serving(
    broker_factory: Callable[..., ThreadBroker],
) -> None:
    broker = broker_factory(settings={"log.cleaner.backoff.ms": "50"})
    configs = {
        "cleanup.policy": "compact",
        "segment.bytes": "4096",
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0",
    }
    latest: dict[bytes, bytes] = {}
    with connect(broker.bootstrap) as c:
        assert c.create_topic("compacted", 1, configs).error_code == ErrorCode.none
        for round_ in range(150):
            values = [f"{k.decode()}-{round_}".encode() * 8 for k in KEYS]
            assert c.produce("compacted", 0, batch(values, keys=KEYS)).error_code == ErrorCode.none
            latest.update(zip(KEYS, values, strict=True))
            assert c.api_versions().error_code == ErrorCode.none
        written = 150 * len(KEYS)

        deadline = time.monotonic() + 30
        records = c.read_all("compacted", 0)
        while len(records) > written // 4 and time.monotonic() < deadline:
            time.sleep(0.1)
            records = c.read_all("compacted", 0)
        assert len(records) <= written // 4, "the cleaner did not compact the closed segments"
        offsets = [r.offset for r in records]
        assert offsets == sorted(offsets)
        assert offsets[-1] == written - 1
        by_key: dict[bytes, bytes] = {}
        for r in records:
            assert r.key is not None
            assert r.value is not None
            by_key[r.key] = r.value
        assert by_key == latest
        # A pass that has finished leaves no staging behind (one may be under way meanwhile).
        deadline = time.monotonic() + 10
        while list(broker.data_dir.glob("compacted-0/.cleaner-staging")) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not list(broker.data_dir.glob("compacted-0/.cleaner-staging"))
