"""The broker's admin HTTP API for consumer groups (`/api/groups`, `/api/groups/{id}`) and the
group metrics on `/metrics`, read with a real HTTP client while real confluent-kafka
consumer groups are joined over TCP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from confluent_kafka import AcknowledgeType, Consumer, ShareConsumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from tests.support.configs import set_group_configs
from tests.support.harness import REPO, ThreadBroker
from tests.support.kafka_clients import confluent_produce, create_topic


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.headers["Content-Type"], e.read().decode()


def get_json(broker: ThreadBroker, path: str, status: int = 200) -> Any:
    code, content_type, body = get(f"{broker.admin_url}{path}")
    assert (code, content_type.split(";")[0]) == (status, "application/json"), body
    return json.loads(body)


def group_metrics(broker: ThreadBroker) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    code, content_type, text = get(f"{broker.admin_url}/metrics")
    assert code == 200
    assert content_type.startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith(("streamshop_group_", "streamshop_share_group_"))
    }


def sample(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


def wait_until(predicate: Callable[[], object], what: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def new_consumer(broker: ThreadBroker, group: str, client_id: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "client.id": client_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "heartbeat.interval.ms": 200,  # members learn of a rebalance at their next heartbeat
        }
    )


def join(joining: Consumer, topic: str, members: tuple[Consumer, ...] = ()) -> None:
    """Subscribe `joining` and poll it and the group's other `members` (which take part in
    the rebalance) until each holds an assignment."""
    joining.subscribe([topic])
    consumers = [*members, joining]
    deadline = time.monotonic() + 15
    while not all(c.assignment() for c in consumers):
        assert time.monotonic() < deadline, "no assignment within 15 s"
        for c in consumers:
            c.poll(0.05)


def group_view(broker: ThreadBroker, group: str) -> tuple[str, list[str]]:
    """(state, member ids) as the coordinator holds them."""

    def read() -> tuple[str, list[str]]:
        found = broker.broker.coordinator.groups[group]
        return found.state.value, sorted(found.members)

    return broker.call(read)


def test_groups_endpoints_report_state_members_assignments_offsets_and_lag(broker: ThreadBroker) -> None:
    """An active group, an emptied group and a group that only committed offsets (no members
    ever, its id has a slash) each show their state, protocol, members with decoded
    assignments, per-partition committed offset, log end offset and lag; unknown ids are 404."""
    create_topic(broker.bootstrap, "otp", 2)
    confluent_produce(broker.bootstrap, "otp", [{"value": b"x", "partition": p} for p in (0,) * 7 + (1,) * 3])

    email = new_consumer(broker, "email", "email-1")
    try:
        join(email, "otp")
        email.commit(offsets=[TopicPartition("otp", 0, 7), TopicPartition("otp", 1, 1)], asynchronous=False)
    finally:
        email.close()
    audit = new_consumer(broker, "ops/audit", "auditor")
    try:  # assign() and commit: offsets without ever joining the group
        audit.assign([TopicPartition("otp", 0)])
        audit.commit(offsets=[TopicPartition("otp", 0, 0)], asynchronous=False)
    finally:
        audit.close()

    sms = new_consumer(broker, "sms", "sms-1")
    try:
        join(sms, "otp")
        sms.commit(offsets=[TopicPartition("otp", 0, 4), TopicPartition("otp", 1, 3)], asynchronous=False)
        state, [sms_id] = group_view(broker, "sms")
        assert state == "Stable"

        assert get_json(broker, "/api/groups") == {
            "groups": [
                {
                    "group": "email",
                    "state": "Empty",
                    "type": "classic",
                    "protocol_type": "consumer",
                    "protocol": "",
                    "member_count": 0,
                    "lag": 2,
                },
                {
                    "group": "ops/audit",
                    "state": "Empty",
                    "type": "classic",
                    "protocol_type": "",
                    "protocol": "",
                    "member_count": 0,
                    "lag": 7,
                },
                {
                    "group": "sms",
                    "state": "Stable",
                    "type": "classic",
                    "protocol_type": "consumer",
                    "protocol": "range",
                    "member_count": 1,
                    "lag": 3,
                },
            ]
        }
        sms_detail = get_json(broker, "/api/groups/sms")
        assert sms_detail == {
            "group": "sms",
            "state": "Stable",
            "type": "classic",
            "protocol_type": "consumer",
            "protocol": "range",
            "member_count": 1,
            "lag": 3,
            "members": [
                {
                    "member_id": sms_id,
                    "client_id": "sms-1",
                    "host": "127.0.0.1",
                    "group_instance_id": None,
                    "assignment": {"otp": [0, 1]},
                }
            ],
            "partitions": [
                {
                    "topic": "otp",
                    "partition": 0,
                    "committed_offset": 4,
                    "log_end_offset": 7,
                    "lag": 3,
                    "member_id": sms_id,
                },
                {
                    "topic": "otp",
                    "partition": 1,
                    "committed_offset": 3,
                    "log_end_offset": 3,
                    "lag": 0,
                    "member_id": sms_id,
                },
            ],
            "committer": None,  # a consumer that joins notes nothing in its commits
        }
        # The same record as `streamshop groups describe --json` (confluent-kafka's AdminClient).
        described = subprocess.run(
            [
                sys.executable,
                "-m",
                "streamshop.cli",
                "groups",
                "--bootstrap",
                broker.bootstrap,
                "describe",
                "sms",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            check=False,
        )
        assert described.returncode == 0, described.stderr
        assert json.loads(described.stdout) == [sms_detail]
    finally:
        sms.close()

    assert get_json(broker, "/api/groups/email")["partitions"] == [
        {"topic": "otp", "partition": 0, "committed_offset": 7, "log_end_offset": 7, "lag": 0, "member_id": None},
        {"topic": "otp", "partition": 1, "committed_offset": 1, "log_end_offset": 3, "lag": 2, "member_id": None},
    ]
    audit_detail = get_json(broker, "/api/groups/ops%2Faudit")
    assert (audit_detail["group"], audit_detail["members"], audit_detail["lag"]) == ("ops/audit", [], 7)
    assert get_json(broker, "/api/groups/nope", status=404) == {
        "error": "not_found",
        "message": "group 'nope' does not exist",
    }


def test_metrics_report_lag_per_committed_partition_members_and_rebalances_per_group(broker: ThreadBroker) -> None:
    """Lag is log end offset minus committed offset at scrape time (it grows as records are
    produced); a second member joining is a second rebalance of the group."""
    create_topic(broker.bootstrap, "logs", 2)
    confluent_produce(broker.bootstrap, "logs", [{"value": b"x", "partition": p} for p in (0,) * 5 + (1,) * 2])
    first = new_consumer(broker, "indexer", "indexer-1")
    second = new_consumer(broker, "indexer", "indexer-2")
    try:
        join(first, "logs")
        first.commit(offsets=[TopicPartition("logs", 0, 1), TopicPartition("logs", 1, 2)], asynchronous=False)
        assert group_metrics(broker) == {
            sample("streamshop_group_lag", group="indexer", topic="logs", partition="0"): 4.0,
            sample("streamshop_group_lag", group="indexer", topic="logs", partition="1"): 0.0,
            sample("streamshop_group_members", group="indexer"): 1.0,
            sample("streamshop_group_rebalances_total", group="indexer"): 1.0,
        }

        confluent_produce(broker.bootstrap, "logs", [{"value": b"y", "partition": 1}] * 3)
        join(second, "logs", members=(first,))
        wait_until(lambda: group_view(broker, "indexer")[0] == "Stable", "the group to be stable with two members")
        assert len(group_view(broker, "indexer")[1]) == 2
        assert group_metrics(broker) == {
            sample("streamshop_group_lag", group="indexer", topic="logs", partition="0"): 4.0,
            sample("streamshop_group_lag", group="indexer", topic="logs", partition="1"): 3.0,
            sample("streamshop_group_members", group="indexer"): 2.0,
            sample("streamshop_group_rebalances_total", group="indexer"): 2.0,
        }
    finally:
        second.close()
        first.close()
    wait_until(lambda: not group_view(broker, "indexer")[1], "both members to leave")
    after = group_metrics(broker)
    assert after[sample("streamshop_group_members", group="indexer")] == 0.0
    assert after[sample("streamshop_group_lag", group="indexer", topic="logs", partition="1")] == 3.0


def test_a_consumer_protocol_group_is_in_the_endpoints_and_the_metrics(broker: ThreadBroker) -> None:
    """A group of the consumer group protocol (KIP-848): type, assignor, members and their
    assignments in `/api/groups`, and in the metrics."""
    create_topic(broker.bootstrap, "kip848.admin", 4)
    consumers = [
        Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "kip848.admin",
                "group.protocol": "consumer",
                "client.id": f"admin-{i}",
            }
        )
        for i in range(2)
    ]
    try:
        for c in consumers:
            c.subscribe(["kip848.admin"])

        def settled() -> bool:
            for c in consumers:
                c.poll(0.05)
            return all(len(c.assignment()) == 2 for c in consumers)

        wait_until(settled, "two members with two partitions each")
        detail = get_json(broker, "/api/groups/kip848.admin")
        assert (detail["type"], detail["state"], detail["protocol"], detail["member_count"]) == (
            "consumer",
            "Stable",
            "uniform",
            2,
        )
        held = sorted(p for m in detail["members"] for p in m["assignment"]["kip848.admin"])
        assert held == [0, 1, 2, 3]
        assert {m["client_id"] for m in detail["members"]} == {"admin-0", "admin-1"}
        listed = {g["group"]: g for g in get_json(broker, "/api/groups")["groups"]}
        assert listed["kip848.admin"]["type"] == "consumer"
        metrics = group_metrics(broker)
        assert metrics[sample("streamshop_group_members", group="kip848.admin")] == 2.0
        assert metrics[sample("streamshop_group_rebalances_total", group="kip848.admin")] >= 2.0
    finally:
        for c in consumers:
            c.close()


def test_a_share_group_is_in_the_endpoints_and_the_metrics(broker: ThreadBroker) -> None:
    """A share group (KIP-932): type, members and assignments in `/api/groups`; per partition its
    start offset, the records held locked and its lag (records not done), also in the metrics."""
    create_topic(broker.bootstrap, "share.admin", 1)
    set_group_configs(broker.bootstrap, "share.admin", {"share.auto.offset.reset": "earliest"})
    confluent_produce(broker.bootstrap, "share.admin", [{"key": b"k", "value": b"v%d" % i} for i in range(6)])
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "share.admin",
                              "client.id": "share-admin", "share.acknowledgement.mode": "explicit",
                              "max.poll.records": "10"})  # fmt: skip
    consumer.subscribe(["share.admin"])
    try:
        held: list[Any] = []

        def acquired() -> bool:
            held.extend(consumer.poll(0.2))
            return bool(held)

        wait_until(acquired, "records acquired")
        assert len(held) == 6
        for message in held[:2]:  # two done; four still held
            consumer.acknowledge(message, AcknowledgeType.ACCEPT)
        consumer.commit_sync(10)
        detail = get_json(broker, "/api/groups/share.admin")
        assert (detail["type"], detail["state"], detail["protocol"], detail["member_count"]) == (
            "share",
            "Stable",
            "simple",
            1,
        )
        assert [m["client_id"] for m in detail["members"]] == ["share-admin"]
        assert detail["members"][0]["assignment"] == {"share.admin": [0]}
        assert detail["partitions"] == [
            {"topic": "share.admin", "partition": 0, "start_offset": 2, "log_end_offset": 6, "lag": 4, "in_flight": 4}
        ]
        listed = {g["group"]: g for g in get_json(broker, "/api/groups")["groups"]}
        assert (listed["share.admin"]["type"], listed["share.admin"]["lag"]) == ("share", 4)
        metrics = group_metrics(broker)
        assert metrics[sample("streamshop_group_members", group="share.admin")] == 1.0
        assert metrics[sample("streamshop_group_lag", group="share.admin", topic="share.admin", partition="0")] == 4.0
        assert metrics[sample("streamshop_share_group_records_in_flight", group="share.admin")] == 4.0
    finally:
        consumer.close()
