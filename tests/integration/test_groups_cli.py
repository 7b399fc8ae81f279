"""`streamshop groups list|describe|delete|reset-offsets` as a real child process (confluent-kafka
AdminClient inside) against a real broker, with real confluent-kafka consumer groups over TCP."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Message

from analytics.kafka import KafkaClients
from contracts.commit_note import note_text
from tests.support.harness import ThreadBroker, streamshop_cli
from tests.support.kafka_clients import confluent_produce, create_topic


def groups(broker: ThreadBroker, *args: str) -> subprocess.CompletedProcess[str]:
    return streamshop_cli("groups", "--bootstrap", broker.bootstrap, *args)


def groups_json(broker: ThreadBroker, *args: str) -> Any:
    done = groups(broker, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def wait_until(predicate: Callable[[], object], what: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def committed(broker: ThreadBroker, group: str) -> dict[tuple[str, int], int]:
    """The broker's own record of the group's committed offsets."""
    return broker.call(lambda: {tp: c.offset for tp, c in broker.broker.coordinator.committed(group).items()})


def member_ids(broker: ThreadBroker, group: str) -> list[str]:
    def read() -> list[str]:
        found = broker.broker.coordinator.groups.get(group)
        return sorted(found.members) if found is not None else []

    return broker.call(read)


@contextmanager
def group_member(broker: ThreadBroker, group: str, topic: str, **conf: Any) -> Iterator[Consumer]:
    """A subscribed confluent-kafka consumer that has received its assignment; closed on exit
    (a dynamic member leaves the group when it closes)."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **conf,
        }
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 15
        while not consumer.assignment():
            assert time.monotonic() < deadline, "no assignment within 15 s"
            consumer.poll(0.1)
        yield consumer
    finally:
        consumer.close()


def consume(consumer: Consumer, count: int) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + 15
    while len(got) < count and time.monotonic() < deadline:
        for message in consumer.consume(count - len(got), 0.2):
            if message.error() is not None:
                raise KafkaException(message.error())
            got.append(message)
    assert len(got) == count
    return got


def produce(broker: ThreadBroker, topic: str, per_partition: dict[int, int], timestamp_ms: int | None = None) -> None:
    """`per_partition[p]` records into partition p; with `timestamp_ms` the i-th record of a
    partition has timestamp `timestamp_ms + i * 1000`."""
    records = [
        {"value": f"{p}-{i}".encode(), "partition": p}
        | ({} if timestamp_ms is None else {"timestamp": timestamp_ms + i * 1000})
        for p, n in per_partition.items()
        for i in range(n)
    ]
    confluent_produce(broker.bootstrap, topic, records)


def test_list_and_describe_json_show_committed_offsets_log_end_offsets_lag_and_the_live_member(
    broker: ThreadBroker,
) -> None:
    """A consumer read all of 3 partitions but committed only part of two of them: describe
    reports per partition committed offset, log end offset and lag (none where nothing is
    committed), the member with its client id, host, instance id and assignment."""
    create_topic(broker.bootstrap, "orders", 3)
    produce(broker, "orders", {0: 10, 1: 6, 2: 2})
    with group_member(broker, "billing", "orders", **{"client.id": "billing-1", "group.instance.id": "billing-a"}) as c:
        messages = consume(c, 18)
        at = {(m.partition(), m.offset()): m for m in messages}
        c.commit(message=at[(0, 3)], asynchronous=False)  # committed offset 4 of 10
        c.commit(message=at[(1, 5)], asynchronous=False)  # committed offset 6 of 6
        [member_id] = member_ids(broker, "billing")

        assert groups_json(broker, "list") == [
            {"group": "billing", "state": "Stable", "type": "classic", "protocol_type": "consumer"}
        ]
        assert groups_json(broker, "describe", "billing") == [
            {
                "group": "billing",
                "state": "Stable",
                "type": "classic",
                "protocol_type": "consumer",
                "protocol": "range",
                "member_count": 1,
                "lag": 6,
                "members": [
                    {
                        "member_id": member_id,
                        "client_id": "billing-1",
                        "host": "127.0.0.1",
                        "group_instance_id": "billing-a",
                        "assignment": {"orders": [0, 1, 2]},
                    }
                ],
                "partitions": [
                    {
                        "topic": "orders",
                        "partition": 0,
                        "committed_offset": 4,
                        "log_end_offset": 10,
                        "lag": 6,
                        "member_id": member_id,
                    },
                    {
                        "topic": "orders",
                        "partition": 1,
                        "committed_offset": 6,
                        "log_end_offset": 6,
                        "lag": 0,
                        "member_id": member_id,
                    },
                    {
                        "topic": "orders",
                        "partition": 2,
                        "committed_offset": None,
                        "log_end_offset": 2,
                        "lag": None,
                        "member_id": member_id,
                    },
                ],
                "committer": None,  # a consumer that joins notes nothing in its commits
            }
        ]

        text = groups(broker, "describe", "billing")
        assert text.returncode == 0, text.stderr
        own = re.escape(member_id)
        assert re.search(rf"^orders\s+0\s+4\s+10\s+6\s+{own}\s+127\.0\.0\.1\s+billing-1$", text.stdout, re.MULTILINE)
        assert re.search(rf"^orders\s+2\s+-\s+2\s+-\s+{own}\s+127\.0\.0\.1\s+billing-1$", text.stdout, re.MULTILINE)
        assert re.search(
            rf"^{own}\s+billing-a\s+billing-1\s+127\.0\.0\.1\s+3\s+orders:0,1,2$", text.stdout, re.MULTILINE
        )

        listed = groups(broker, "list")
        assert re.search(r"^billing\s+Stable\s+classic\s+consumer$", listed.stdout, re.MULTILINE), listed.stdout


def test_describe_of_an_unknown_group_fails_but_still_describes_the_known_ones(broker: ThreadBroker) -> None:
    create_topic(broker.bootstrap, "audit", 1)
    produce(broker, "audit", {0: 3})
    with group_member(broker, "auditors", "audit") as c:
        consume(c, 3)
        c.commit(asynchronous=False)
    done = groups(broker, "describe", "nope", "auditors", "--json")
    assert done.returncode == 1
    assert "nope: group 'nope' does not exist" in done.stderr
    [described] = json.loads(done.stdout)
    assert (described["group"], described["state"], described["lag"], described["members"]) == (
        "auditors",
        "Empty",
        0,
        [],
    )
    assert "Consumer group 'auditors' has no active members." in groups(broker, "describe", "auditors").stdout


@pytest.mark.slow
def test_reset_offsets_is_refused_while_a_member_is_active_and_moves_offsets_once_it_left(
    broker: ThreadBroker,
) -> None:
    """While a member is in the group a reset changes nothing and says why; after the member
    closed (and left), earliest, an offset (clamped into the log like Kafka's tool), a
    timestamp and a date-time each commit the offsets they name; --dry-run commits nothing."""
    create_topic(broker.bootstrap, "payments", 2)
    t0 = (int(time.time()) - 600) * 1000
    produce(broker, "payments", {0: 5, 1: 5}, timestamp_ms=t0)
    with group_member(broker, "ledger", "payments") as c:
        consume(c, 10)
        c.commit(asynchronous=False)
        everything = {("payments", 0): 5, ("payments", 1): 5}
        assert committed(broker, "ledger") == everything

        refused = groups(broker, "reset-offsets", "ledger", "--topic", "payments", "--to-earliest")
        assert refused.returncode == 1
        assert "group 'ledger' has 1 active member(s) (state Stable)" in refused.stderr
        assert "stop its consumers first" in refused.stderr
        assert committed(broker, "ledger") == everything
    wait_until(lambda: not member_ids(broker, "ledger"), "the member to leave")

    for mode in (("--dry-run",), ()):  # as Kafka's tool: without --execute only the plan is shown
        dry = groups(broker, "reset-offsets", "ledger", "--topic", "payments", "--to-earliest", *mode)
        assert dry.returncode == 0, dry.stderr
        assert re.search(r"^ledger\s+payments\s+0\s+5\s+0$", dry.stdout, re.MULTILINE)
        assert "dry run: no offsets changed (add --execute" in dry.stderr
        assert committed(broker, "ledger") == everything

    def reset(*args: str) -> dict[tuple[str, int], int]:
        done = groups(broker, "reset-offsets", "ledger", "--topic", "payments", "--execute", *args)
        assert done.returncode == 0, done.stderr
        return committed(broker, "ledger")

    assert reset("--to-earliest") == {("payments", 0): 0, ("payments", 1): 0}
    assert reset("--to-offset", "3", "--partition", "1") == {("payments", 0): 0, ("payments", 1): 3}
    assert reset("--to-offset", "99", "--partition", "0") == {("payments", 0): 5, ("payments", 1): 3}
    # Record i of each partition has timestamp t0 + i s: the first at or after t0 + 2 s is offset 2.
    assert reset("--to-timestamp", str(t0 + 2000)) == {("payments", 0): 2, ("payments", 1): 2}
    at = datetime.fromtimestamp((t0 + 3500) / 1000, UTC).isoformat()
    assert reset("--to-datetime", at, "--partition", "1") == {("payments", 0): 2, ("payments", 1): 4}
    assert reset("--to-timestamp", str(t0 + 3_600_000)) == {("payments", 0): 5, ("payments", 1): 5}  # none: the end
    assert reset("--to-earliest", "--partition", "0") == {("payments", 0): 0, ("payments", 1): 5}

    [described] = groups_json(broker, "describe", "ledger")
    assert [(p["partition"], p["committed_offset"], p["lag"]) for p in described["partitions"]] == [
        (0, 0, 5),
        (1, 5, 0),
    ]


@pytest.mark.slow
def test_reset_offsets_rejects_unknown_topics_partitions_and_bad_times(broker: ThreadBroker) -> None:
    create_topic(broker.bootstrap, "refunds", 2)
    cases = {
        ("--topic", "nosuch", "--to-earliest"): "nosuch: UNKNOWN_TOPIC_OR_PART",
        ("--topic", "refunds", "--partition", "5", "--to-latest"): "refunds has no partition 5 (it has 2)",
        ("--topic", "refunds", "--to-datetime", "yesterday"): "--to-datetime 'yesterday': expected ISO 8601",
        ("--topic", "refunds", "--to-offset", "-1"): "--to-offset must be 0 or more",
    }
    for args, message in cases.items():
        done = groups(broker, "reset-offsets", "refunds-group", "--execute", *args)
        assert done.returncode == 1, args
        assert message in done.stderr, done.stderr
    no_target = groups(broker, "reset-offsets", "refunds-group", "--topic", "refunds", "--execute")
    assert no_target.returncode == 2  # argparse: one of --to-* is required
    for args, message in {
        ("refunds-group", "--topic", "refunds", "--shift-by", "-1"): "cannot shift refunds[0]: the group has no "
        "committed offset there",
        ("refunds-group", "--to-latest"): "name the topic(s) to reset (--topic), or give --all-topics",
        ("--topic", "refunds", "--to-latest"): "name the group(s) to reset (GROUP or --group), or give --all-groups",
        ("refunds-group", "--topic", "refunds", "--by-duration", "15 minutes"): "expected an ISO 8601 duration",
        ("refunds-group", "--topic", "refunds:x", "--to-latest"): "expected NAME or NAME:PARTITION",
    }.items():
        refused = groups(broker, "reset-offsets", "--execute", *args)
        assert refused.returncode == 1, (args, refused.stderr)
        assert message in refused.stderr, refused.stderr
    assert committed(broker, "refunds-group") == {}


@pytest.mark.slow
def test_reset_offsets_shift_by_current_duration_all_topics_all_groups_and_csv_export(broker: ThreadBroker) -> None:
    """The other targets and scopes of Kafka's tool: --shift-by moves committed offsets (kept in
    the log), --to-current keeps them (the log end where none), --by-duration finds the first
    record newer than now minus the duration, --all-topics covers the topics a group committed,
    --all-groups every group, NAME:P picks partitions, --export prints the plan as CSV."""
    create_topic(broker.bootstrap, "a", 2)
    create_topic(broker.bootstrap, "b", 1)
    old = (int(time.time()) - 3600) * 1000
    produce(broker, "a", {0: 6, 1: 6}, timestamp_ms=old)
    produce(broker, "b", {0: 4})

    def commit(group: str, offsets: dict[tuple[str, int], int]) -> None:
        for (t, p), offset in offsets.items():
            target = ("--topic", f"{t}:{p}", "--to-offset", str(offset), "--execute")
            done = groups(broker, "reset-offsets", group, *target)
            assert done.returncode == 0, done.stderr

    commit("g1", {("a", 0): 4, ("a", 1): 2, ("b", 0): 1})
    commit("g2", {("a", 0): 1})

    def reset(*args: str) -> subprocess.CompletedProcess[str]:
        done = groups(broker, "reset-offsets", *args)
        assert done.returncode == 0, done.stderr
        return done

    reset("g1", "--all-topics", "--shift-by", "-3", "--execute")
    assert committed(broker, "g1") == {("a", 0): 1, ("a", 1): 0, ("b", 0): 0}
    reset("g1", "--topic", "a:1", "--topic", "b", "--shift-by", "10", "--execute")
    assert committed(broker, "g1") == {("a", 0): 1, ("a", 1): 6, ("b", 0): 4}
    assert reset("g1", "--all-topics", "--to-current", "--export").stdout.splitlines() == ["a,0,1", "a,1,6", "b,0,4"]
    # Records of "a" are an hour old (one second apart); those of "b" are new.
    reset("g1", "--all-topics", "--by-duration", "PT10M", "--execute")
    assert committed(broker, "g1") == {("a", 0): 6, ("a", 1): 6, ("b", 0): 0}
    reset("g1", "--topic", "a", "--by-duration", "P1D", "--execute")
    assert committed(broker, "g1") == {("a", 0): 0, ("a", 1): 0, ("b", 0): 0}

    plan = reset("--all-groups", "--topic", "a:0", "--to-latest", "--export")
    assert plan.stdout.splitlines() == ["g1,a,0,6", "g2,a,0,6"]
    assert "dry run" in plan.stderr
    assert committed(broker, "g2") == {("a", 0): 1}
    reset("--group", "g1", "--group", "g2", "--topic", "a:0", "--to-latest", "--execute")
    assert committed(broker, "g1")[("a", 0)] == 6
    assert committed(broker, "g2") == {("a", 0): 6}


def test_delete_removes_an_inactive_group_and_its_offsets_and_refuses_a_live_one(broker: ThreadBroker) -> None:
    create_topic(broker.bootstrap, "events", 1)
    produce(broker, "events", {0: 4})
    with group_member(broker, "archive", "events") as c:
        consume(c, 4)
        c.commit(asynchronous=False)
        busy = groups(broker, "delete", "archive")
        assert busy.returncode == 1
        assert "archive: NON_EMPTY_GROUP" in busy.stderr
    wait_until(lambda: not member_ids(broker, "archive"), "the member to leave")
    assert committed(broker, "archive") == {("events", 0): 4}

    deleted = groups(broker, "delete", "archive", "ghost")
    assert deleted.returncode == 1  # ghost does not exist
    assert deleted.stdout == "deleted group archive\n"
    assert "ghost: GROUP_ID_NOT_FOUND" in deleted.stderr
    assert committed(broker, "archive") == {}
    assert groups_json(broker, "list") == []


def test_describe_shows_a_member_less_job_by_the_note_in_its_commits_alive_or_not(broker: ThreadBroker) -> None:
    """The analytics job commits without joining; `KafkaClients.commit` (its own commit path)
    puts a note in each offset's metadata, and describe shows the job from it."""
    create_topic(broker.bootstrap, "jobs.in", 2)
    clients = KafkaClients({"bootstrap.servers": broker.bootstrap}, "job-fresh")
    stale = KafkaClients({"bootstrap.servers": broker.bootstrap}, "job-stale")
    try:
        now_ms = int(time.time() * 1000)
        fresh_note = note_text("job-fresh", now_ms, 15.0, progress_at_ms=now_ms - 30_000)
        clients.commit({("jobs.in", 0): 0, ("jobs.in", 1): 0}, fresh_note)
        stale.commit({("jobs.in", 0): 0}, note_text("job-stale", now_ms - 120_000, 15.0))
    finally:
        clients.close()
        stale.close()
    fresh_text = groups(broker, "describe", "job-fresh")
    assert fresh_text.returncode == 0, fresh_text.stderr
    assert "has no active members." in fresh_text.stdout
    assert re.search(
        r"committed to by job job-fresh \(client \S+:\d+\): last commit [\d.]+ s ago, last batch 3\d(\.\d)? s "
        r"ago, at least every 15 s while running: alive\.",
        fresh_text.stdout,
    ), fresh_text.stdout
    assert "not committing (stopped?)" in groups(broker, "describe", "job-stale").stdout
    (described,) = groups_json(broker, "describe", "job-stale")
    assert described["committer"]["job"] == "job-stale"
    assert described["committer"]["alive"] is False
    assert described["committer"]["age_s"] >= 120
