"""The dashboard tells the two group protocols apart, against a real broker with real clients:
a classic group (JoinGroup/SyncGroup, confluent-kafka's default) and a consumer-protocol group
(KIP-848, `group.protocol=consumer`), each with its type from ListGroups v5, its member and its
assignment.  A broker without ListGroups v5 (an older Kafka) still shows both groups, their type
unknown.  The dashboard app runs on a real HTTP server (127.0.0.1, OS port)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer

from services.dashboard.app import create_app
from services.dashboard.config import DashboardConfig
from services.dashboard.kafka_reader import ClusterReader
from tests.support.configs import set_group_configs
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import create_topic
from tests.support.services import serve_app

Snapshot = dict[str, Any]


class PollingConsumer:
    """A confluent-kafka consumer polling in a thread of its own, which also reads its assignment:
    with the consumer protocol, assignment() must not be called while another thread polls."""

    def __init__(self, bootstrap: str, topic: str, group_id: str, **config: str) -> None:
        self._config = {
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "client.id": f"{group_id}-client",
            **config,
        }
        self._topic = topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"consumer-{group_id}")
        self.assigned: list[tuple[str, int]] = []

    def _run(self) -> None:
        consumer = Consumer(self._config)
        try:
            consumer.subscribe([self._topic])
            while not self._stop.is_set():
                consumer.poll(0.1)
                self.assigned = sorted((tp.topic, tp.partition) for tp in consumer.assignment())
        finally:
            consumer.close()

    def start(self) -> None:
        self._thread.start()

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.to_thread(self._thread.join, 30)
        assert not self._thread.is_alive(), "the consumer did not close"


@asynccontextmanager
async def two_groups(bootstrap: str, topic: str, classic: str, kip848: str) -> AsyncIterator[list[PollingConsumer]]:
    """One member in each group, both on every partition of `topic`."""
    consumers = [
        PollingConsumer(bootstrap, topic, classic),
        PollingConsumer(bootstrap, topic, kip848, **{"group.protocol": "consumer"}),
    ]
    for c in consumers:
        c.start()
    try:
        yield consumers
    finally:
        for c in consumers:
            await c.stop()


async def until(read: Callable[[], Any], condition: Callable[[Any], object], what: str, within: float = 20) -> Any:
    """The first answer of `read` for which `condition` is true (an exception counts as false)."""
    deadline = time.monotonic() + within
    while True:
        answer = await read()
        try:
            if condition(answer):
                return answer
        except (KeyError, TypeError):
            pass
        assert time.monotonic() < deadline, f"timed out after {within} s waiting for {what}; last: {answer}"
        await asyncio.sleep(0.05)


def group_row(snap: Snapshot, group_id: str) -> dict[str, Any]:
    """KeyError while the group is not listed yet (a StopIteration would not pass a generator)."""
    rows: dict[str, dict[str, Any]] = {g["group_id"]: g for g in snap["groups"]}
    return rows[group_id]


def settled(row: dict[str, Any], topic: str) -> bool:
    """Stable, its one member holding both partitions of `topic`."""
    return row["state"] == "Stable" and [m["assignment"] for m in row["members"]] == [
        [{"topic": topic, "partitions": [0, 1]}]
    ]


async def test_the_snapshot_reports_a_classic_and_a_consumer_protocol_group_with_their_members(
    broker: ThreadBroker, tmp_path: Path
) -> None:
    topic, classic, kip848 = "dash.types", "dash-classic", "dash-kip848"
    create_topic(broker.bootstrap, topic, 2)
    config = DashboardConfig(
        listen="127.0.0.1",
        port=0,
        bootstrap_servers=broker.bootstrap,
        refresh_interval=0.2,
        poll_timeout=3.0,
        log_shipping=False,
        database_path=tmp_path / "dashboard.db",
    )
    async with (
        serve_app(create_app(config)) as (url, session),
        two_groups(broker.bootstrap, topic, classic, kip848) as consumers,
    ):

        async def snapshot() -> Snapshot:
            async with session.get(url + "/api/snapshot") as response:
                assert response.status == 200
                return dict(await response.json())

        snap = await until(
            snapshot,
            lambda s: (
                all(c.assigned == [(topic, 0), (topic, 1)] for c in consumers)
                and all(settled(group_row(s, g), topic) for g in (classic, kip848))
            ),
            "each group stable with its member holding both partitions",
        )
    rows = {g: group_row(snap, g) for g in (classic, kip848)}
    assert {g: row["group_type"] for g, row in rows.items()} == {classic: "classic", kip848: "consumer"}
    for group_id, row in rows.items():
        assert row["protocol_type"] == "consumer"
        assert [m["client_id"] for m in row["members"]] == [f"{group_id}-client"]
        assert row["members"][0]["member_id"]
    assert rows[kip848]["protocol"] == "uniform"  # the broker's assignor, not a client's
    assert rows[classic]["protocol"] == "range"  # confluent-kafka's first assignor


async def test_a_broker_without_list_groups_v5_still_shows_both_groups_with_their_type_unknown(
    broker: ThreadBroker,
) -> None:
    topic, classic, kip848 = "dash.untyped", "untyped-classic", "untyped-kip848"
    create_topic(broker.bootstrap, topic, 2)
    reader = ClusterReader({"bootstrap_servers": broker.bootstrap})
    await reader.start()
    try:
        async with two_groups(broker.bootstrap, topic, classic, kip848):
            typed = await until(
                reader.observe,
                lambda o: all(
                    o.groups[g].state == "Stable" and o.groups[g].members and o.groups[g].members[0].assignment
                    for g in (classic, kip848)
                ),
                "both groups stable with their assignment",
            )
            assert (typed.groups[classic].group_type, typed.groups[kip848].group_type) == ("classic", "consumer")

            # What an older Kafka advertises: ListGroups up to v4.  The reader's connections are open
            # (the observation above), so they keep this until they reconnect.
            assert reader._admin is not None
            for conn in reader._admin._client._conns.values():
                conn._versions[16] = (0, 4)
            untyped = await reader.observe()
    finally:
        await reader.close()
    for group_id in (classic, kip848):
        group = untyped.groups[group_id]
        assert group.group_type is None
        assert (group.state, group.protocol_type) == ("Stable", "consumer")
        assert group.members[0].assignment == ((topic, (0, 1)),)


async def test_a_share_group_is_shown_with_its_members_and_start_offsets(broker: ThreadBroker) -> None:
    """A share group of two ShareConsumers on a two-partition topic: type share, both members,
    the partitions dealt between them, and each partition's start offset past the records they accepted.  Without the
    share APIs (an Apache Kafka cluster without the share.version feature) the group is still
    listed, with the reason its details are missing."""
    topic, group = "dash.share", "dash-share"
    create_topic(broker.bootstrap, topic, 2)
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        producer.produce(topic, key=b"k%d" % i, value=b"v", partition=i % 2)
    assert producer.flush(20) == 0
    workers = [ShareWorker(broker.bootstrap, topic, group, f"worker-{i}") for i in range(2)]
    for w in workers:
        w.start()
    reader = ClusterReader({"bootstrap_servers": broker.bootstrap})
    await reader.start()
    try:
        seen = await until(
            reader.observe,
            lambda o: (
                o.groups[group].committed == {(topic, 0): 5, (topic, 1): 5}
                # Both members, each told its partition: a member takes a new assignment at its
                # next heartbeat, up to group.share.heartbeat.interval.ms (5 s) later.
                and sorted(p for m in o.groups[group].members for _, parts in m.assignment for p in parts) == [0, 1]
                and len(o.groups[group].members) == 2
            ),
            "the share group with both members, a partition each, and all ten records done",
            within=60,
        )
        assert reader._admin is not None
        for conn in reader._admin._client._conns.values():
            conn._versions.pop(77, None)  # a broker that does not serve ShareGroupDescribe
        without = await reader.observe()
    finally:
        await reader.close()
        for w in workers:
            await w.stop()
    share = seen.groups[group]
    assert (share.group_type, share.protocol_type, share.protocol, share.state) == (
        "share",
        "share",
        "simple",
        "Stable",
    )
    assert sorted(m.client_id for m in share.members) == ["worker-0", "worker-1"]
    assert sorted(p for m in share.members for _, parts in m.assignment for p in parts) == [0, 1]
    assert sum(w.accepted for w in workers) == 10
    assert without.groups[group].error == "share group details unavailable: IncompatibleBrokerVersion"
    assert without.groups[group].group_type == "share"


class ShareWorker:
    """A ShareConsumer in a thread of its own, accepting every record it is given."""

    def __init__(self, bootstrap: str, topic: str, group_id: str, client_id: str) -> None:
        self._config = {"bootstrap.servers": bootstrap, "group.id": group_id, "client.id": client_id,
                        "share.acknowledgement.mode": "explicit"}  # fmt: skip
        self._topic = topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"share-{client_id}")
        self.accepted = 0

    def _run(self) -> None:
        consumer = ShareConsumer(self._config)
        try:
            consumer.subscribe([self._topic])
            while not self._stop.is_set():
                for message in consumer.poll(0.1):
                    if message.error() is None:
                        consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                        self.accepted += 1
                consumer.commit_sync(10)
        finally:
            consumer.close()

    def start(self) -> None:
        self._thread.start()

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.to_thread(self._thread.join, 30)
        assert not self._thread.is_alive(), "the share consumer did not close"


async def test_the_snapshot_shows_a_share_group_with_its_start_offsets_and_lag(
    broker: ThreadBroker, tmp_path: Path
) -> None:
    """/api/snapshot over HTTP: a share group whose member accepted two of six records and holds
    the other four has type share, its member, and per partition its start offset (in
    `committed`, which the page heads "start offset") and the lag from it."""
    topic, group = "dash.share.snap", "dash-share-snap"
    create_topic(broker.bootstrap, topic, 1)
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(6):
        producer.produce(topic, value=b"v%d" % i)
    assert producer.flush(20) == 0
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "client.id": "snap-share",
                              "share.acknowledgement.mode": "explicit", "max.poll.records": "10"})  # fmt: skip
    consumer.subscribe([topic])
    config = DashboardConfig(
        listen="127.0.0.1",
        port=0,
        bootstrap_servers=broker.bootstrap,
        refresh_interval=0.2,
        poll_timeout=3.0,
        log_shipping=False,
        database_path=tmp_path / "dashboard.db",
    )
    try:
        held: list[Any] = []
        deadline = time.monotonic() + 15
        while len(held) < 6:
            assert time.monotonic() < deadline, f"only {len(held)} records acquired within 15 s"
            held.extend(m for m in await asyncio.to_thread(consumer.poll, 0.2) if m.error() is None)
        for message in held:
            if message.offset() < 2:
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        await asyncio.to_thread(consumer.commit_sync, 10)
        async with serve_app(create_app(config)) as (url, session):

            async def snapshot() -> Snapshot:
                async with session.get(url + "/api/snapshot") as response:
                    assert response.status == 200
                    return dict(await response.json())

            snap = await until(
                snapshot,
                lambda s: group_row(s, group)["partitions"] and group_row(s, group)["partitions"][0]["committed"] == 2,
                "the share group with its start offset",
            )
    finally:
        await asyncio.to_thread(consumer.close)
    row = group_row(snap, group)
    assert (row["group_type"], row["protocol_type"], row["protocol"], row["state"], row["error"]) == (
        "share",
        "share",
        "simple",
        "Stable",
        None,
    )
    assert [(m["client_id"], m["assignment"]) for m in row["members"]] == [
        ("snap-share", [{"topic": topic, "partitions": [0]}])
    ]
    [partition] = row["partitions"]
    assert (partition["committed"], partition["end_offset"], partition["lag"], partition["member"]) == (
        2,
        6,
        4,
        "snap-share",
    )
    assert row["lag"] == 4
