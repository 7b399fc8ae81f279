"""More partitions than descriptors: segment files are opened on use through a bounded
cache, so 25,000 partitions are created, written, killed and recovered by a broker
allowed 1,024 descriptors (every segment kept open would need 25,000)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable

import pytest
from kio.schema.errors import ErrorCode

from tests.integration.test_topic_limits import _create
from tests.support.harness import BrokerProcess
from tests.support.kafka_wire import batch, connect

pytestmark = pytest.mark.slow

TOPICS = {"wide-a": 8_400, "wide-b": 8_400, "wide-c": 8_400}
STEP = 97  # partitions written: every 97th of each topic, and the last


def _written(partitions: int) -> list[int]:
    return [*range(0, partitions, STEP), partitions - 1]


def test_25000_partitions_survive_sigkill_under_a_1024_descriptor_limit(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    proc = broker_process_factory(nofile=1024)
    acknowledged: dict[tuple[str, int], bytes] = {}
    with connect(proc.bootstrap, timeout=120) as c:
        for name, count in TOPICS.items():
            response = c.request(_create((name, count)))
            assert response.topics[0].error_code == ErrorCode.none, response.topics[0].error_message
        for name, count in TOPICS.items():
            for p in _written(count):
                value = f"{name}/{p}".encode()
                assert c.produce(name, p, batch([value])).error_code == ErrorCode.none
                acknowledged[(name, p)] = value
    with urllib.request.urlopen(f"{proc.admin_url}/metrics", timeout=10) as r:
        metrics = r.read().decode()
    open_files = [line for line in metrics.splitlines() if line.startswith("streamshop_log_open_files ")]
    assert open_files
    assert 0 < float(open_files[0].split()[1]) <= 512  # half of the 1,024 descriptors at most
    proc.kill()

    proc.start(timeout=180)  # recovery after SIGKILL, under the same limit
    with connect(proc.bootstrap, timeout=120) as c:
        topics = {t.name: len(t.partitions) for t in c.metadata(None).topics}
        assert topics == TOPICS
        for (name, p), value in acknowledged.items():
            assert [r.value for r in c.read_all(name, p)] == [value]
        assert c.produce("wide-c", 1, batch([b"after"])).error_code == ErrorCode.none
    with urllib.request.urlopen(f"{proc.admin_url}/api/topics/wide-a", timeout=30) as r:
        assert json.loads(r.read())["name"] == "wide-a"
