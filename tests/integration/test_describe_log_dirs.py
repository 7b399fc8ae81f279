"""DescribeLogDirs (API key 35): partition sizes on disk, as a dashboard reads them.

aiokafka 0.14 has no DescribeLogDirs (its admin client has no describe_log_dirs, its
protocol package no such request) and neither has confluent-kafka 2.16's AdminClient.  So
the request is declared here with aiokafka's own public protocol building blocks and sent
through aiokafka's real client, which negotiates the version from ApiVersions and parses
the response: the classic v1 and the flexible v4.  Every version 1-4 is also sent as raw
frames built by `kio`, which checks that each response is consumed to its last byte.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Array,
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    String,
    TaggedFields,
)
from kio.schema.describe_log_dirs.v1.request import DescribableLogDirTopic as TopicV1
from kio.schema.describe_log_dirs.v1.request import DescribeLogDirsRequest as RequestV1
from kio.schema.describe_log_dirs.v2.request import DescribableLogDirTopic as TopicV2
from kio.schema.describe_log_dirs.v2.request import DescribeLogDirsRequest as RequestV2
from kio.schema.describe_log_dirs.v3.request import DescribableLogDirTopic as TopicV3
from kio.schema.describe_log_dirs.v3.request import DescribeLogDirsRequest as RequestV3
from kio.schema.describe_log_dirs.v4.request import DescribableLogDirTopic as TopicV4
from kio.schema.describe_log_dirs.v4.request import DescribeLogDirsRequest as RequestV4
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i32

from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import aiokafka_produce
from tests.support.kafka_wire import connect, frame, header_bytes

API_KEY = 35

# --- DescribeLogDirs for aiokafka, from DescribeLogDirsRequest/Response.json ----------------


class _ResponseV1(Response):
    API_KEY = API_KEY
    API_VERSION = 1
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "results",
            Array(
                ("error_code", Int16),
                ("log_dir", String("utf-8")),
                (
                    "topics",
                    Array(
                        ("name", String("utf-8")),
                        (
                            "partitions",
                            Array(
                                ("partition_index", Int32),
                                ("partition_size", Int64),
                                ("offset_lag", Int64),
                                ("is_future_key", Boolean),
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )


class _RequestV1(RequestStruct):
    API_KEY = API_KEY
    API_VERSION = 1
    RESPONSE_TYPE = _ResponseV1
    SCHEMA = Schema(("topics", Array(("topic", String("utf-8")), ("partitions", Array(Int32)))))


class _ResponseV4(Response):
    API_KEY = API_KEY
    API_VERSION = 4
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        (
            "results",
            CompactArray(
                ("error_code", Int16),
                ("log_dir", CompactString("utf-8")),
                (
                    "topics",
                    CompactArray(
                        ("name", CompactString("utf-8")),
                        (
                            "partitions",
                            CompactArray(
                                ("partition_index", Int32),
                                ("partition_size", Int64),
                                ("offset_lag", Int64),
                                ("is_future_key", Boolean),
                                ("tags", TaggedFields),
                            ),
                        ),
                        ("tags", TaggedFields),
                    ),
                ),
                ("total_bytes", Int64),
                ("usable_bytes", Int64),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class _RequestV4(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = API_KEY
    API_VERSION = 4
    RESPONSE_TYPE = _ResponseV4
    SCHEMA = Schema(
        (
            "topics",
            CompactArray(
                ("topic", CompactString("utf-8")), ("partitions", CompactArray(Int32)), ("tags", TaggedFields)
            ),
        ),
        ("tags", TaggedFields),
    )


Asked = Mapping[str, Sequence[int]] | None


class _DescribeLogDirs(Request[_RequestV1 | _RequestV4]):
    """aiokafka picks the newest of v1 and v4 that the broker advertises."""

    API_KEY = API_KEY

    def __init__(self, topics: Asked) -> None:
        self.topics = topics

    def build(self, request_struct_class: type[_RequestV1 | _RequestV4]) -> _RequestV1 | _RequestV4:
        flexible = request_struct_class.FLEXIBLE_VERSION
        topics: list[tuple[Any, ...]] | None = (
            None
            if self.topics is None
            else [(t, list(ps), {}) if flexible else (t, list(ps)) for t, ps in self.topics.items()]
        )
        return request_struct_class(topics, {}) if flexible else request_struct_class(topics)


class _DescribeLogDirsV1Only(Request[_RequestV1]):
    """Pins the classic v1, as a client that knows no flexible versions would send."""

    API_KEY = API_KEY

    def __init__(self, topics: Asked) -> None:
        self.topics = topics

    def build(self, request_struct_class: type[_RequestV1]) -> _RequestV1:
        return request_struct_class(None if self.topics is None else [(t, list(ps)) for t, ps in self.topics.items()])


REQUESTS: dict[str, type[_DescribeLogDirs] | type[_DescribeLogDirsV1Only]] = {
    "v1": _DescribeLogDirsV1Only,
    "v4": _DescribeLogDirs,
}


async def describe_log_dirs(broker: ThreadBroker, topics: Asked = None, version: str = "v4") -> dict[str, Any]:
    """The response, as aiokafka parsed it, in plain dicts; asserts aiokafka chose `version`."""
    client = AIOKafkaClient(bootstrap_servers=broker.bootstrap)
    await client.bootstrap()
    try:
        node_id = next(iter(client.cluster.brokers())).nodeId
        response = await client.send(node_id, REQUESTS[version](topics))
    finally:
        await client.close()
    got_version = response.API_VERSION
    assert got_version == int(version[1:])
    parsed: dict[str, Any] = response.to_object()
    return parsed


def sizes(response: Mapping[str, Any]) -> dict[str, dict[int, int]]:
    """{topic: {partition: size}} of the one log dir, after checking the per-partition facts
    a single-replica broker must report."""
    [result] = response["results"]
    assert result["error_code"] == 0
    out: dict[str, dict[int, int]] = {}
    for topic in result["topics"]:
        assert topic["name"] not in out, "each topic appears once"
        out[topic["name"]] = {}
        for p in topic["partitions"]:
            assert p["offset_lag"] == 0
            assert p["is_future_key"] is False
            out[topic["name"]][p["partition_index"]] = p["partition_size"]
    return out


# --- helpers ---------------------------------------------------------------------------------


async def create_topics(broker: ThreadBroker, partitions: Mapping[str, int]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, n, 1) for name, n in partitions.items()])
    finally:
        await admin.close()


async def produce(broker: ThreadBroker, topic: str, partition: int, count: int, size: int = 100) -> None:
    """`count` records of `size` bytes each, one batch per record (so the bytes are known
    to grow with every call, whatever the client batches)."""
    await aiokafka_produce(
        broker.bootstrap,
        topic,
        [{"value": bytes([65 + i % 26]) * size, "partition": partition} for i in range(count)],
        flush_each=True,
    )


def disk_bytes(broker: ThreadBroker, topic: str, partition: int) -> int:
    """What Kafka reports as a partition's size: its segments' .log files (not the indexes)."""
    return sum(f.stat().st_size for f in (broker.data_dir / f"{topic}-{partition}").glob("*.log"))


def visible_topics(broker: ThreadBroker) -> dict[str, int]:
    return broker.call(lambda: {t.name: t.partitions for t in broker.broker.visible_topics()})


# --- through aiokafka --------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["v1", "v4"])
async def test_sizes_are_the_log_files_on_disk_grow_with_produce_and_empty_partitions_are_zero(
    broker: ThreadBroker, version: str
) -> None:
    """Asking for all topics: one log dir, the broker's data dir as an absolute path, and
    for every partition the bytes of its .log segment files; an empty partition is 0 and a
    partition grows by what was produced to it, others stay as they were."""
    await create_topics(broker, {"sized": 3})
    await produce(broker, "sized", 0, 20)
    await produce(broker, "sized", 1, 5)

    first = await describe_log_dirs(broker, None, version)
    assert first["results"][0]["log_dir"] == str(broker.data_dir.absolute())
    before = sizes(first)["sized"]
    assert before == {p: disk_bytes(broker, "sized", p) for p in range(3)}
    assert before[0] > before[1] > 0
    assert before[2] == 0

    await produce(broker, "sized", 0, 10)
    after = sizes(await describe_log_dirs(broker, None, version))["sized"]
    assert after == {p: disk_bytes(broker, "sized", p) for p in range(3)}
    assert after[0] > before[0] + 10 * 100
    assert (after[1], after[2]) == (before[1], before[2])


async def test_all_topics_lists_every_topic_and_partition_but_not_the_metadata_log(broker: ThreadBroker) -> None:
    """Topics null: every topic with all its partitions, internal ones included (as Kafka
    lists __consumer_offsets); the cluster metadata log is not a partition log in KRaft."""
    await create_topics(broker, {"alpha": 3, "beta": 1, "gamma": 2})
    await produce(broker, "beta", 0, 3)
    listed = sizes(await describe_log_dirs(broker))
    assert {name: sorted(parts) for name, parts in listed.items()} == {
        name: list(range(n)) for name, n in visible_topics(broker).items()
    }
    assert {"alpha", "beta", "gamma"} <= set(listed)
    assert "__cluster_metadata" not in listed
    assert listed["beta"][0] == disk_bytes(broker, "beta", 0) > 0


async def test_internal_offsets_topic_is_listed_once_groups_used_it(broker: ThreadBroker) -> None:
    """__consumer_offsets is a partition log like any other once a group commits."""
    await create_topics(broker, {"work": 1})
    await produce(broker, "work", 0, 2)
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="g", enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([TopicPartition("work", 0)])
        await consumer.commit({TopicPartition("work", 0): 2})
    finally:
        await consumer.stop()
    listed = sizes(await describe_log_dirs(broker))
    assert "__consumer_offsets" in listed
    assert sum(listed["__consumer_offsets"].values()) == sum(
        disk_bytes(broker, "__consumer_offsets", p) for p in listed["__consumer_offsets"]
    )
    assert sum(listed["__consumer_offsets"].values()) > 0


@pytest.mark.parametrize("version", ["v1", "v4"])
async def test_asking_for_partitions_returns_only_those(broker: ThreadBroker, version: str) -> None:
    """Named topic-partitions: exactly those, other partitions and topics left out."""
    await create_topics(broker, {"picked": 3, "other": 2})
    await produce(broker, "picked", 2, 4)
    await produce(broker, "other", 0, 4)
    listed = sizes(await describe_log_dirs(broker, {"picked": [0, 2]}, version))
    assert listed == {"picked": {0: 0, 2: disk_bytes(broker, "picked", 2)}}
    assert listed["picked"][2] > 0


async def test_unknown_topics_and_partitions_are_omitted_not_errors(broker: ThreadBroker) -> None:
    """As in Kafka: an unknown topic, an out-of-range partition or a topic asked with no
    partitions is simply absent from the answer; the log dir itself has no error."""
    await create_topics(broker, {"known": 2})
    await produce(broker, "known", 1, 2)
    assert sizes(await describe_log_dirs(broker, {"no-such-topic": [0]})) == {}
    assert sizes(await describe_log_dirs(broker, {"known": [1, 5], "no-such-topic": [0, 1]})) == {
        "known": {1: disk_bytes(broker, "known", 1)}
    }
    assert sizes(await describe_log_dirs(broker, {"known": []})) == {}
    assert sizes(await describe_log_dirs(broker, {})) == {}


async def test_sizes_survive_a_restart(broker: ThreadBroker) -> None:
    """Sizes come from the segments the broker loaded, so they agree with disk after restart."""
    await create_topics(broker, {"kept": 2})
    await produce(broker, "kept", 0, 7)
    before = sizes(await describe_log_dirs(broker, {"kept": [0, 1]}))
    await asyncio.to_thread(broker.restart)
    after = sizes(await describe_log_dirs(broker, {"kept": [0, 1]}))
    assert after == before == {"kept": {0: disk_bytes(broker, "kept", 0), 1: 0}}


async def test_v4_reports_the_volume_total_and_usable_bytes(broker: ThreadBroker) -> None:
    """v4 adds TotalBytes and UsableBytes of the volume holding the data dir."""
    await create_topics(broker, {"space": 1})
    [result] = (await describe_log_dirs(broker, None, "v4"))["results"]
    assert result["total_bytes"] == shutil.disk_usage(broker.data_dir).total > 0
    assert 0 < result["usable_bytes"] <= result["total_bytes"]


# --- raw frames, every version -----------------------------------------------------------------

RAW = {1: (RequestV1, TopicV1), 2: (RequestV2, TopicV2), 3: (RequestV3, TopicV3), 4: (RequestV4, TopicV4)}


@pytest.mark.parametrize("version", sorted(RAW), ids=[f"v{v}" for v in sorted(RAW)])
async def test_every_version_answers_in_its_own_format(broker: ThreadBroker, version: int) -> None:
    """v1 classic, v2+ flexible, v3 adds the top-level error code, v4 the volume's space;
    each response decodes exactly (no missing or trailing bytes)."""
    await create_topics(broker, {"raw": 2})
    await produce(broker, "raw", 1, 3)
    request_cls, topic_cls = RAW[version]

    def ask() -> Any:
        with connect(broker.bootstrap) as conn:
            everything = conn.request(request_cls(topics=None))
            one = conn.request(request_cls(topics=(topic_cls(topic=TopicName("raw"), partitions=(i32(1),)),)))
            return everything, one

    everything, one = await asyncio.to_thread(ask)
    for response in (everything, one):
        assert response.throttle_time.total_seconds() == 0
        if version >= 3:
            assert response.error_code == ErrorCode.none
        [result] = response.results
        assert result.error_code == ErrorCode.none
        assert result.log_dir == str(broker.data_dir.absolute())
        if version >= 4:
            assert result.total_bytes > 0
            assert 0 < result.usable_bytes <= result.total_bytes
    [raw_topic] = [t for t in everything.results[0].topics if t.name == "raw"]
    assert [(p.partition_index, p.partition_size) for p in raw_topic.partitions] == [
        (0, 0),
        (1, disk_bytes(broker, "raw", 1)),
    ]
    [only] = one.results[0].topics
    assert only.name == "raw"
    assert [(p.partition_index, p.partition_size, p.offset_lag, p.is_future_key) for p in only.partitions] == [
        (1, disk_bytes(broker, "raw", 1), 0, False)
    ]


async def test_api_versions_advertises_1_to_4_and_v0_is_refused_as_in_kafka_4(broker: ThreadBroker) -> None:
    """Kafka 4.0 dropped DescribeLogDirs v0 (KIP-896): the broker advertises 1-4 and closes
    the connection on a v0 request, as it does for any unadvertised version."""

    def check() -> None:
        with connect(broker.bootstrap) as conn:
            advertised = {
                int(a.api_key): (int(a.min_version), int(a.max_version)) for a in conn.api_versions().api_keys
            }
            assert advertised[API_KEY] == (1, 4)
            conn.send_raw(frame(header_bytes(API_KEY, 0, 9, flexible=False) + b"\xff\xff\xff\xff"))
            assert conn.wait_closed() == b""

    await asyncio.to_thread(check)
