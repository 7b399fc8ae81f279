"""`streamshop groups list|describe` on a share group (KIP-932) as a real child process against a
real broker, the group made by a real confluent-kafka ShareConsumer over TCP.  librdkafka's
admin client does not see share groups: they come over the Kafka protocol through aiokafka
(ListGroups v5, ShareGroupDescribe, DescribeShareGroupOffsets), or from the broker's admin API
with --admin-url."""

from __future__ import annotations

import json
import re
import subprocess
import time
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, ShareConsumer

from tests.support.configs import set_group_configs
from tests.support.harness import ThreadBroker, streamshop_cli
from tests.support.kafka_clients import confluent_produce, create_topic

TOPIC, GROUP = "cli.share", "cli-share"


def groups(broker: ThreadBroker, *args: str) -> subprocess.CompletedProcess[str]:
    return streamshop_cli("groups", "--bootstrap", broker.bootstrap, *args)


def groups_json(broker: ThreadBroker, *args: str) -> Any:
    done = groups(broker, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def hold_six(broker: ThreadBroker) -> tuple[ShareConsumer, str]:
    """A share consumer holding the six records of TOPIC, of which it accepted offsets 0, 1 and 3:
    the start offset is 2, and 2, 4 and 5 are still in flight."""
    create_topic(broker.bootstrap, TOPIC, 1)
    set_group_configs(broker.bootstrap, GROUP, {"share.auto.offset.reset": "earliest"})
    confluent_produce(broker.bootstrap, TOPIC, [{"value": b"v%d" % i} for i in range(6)])
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP, "client.id": "cli-share-1",
                              "share.acknowledgement.mode": "explicit", "max.poll.records": "10"})  # fmt: skip
    consumer.subscribe([TOPIC])
    held: list[Any] = []
    deadline = time.monotonic() + 15
    while len(held) < 6:
        assert time.monotonic() < deadline, f"only {len(held)} records acquired within 15 s"
        held.extend(m for m in consumer.poll(0.2) if m.error() is None)
    for message in held:
        if message.offset() in (0, 1, 3):
            consumer.acknowledge(message, AcknowledgeType.ACCEPT)
    consumer.commit_sync(10)
    [member_id] = broker.call(lambda: list(broker.broker.shares.groups[GROUP].members))
    return consumer, member_id


@pytest.mark.slow
def test_a_share_group_is_listed_and_described_with_start_offsets_lag_and_records_in_flight(
    broker: ThreadBroker,
) -> None:
    consumer, member_id = hold_six(broker)
    try:
        assert groups_json(broker, "list") == [
            {"group": GROUP, "state": "Stable", "type": "share", "protocol_type": "share"}
        ]
        listed = groups(broker, "list")
        assert re.search(rf"^{GROUP}\s+Stable\s+share\s+share$", listed.stdout, re.MULTILINE), listed.stdout

        member = {
            "member_id": member_id,
            "client_id": "cli-share-1",
            "host": "127.0.0.1",
            "group_instance_id": None,
            "assignment": {TOPIC: [0]},
        }
        # Over Kafka's protocol: the start offset, and the lag from it (offset 3, accepted past the
        # start, counts as not done); the records in flight are not told.
        [described] = groups_json(broker, "describe", GROUP)
        assert described == {
            "group": GROUP,
            "state": "Stable",
            "type": "share",
            "protocol_type": "share",
            "protocol": "simple",
            "member_count": 1,
            "lag": 4,
            "members": [member],
            "partitions": [
                {"topic": TOPIC, "partition": 0, "start_offset": 2, "log_end_offset": 6, "lag": 4, "in_flight": None}
            ],
            "committer": None,
        }
        # From the broker's admin API: the exact lag (2, 4 and 5 not done) and the three in flight.
        [exact] = groups_json(broker, "describe", GROUP, "--admin-url", broker.admin_url)
        assert exact == described | {
            "lag": 3,
            "partitions": [
                {"topic": TOPIC, "partition": 0, "start_offset": 2, "log_end_offset": 6, "lag": 3, "in_flight": 3}
            ],
        }

        text = groups(broker, "describe", GROUP, "--admin-url", broker.admin_url)
        assert text.returncode == 0, text.stderr
        assert re.search(rf"^Group: {GROUP}\s+type: share\s+state: Stable\s+assignor: simple", text.stdout, re.M)
        assert re.search(
            r"^TOPIC\s+PARTITION\s+START-OFFSET\s+LOG-END-OFFSET\s+LAG\s+IN-FLIGHT\s+#MEMBERS$", text.stdout, re.M
        )
        assert re.search(rf"^{TOPIC}\s+0\s+2\s+6\s+3\s+3\s+1$", text.stdout, re.MULTILINE), text.stdout
        own = re.escape(member_id)
        assert re.search(rf"^{own}\s+cli-share-1\s+127\.0\.0\.1\s+1\s+{TOPIC}:0$", text.stdout, re.MULTILINE)
        plain = groups(broker, "describe", GROUP)
        assert re.search(rf"^{TOPIC}\s+0\s+2\s+6\s+4\s+-\s+1$", plain.stdout, re.MULTILINE), plain.stdout

        # An unknown group next to the share group: reported, the share group still described.
        done = groups(broker, "describe", "nope", GROUP, "--json")
        assert done.returncode == 1
        assert "nope: group 'nope' does not exist" in done.stderr
        assert [g["group"] for g in json.loads(done.stdout)] == [GROUP]
    finally:
        consumer.close()


def test_a_share_group_without_members_is_described_with_the_state_it_keeps(broker: ThreadBroker) -> None:
    """Its member gone (what it held released), the group is Empty, its start offset stays."""
    consumer, _ = hold_six(broker)
    consumer.close()
    deadline = time.monotonic() + 15
    while broker.call(lambda: bool(broker.broker.shares.groups[GROUP].members)):
        assert time.monotonic() < deadline, "the member did not leave"
        time.sleep(0.05)
    [described] = groups_json(broker, "describe", GROUP, "--admin-url", broker.admin_url)
    assert (described["state"], described["members"], described["lag"]) == ("Empty", [], 3)
    assert (described["partitions"][0]["start_offset"], described["partitions"][0]["in_flight"]) == (2, 0)
    text = groups(broker, "describe", GROUP)
    assert f"Share group '{GROUP}' has no active members." in text.stdout
    assert re.search(rf"^{TOPIC}\s+0\s+2\s+6\s+4\s+-\s+0$", text.stdout, re.MULTILINE), text.stdout
