"""cleanup.policy as Kafka 4.2 has it: an empty list (the last value removed by an
IncrementalAlterConfigs SUBTRACT, or set empty) is valid and means neither deletion nor
compaction: every segment is kept."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from kio.schema.errors import ErrorCode

from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import batch, connect


def _alter(admin: AdminClient, topic: str, *entries: ConfigEntry) -> None:
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=list(entries))
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=15)


def _policy(admin: AdminClient, topic: str) -> str:
    (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    return str(future.result(timeout=15)["cleanup.policy"].value)


def test_subtracting_the_last_cleanup_policy_keeps_every_segment(broker: ThreadBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with connect(broker.bootstrap) as c:
        assert c.create_topic("kept", 1, {"retention.ms": "1000", "segment.bytes": "1000"}).error_code == 0
        for i in range(20):  # records from long ago: past retention.ms at once
            assert c.produce("kept", 0, batch([b"x" * 200], timestamp=1_000 + i)).error_code == ErrorCode.none
    _alter(admin, "kept", ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT))
    assert _policy(admin, "kept") == ""
    assert broker.call(broker.broker.run_retention) == 0
    with connect(broker.bootstrap) as c:
        assert len(c.read_all("kept", 0)) == 20

    _alter(admin, "kept", ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND))
    assert _policy(admin, "kept") == "delete"
    assert broker.call(broker.broker.run_retention) > 0
    broker.restart()  # the empty value survives in the metadata log like any other
    _alter(admin, "kept", ConfigEntry("cleanup.policy", "", incremental_operation=AlterConfigOpType.SET))
    broker.restart()
    assert _policy(AdminClient({"bootstrap.servers": broker.bootstrap}), "kept") == ""
