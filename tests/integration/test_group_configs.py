"""Group configs (the GROUP config resource, 32) as Kafka 4.1 has them: Kafka's own kafka-configs
sets, describes and deletes a group's share.auto.offset.reset and share.record.lock.duration.ms,
is refused out-of-range and unknown configs in Kafka's words, and finds them again after a
restart; the APIs' edges over the wire (validate_only, APPEND, the legacy AlterConfigs, the
empty name); a consumer-protocol member told its group's heartbeat interval; ALTER_CONFIGS
on the group needed to change them; and a record that does not decode skipped at start."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType
from confluent_kafka.admin import ResourceType as AclResourceType
from kio.schema.alter_configs.v2.request import AlterableConfig as SetConfig
from kio.schema.alter_configs.v2.request import AlterConfigsRequest
from kio.schema.alter_configs.v2.request import AlterConfigsResource as SetResource
from kio.schema.consumer_group_heartbeat.v0.request import ConsumerGroupHeartbeatRequest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.list_config_resources.v0.request import ListConfigResourcesRequest as ListConfigResourcesV0
from kio.schema.list_config_resources.v1.request import ListConfigResourcesRequest as ListConfigResourcesV1
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i8, i32

from broker.metadata import METADATA_TOPIC
from broker.protocol.errors import ErrorCode
from streamshop.pki import LocalCA
from tests.integration.test_security_clients import add_user, grant
from tests.support import kafka_tools as kt
from tests.support.harness import ThreadBroker
from tests.support.kafka_clients import create_topic
from tests.support.kafka_wire import KafkaConnection, connect, ms
from tests.support.secure import SecureBroker, make_admin_user, secure_settings

pytestmark = [pytest.mark.kafka, pytest.mark.xdist_group("kafka-tools")]

GROUP = i8(32)
SET, DELETE, APPEND = 0, 1, 2


def _target(bootstrap: str, group: str) -> tuple[str, ...]:
    return ("--bootstrap-server", bootstrap, "--entity-type", "groups", "--entity-name", group)


def _described(bootstrap: str, group: str, *options: str) -> dict[str, str]:
    """kafka-configs --describe --all: each config's line after its name."""
    out = kt.run("kafka-configs", *_target(bootstrap, group), "--describe", "--all", *options)
    assert out.splitlines()[0] == f"All configs for group {group} are:"
    return dict(line.strip().split("=", 1) for line in out.splitlines()[1:] if line.strip())


def test_kafka_configs_sets_describes_refuses_and_deletes_a_groups_configs(broker: ThreadBroker) -> None:
    target = _target(broker.bootstrap, "shares")
    changes = "share.auto.offset.reset=earliest,share.record.lock.duration.ms=45000"
    assert "Completed updating config for group shares." in kt.run(
        "kafka-configs", *target, "--alter", "--add-config", changes
    )
    described = _described(broker.bootstrap, "shares")
    assert described["share.auto.offset.reset"] == (
        "earliest sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:share.auto.offset.reset=earliest}"
    )
    assert described["share.record.lock.duration.ms"] == (
        "45000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:share.record.lock.duration.ms=45000}"
    )
    # Every other config of Kafka 4.1's GroupConfig, at the value the group runs with.
    assert described["consumer.heartbeat.interval.ms"] == (
        "250 sensitive=false synonyms={DEFAULT_CONFIG:consumer.heartbeat.interval.ms=250}"
    )
    assert described["share.isolation.level"] == (
        "read_uncommitted sensitive=false synonyms={DEFAULT_CONFIG:share.isolation.level=read_uncommitted}"
    )
    assert len(described) == 10

    # Refused with Kafka's words, all or nothing: the valid change beside it is not applied.
    too_long = kt.fails(
        "kafka-configs", *target, "--alter", "--add-config", "share.isolation.level=read_committed,"
        "share.record.lock.duration.ms=70000",
    )  # fmt: skip
    assert (
        "InvalidConfigurationException: share.record.lock.duration.ms must be less than or equal to "
        "group.share.max.record.lock.duration.ms"
    ) in too_long
    unknown = kt.fails("kafka-configs", *target, "--alter", "--add-config", "share.delivery.count.limit=3")
    assert "InvalidConfigurationException: Unknown group config name: share.delivery.count.limit" in unknown
    strategy = kt.fails("kafka-configs", *target, "--alter", "--add-config", "share.auto.offset.reset=oldest")
    assert "The value must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'." in strategy
    assert _described(broker.bootstrap, "shares") == described

    # They survive a restart, read back from the metadata log.
    broker.restart()
    assert _described(broker.bootstrap, "shares") == described
    assert broker.call(lambda: broker.broker.store.group_configs) == {
        "shares": {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "45000"}
    }

    # Deleting one goes back to the broker's setting.
    kt.run("kafka-configs", *target, "--alter", "--delete-config", "share.record.lock.duration.ms")
    after = _described(broker.bootstrap, "shares")
    assert after["share.record.lock.duration.ms"] == (
        "30000 sensitive=false synonyms={DEFAULT_CONFIG:share.record.lock.duration.ms=30000}"
    )
    assert after["share.auto.offset.reset"] == described["share.auto.offset.reset"]


def _alter(client: KafkaConnection, group: str, *ops: tuple[str, int, str | None], validate_only: bool = False) -> Any:
    response = client.request(
        IncrementalAlterConfigsRequest(
            resources=(
                AlterConfigsResource(
                    resource_type=GROUP,
                    resource_name=group,
                    configs=tuple(AlterableConfig(name=n, config_operation=i8(op), value=v) for n, op, v in ops),
                ),
            ),
            validate_only=validate_only,
        )
    )
    return response.responses[0]


def _overrides(client: KafkaConnection, group: str) -> dict[str, str | None]:
    response = client.request(
        DescribeConfigsRequest(
            resources=(DescribeConfigsResource(resource_type=GROUP, resource_name=group, configuration_keys=None),),
            include_synonyms=False,
            include_documentation=True,
        )
    )
    result = response.results[0]
    assert result.error_code == ErrorCode.none, result
    assert all(c.documentation and not c.read_only for c in result.configs)
    return {c.name: c.value for c in result.configs if c.config_source == 8}  # GROUP_CONFIG


def test_kafka_configs_describes_the_groups_that_have_configs(broker: ThreadBroker) -> None:
    """Without --all or a name, kafka-configs asks ListConfigResources (Kafka 4.1) which groups
    have configs, then describes each one's overrides."""
    kt.run(
        "kafka-configs",
        *_target(broker.bootstrap, "listed-a"),
        "--alter",
        "--add-config",
        "share.isolation.level=read_committed",
    )
    kt.run(
        "kafka-configs",
        *_target(broker.bootstrap, "listed-b"),
        "--alter",
        "--add-config",
        "consumer.session.timeout.ms=50000",
    )
    out = kt.run("kafka-configs", "--bootstrap-server", broker.bootstrap, "--entity-type", "groups", "--describe")
    assert "Dynamic configs for group listed-a are:" in out
    assert "  share.isolation.level=read_committed sensitive=false" in out
    assert "Dynamic configs for group listed-b are:" in out
    assert "  consumer.session.timeout.ms=50000 sensitive=false" in out
    one = kt.run("kafka-configs", *_target(broker.bootstrap, "listed-a"), "--describe")
    assert one.splitlines()[0] == "Dynamic configs for group listed-a are:"


def test_list_config_resources_over_the_wire(broker: ThreadBroker) -> None:
    """v1 lists the types asked for (every type when none is), v0 client-metrics resources only
    (none here), and an unknown type is UNSUPPORTED_VERSION, as Kafka 4.1 answers."""
    create_topic(broker.bootstrap, "listed.topic", 1)
    with connect(broker.bootstrap) as client:
        _alter(client, "listed-wire", ("share.auto.offset.reset", SET, "earliest"))
        every = client.request(ListConfigResourcesV1(resource_types=()))
        found = {(r.resource_name, int(r.resource_type)) for r in every.config_resources}
        assert {("listed-wire", 32), ("1", 4), ("1", 8), ("listed.topic", 2)} <= found
        groups = client.request(ListConfigResourcesV1(resource_types=(GROUP,)))
        assert [(r.resource_name, r.resource_type) for r in groups.config_resources] == [("listed-wire", 32)]
        assert client.request(ListConfigResourcesV0()).config_resources == ()
        unknown = client.request(ListConfigResourcesV1(resource_types=(i8(64),)))
        assert (unknown.error_code, unknown.config_resources) == (ErrorCode.unsupported_version, ())


def test_the_apis_edges_over_the_wire(broker: ThreadBroker) -> None:
    with connect(broker.bootstrap) as client:
        checked = _alter(client, "edges", ("share.record.lock.duration.ms", SET, "20000"), validate_only=True)
        assert checked.error_code == ErrorCode.none
        assert _overrides(client, "edges") == {}

        appended = _alter(client, "edges", ("share.isolation.level", APPEND, "read_committed"))
        assert appended.error_code == ErrorCode.invalid_config
        assert appended.error_message == ("Can't APPEND to key share.isolation.level because its type is not LIST.")
        duplicated = _alter(
            client, "edges", ("share.isolation.level", SET, "x"), ("share.isolation.level", DELETE, None)
        )
        assert duplicated.error_code == ErrorCode.invalid_request
        assert _alter(client, "edges", ("share.isolation.level", SET, "read_committed")).error_code == ErrorCode.none
        assert _alter(client, "edges", ("not.a.config", DELETE, None)).error_code == ErrorCode.none
        assert _overrides(client, "edges") == {"share.isolation.level": "read_committed"}

        # The legacy AlterConfigs replaces the group's whole set, as Kafka's controller does.
        replaced = client.request(
            AlterConfigsRequest(
                resources=(
                    SetResource(
                        resource_type=GROUP,
                        resource_name="edges",
                        configs=(SetConfig(name="share.auto.offset.reset", value="by_duration:PT1H"),),
                    ),
                ),
                validate_only=False,
            )
        )
        assert replaced.responses[0].error_code == ErrorCode.none
        assert _overrides(client, "edges") == {"share.auto.offset.reset": "by_duration:PT1H"}

        empty = _alter(client, "", ("share.isolation.level", SET, "read_committed"))
        assert (empty.error_code, empty.error_message) == (
            ErrorCode.invalid_request,
            "Default group resources are not allowed.",
        )
        described = client.request(
            DescribeConfigsRequest(
                resources=(DescribeConfigsResource(resource_type=GROUP, resource_name="", configuration_keys=None),),
                include_synonyms=False,
                include_documentation=False,
            )
        )
        assert described.results[0].error_code == ErrorCode.invalid_request
        assert described.results[0].error_message == "Group name must not be empty"


def test_a_consumer_protocol_member_is_told_its_groups_heartbeat_interval(broker: ThreadBroker) -> None:
    with connect(broker.bootstrap) as client:
        assert _alter(client, "tuned", ("consumer.heartbeat.interval.ms", SET, "1000")).error_code == ErrorCode.none

        def join(group: str) -> datetime.timedelta:
            response = client.request(
                ConsumerGroupHeartbeatRequest(
                    group_id=GroupId(group),
                    member_id="",
                    member_epoch=i32(0),
                    rebalance_timeout=ms(60_000),
                    subscribed_topic_names=(TopicName("t"),),
                    topic_partitions=(),
                )
            )
            assert response.error_code == ErrorCode.none, response
            interval: datetime.timedelta = response.heartbeat_interval
            return interval

        assert join("tuned") == datetime.timedelta(milliseconds=1000)
        assert join("plain") == datetime.timedelta(milliseconds=250)  # the broker's setting


def test_changing_a_groups_configs_needs_alter_configs_on_the_group(
    tmp_path: Path, broker_factory: Callable[..., ThreadBroker]
) -> None:
    ca = LocalCA(tmp_path / "pki")
    server = ca.issue("broker", hosts=("127.0.0.1",))
    make_admin_user(tmp_path / "broker")
    secure = SecureBroker(broker_factory(settings=secure_settings(ca, server), name="broker"), ca, tmp_path)
    admin = AdminClient(secure.admin())
    add_user(admin, "carol", "carol-pw")
    carol = secure.java_properties("carol", "SASL_SSL", "carol", "carol-pw", "SCRAM-SHA-512")
    target = (*_target(secure.address("SASL_SSL"), "acl.g"), "--command-config", str(carol))

    denied = kt.fails("kafka-configs", *target, "--alter", "--add-config", "share.auto.offset.reset=earliest")
    assert "GroupAuthorizationException" in denied
    assert secure.broker.call(lambda: secure.broker.broker.store.group_configs) == {}

    grant(
        admin,
        AclBinding(
            AclResourceType.GROUP,
            "acl.g",
            ResourcePatternType.LITERAL,
            "User:carol",
            "*",
            AclOperation.ALTER_CONFIGS,
            AclPermissionType.ALLOW,
        ),
    )
    kt.run("kafka-configs", *target, "--alter", "--add-config", "share.auto.offset.reset=earliest")
    described = kt.run("kafka-configs", *target, "--describe", "--all")  # ALTER_CONFIGS implies DESCRIBE_CONFIGS
    assert "share.auto.offset.reset=earliest" in described
    other = (*_target(secure.address("SASL_SSL"), "acl.other"), "--command-config", str(carol))
    assert "GroupAuthorizationException" in kt.fails("kafka-configs", *other, "--describe", "--all")


def test_a_group_config_record_that_does_not_decode_is_skipped_at_start(tmp_path: Path) -> None:
    broker = ThreadBroker(tmp_path / "b").start()
    try:
        with connect(broker.bootstrap) as client:
            assert _alter(client, "kept", ("share.auto.offset.reset", SET, "earliest")).error_code == ErrorCode.none
        meta = broker.broker.store
        broker.call(
            lambda: meta.write_records(
                [
                    (["group_config", "unknown"], {"share.delivery.count.limit": "3"}),
                    (["group_config", "not-a-number"], {"share.record.lock.duration.ms": "soon"}),
                    (["group_config", "not-a-map"], "share.auto.offset.reset=earliest"),
                    (["group_config"], {"share.auto.offset.reset": "earliest"}),
                ]
            )
        )
        broker.restart()
        assert broker.broker.store.skipped.counts[METADATA_TOPIC] == 4
        with connect(broker.bootstrap) as client:
            assert _overrides(client, "kept") == {"share.auto.offset.reset": "earliest"}
            assert _overrides(client, "unknown") == {}
    finally:
        broker.close()
