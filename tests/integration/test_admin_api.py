"""The broker's admin HTTP API: health, Prometheus metrics and topics, read with a real HTTP
client after real Kafka clients produced and fetched over TCP."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from tests.support.harness import ThreadBroker

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def get(url: str) -> tuple[int, str, Any]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        text = await response.text()
        body = await response.json() if response.content_type == "application/json" else None
        return response.status, response.headers["Content-Type"], body if body is not None else text


async def metrics(broker: ThreadBroker) -> Samples:
    status, content_type, text = await get(f"{broker.admin_url}/metrics")
    assert status == 200
    assert content_type.startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


async def create_topics(broker: ThreadBroker, partitions: dict[str, int]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, n, 1) for name, n in partitions.items()])
    finally:
        await admin.close()


async def produce(broker: ThreadBroker, topic: str, count: int, partition: int | None = None) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    await producer.start()
    try:
        sent = [
            await producer.send(topic, f"record-{i}".encode(), key=f"k{i % 5}".encode(), partition=partition)
            for i in range(count)
        ]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def fetch_all(broker: ThreadBroker, topic: str, partitions: int, count: int) -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        await consumer.seek_to_beginning(*assigned)
        got = 0
        async with asyncio.timeout(20):
            while got < count:
                batches = await consumer.getmany(timeout_ms=200)
                got += sum(len(records) for records in batches.values())
        assert got == count
    finally:
        await consumer.stop()


def disk_bytes(broker: ThreadBroker, topic: str, partition: int) -> int:
    return sum(f.stat().st_size for f in (broker.data_dir / f"{topic}-{partition}").glob("*.log"))


async def test_healthz_answers_ok_with_node_and_cluster_id(broker: ThreadBroker) -> None:
    status, _, body = await get(f"{broker.admin_url}/healthz")
    assert status == 200
    assert body == {"status": "ok", "node_id": 1, "cluster_id": broker.broker.cluster_id}


async def test_metrics_count_bytes_and_records_in_and_out_and_log_sizes_match_the_disk(broker: ThreadBroker) -> None:
    await create_topics(broker, {"metered": 3})
    await produce(broker, "metered", 120)
    await fetch_all(broker, "metered", 3, 120)
    samples = await metrics(broker)

    sizes = [value(samples, "streamshop_log_size_bytes", topic="metered", partition=str(p)) for p in range(3)]
    assert sizes == [disk_bytes(broker, "metered", p) for p in range(3)]
    assert all(size > 0 for size in sizes)  # 5 keys over 3 partitions: more than one used
    # Batches are stored as the client sent them and fetched once each: bytes in = on disk = bytes out.
    assert value(samples, "streamshop_bytes_in_total", topic="metered") == sum(sizes)
    assert value(samples, "streamshop_bytes_out_total", topic="metered") == sum(sizes)
    assert value(samples, "streamshop_records_in_total", topic="metered") == 120
    assert value(samples, "streamshop_records_out_total", topic="metered") == 120
    ends = [value(samples, "streamshop_log_end_offset", topic="metered", partition=str(p)) for p in range(3)]
    assert sum(ends) == 120
    starts = [value(samples, "streamshop_log_start_offset", topic="metered", partition=str(p)) for p in range(3)]
    assert starts == [0, 0, 0]


async def test_metrics_partitions_gauge_counts_topic_partitions_only(broker: ThreadBroker) -> None:
    assert value(await metrics(broker), "streamshop_partitions") == 0  # the metadata log is not a partition
    await create_topics(broker, {"four": 4, "two": 2})
    assert value(await metrics(broker), "streamshop_partitions") == 6


async def test_metrics_request_latency_histogram_per_api_agrees_with_request_counts(broker: ThreadBroker) -> None:
    await produce(broker, "timed", 10, partition=0)
    await fetch_all(broker, "timed", 1, 10)
    samples = await metrics(broker)
    for api in ("ApiVersions", "Metadata", "Produce", "Fetch"):
        count = value(samples, "streamshop_request_latency_seconds_count", api=api)
        assert count >= 1
        assert count == value(samples, "streamshop_requests_total", api=api)
        assert value(samples, "streamshop_request_latency_seconds_bucket", api=api, le="+Inf") == count
        assert value(samples, "streamshop_request_latency_seconds_sum", api=api) > 0
        buckets = sorted(
            (float(dict(labels)["le"]), v)
            for (name, labels), v in samples.items()
            if name == "streamshop_request_latency_seconds_bucket" and dict(labels)["api"] == api
        )
        counts = [v for _, v in buckets]
        assert counts == sorted(counts)  # cumulative
    assert ("streamshop_request_latency_seconds_count", frozenset({("api", "DeleteTopics")})) not in samples


async def test_api_topics_lists_partitions_offsets_sizes_and_configs(broker: ThreadBroker) -> None:
    await create_topics(broker, {"listed": 2})
    await produce(broker, "listed", 7, partition=1)
    status, content_type, body = await get(f"{broker.admin_url}/api/topics")
    assert status == 200
    assert content_type.startswith("application/json")
    by_name = {t["name"]: t for t in body["topics"]}
    assert set(by_name) == {"listed", "__cluster_metadata"}
    topic = by_name["listed"]
    assert topic["id"] == str(broker.call(lambda: broker.broker.store.get("listed").topic_id))
    assert topic["internal"] is False
    assert [(p["partition"], p["log_start_offset"], p["log_end_offset"]) for p in topic["partitions"]] == [
        (0, 0, 0),
        (1, 0, 7),
    ]
    assert topic["partitions"][0]["size_bytes"] == 0
    assert topic["partitions"][1]["size_bytes"] == disk_bytes(broker, "listed", 1) > 0
    assert topic["size_bytes"] == topic["partitions"][1]["size_bytes"]
    assert topic["configs"]["cleanup.policy"] == "delete"
    assert topic["overrides"] == {}
    assert by_name["__cluster_metadata"]["internal"] is True


async def test_api_topic_by_name_shows_overrides_and_404_json_for_unknown_topic(broker: ThreadBroker) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic("tuned", 1, 1, topic_configs={"retention.ms": "60000"})])
    finally:
        await admin.close()
    status, _, topic = await get(f"{broker.admin_url}/api/topics/tuned")
    assert status == 200
    assert topic["name"] == "tuned"
    assert topic["overrides"] == {"retention.ms": "60000"}
    assert topic["configs"]["retention.ms"] == "60000"
    assert [p["log_end_offset"] for p in topic["partitions"]] == [0]

    status, content_type, missing = await get(f"{broker.admin_url}/api/topics/absent")
    assert status == 404
    assert content_type.startswith("application/json")
    assert missing == {"error": "not_found", "message": "topic 'absent' does not exist"}
