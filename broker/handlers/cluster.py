"""DescribeCluster and InitProducerId."""

from __future__ import annotations

from typing import Any

from broker.core import Broker
from broker.handlers import transactions
from broker.handlers.base import NOT_REQUESTED_OPERATIONS
from broker.protocol.codec import RequestHeader, build, nested, response_type
from broker.protocol.errors import ErrorCode
from broker.security.acls import CLUSTER_NAME, Operation, ResourceType

DESCRIBE_CLUSTER, INIT_PRODUCER_ID = 60, 22
BROKERS_ENDPOINT = 1


def describe_cluster(broker: Broker, header: RequestHeader, request: Any) -> Any:
    cls = response_type(DESCRIBE_CLUSTER, header.api_version)
    broker_cls = nested(cls, "DescribeClusterBroker")
    endpoint_type = getattr(request, "endpoint_type", BROKERS_ENDPOINT)
    host, port = broker.endpoint(header)
    if endpoint_type != BROKERS_ENDPOINT:
        return build(
            cls,
            throttle_time=0,
            error_code=ErrorCode.unsupported_endpoint_type,
            error_message="a broker describes brokers only",
            endpoint_type=endpoint_type,
            cluster_id=broker.cluster_id,
            controller_id=-1,
            brokers=(),
            cluster_authorized_operations=NOT_REQUESTED_OPERATIONS,
        )
    return build(
        cls,
        throttle_time=0,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=endpoint_type,
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        brokers=(build(broker_cls, broker_id=broker.node_id, host=host, port=port, rack=None),),
        cluster_authorized_operations=broker.security.operations(header.session, ResourceType.CLUSTER, CLUSTER_NAME)
        if request.include_cluster_authorized_operations
        else NOT_REQUESTED_OPERATIONS,
    )


def init_producer_id(broker: Broker, header: RequestHeader, request: Any) -> Any:
    cls = response_type(INIT_PRODUCER_ID, header.api_version)
    if request.transactional_id is not None:
        return transactions.init_transactional(broker, header, request)
    # As Kafka (KIP-679): IDEMPOTENT_WRITE on the cluster, or WRITE on at least one topic.
    security, session = broker.security, header.session
    if not (
        security.cluster(session, Operation.IDEMPOTENT_WRITE)
        or security.allowed_any(session, Operation.WRITE, ResourceType.TOPIC)
    ):
        return build(
            cls, throttle_time=0, error_code=ErrorCode.cluster_authorization_failed, producer_id=-1, producer_epoch=-1
        )
    # Idempotent (non-transactional) producers get a fresh id every time, as in Kafka.
    return build(
        cls, throttle_time=0, error_code=ErrorCode.none, producer_id=broker.producer_ids.allocate(), producer_epoch=0
    )
