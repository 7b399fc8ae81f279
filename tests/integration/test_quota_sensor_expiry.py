"""Quota measurements of client ids that went quiet expire after an hour, over real connections
and on the broker's clock (moved by the test, never slept): what 1,000 client ids left behind is
gone once an hour has passed and another client is measured."""

from __future__ import annotations

from collections.abc import Callable

from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest, EntityData, EntryData, OpData
from kio.schema.metadata.v12.request import MetadataRequest
from kio.static.primitive import f64

from broker.clock import ManualClock
from broker.protocol.errors import ErrorCode
from broker.quotas import SENSOR_EXPIRATION_S
from tests.support.harness import ThreadBroker
from tests.support.kafka_wire import connect

_METADATA = MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def _sensors(broker: ThreadBroker) -> float:
    value = broker.broker.metrics.registry.get_sample_value("streamshop_quota_sensors")
    assert isinstance(value, float)
    return value


def test_the_measurements_of_quiet_client_ids_expire_after_an_hour(broker_factory: Callable[..., ThreadBroker]) -> None:
    clock = ManualClock()
    broker = broker_factory(clock=clock)
    with connect(broker.bootstrap) as conn:
        entry = EntryData(
            entity=(EntityData(entity_type="client-id", entity_name=None),),
            ops=(OpData(key="request_percentage", value=f64(10_000.0), remove=False),),
        )
        (result,) = conn.request(AlterClientQuotasRequest(entries=(entry,), validate_only=False)).entries
        assert result.error_code == ErrorCode.none
        before = _sensors(broker)  # this connection's own client id, measured since the quota was set
        for n in range(1000):
            conn.send(_METADATA, client_id=f"quiet-{n}")
            conn.recv_frame()
        assert _sensors(broker) == before + 1000
        clock.advance(int(SENSOR_EXPIRATION_S * 1000) - 1)
        conn.send(_METADATA, client_id="late")
        conn.recv_frame()
        assert _sensors(broker) == before + 1001  # not an hour yet
        clock.advance(2)
        conn.send(_METADATA, client_id="later")
        conn.recv_frame()
    assert _sensors(broker) == 2  # late's and later's
