"""DescribeCluster and InitProducerId."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from broker.handlers import transactions
from broker.handlers.base import NOT_REQUESTED_OPERATIONS, Answer, Messages, RequestContext
from broker.handlers.services import (
    AppendNotices,
    Endpoint,
    HasGroupCoordinator,
    HasNodeId,
    HasSecurity,
    HasStore,
    HasTransactions,
    LogDurability,
)
from broker.handlers.transactions import INIT_PRODUCER_ID, TransactionsBroker
from broker.producer_ids import ProducerIdAllocator
from broker.protocol.codec import build, nested
from broker.protocol.errors import ErrorCode
from broker.security.acls import CLUSTER_NAME, Operation, ResourceType

if TYPE_CHECKING:
    from kio.schema.describe_cluster import v1 as describe_cluster_v1
    from typing_extensions import TypeIs

    from broker.handlers.kio_types import DescribeClusterRequest, DescribeClusterResponse
    from broker.handlers.kio_types_txn import InitProducerIdRequest, InitProducerIdResponse

DESCRIBE_CLUSTER: Messages[DescribeClusterRequest, DescribeClusterResponse] = Messages(60, 0, 2)
BROKERS_ENDPOINT = 1


class ClusterBroker(
    TransactionsBroker,
    HasSecurity,
    HasStore,
    HasNodeId,
    HasGroupCoordinator,
    HasTransactions,
    LogDurability,
    AppendNotices,
    Endpoint,
    Protocol,
):
    """What DescribeCluster and InitProducerId use of the broker (a transactional id's through
    the transaction handlers)."""

    @property
    def cluster_id(self) -> str: ...

    @property
    def producer_ids(self) -> ProducerIdAllocator: ...


def _with_endpoint_type(request: DescribeClusterRequest) -> TypeIs[describe_cluster_v1.DescribeClusterRequest]:
    return request.__version__ >= 1  # KIP-919: controllers answer it too


def describe_cluster(
    broker: ClusterBroker, ctx: RequestContext, request: DescribeClusterRequest
) -> DescribeClusterResponse:
    cls = DESCRIBE_CLUSTER.response(ctx.api_version)
    broker_cls = nested(cls, "DescribeClusterBroker")
    endpoint_type = request.endpoint_type if _with_endpoint_type(request) else BROKERS_ENDPOINT
    host, port = broker.endpoint(ctx.listener)
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
        # v2 (KIP-1073) may ask for fenced brokers too and flags each; this one answers, so it
        # is never fenced.
        brokers=(build(broker_cls, broker_id=broker.node_id, host=host, port=port, rack=None, is_fenced=False),),
        cluster_authorized_operations=broker.security.operations(ctx.session, ResourceType.CLUSTER, CLUSTER_NAME)
        if request.include_cluster_authorized_operations
        else NOT_REQUESTED_OPERATIONS,
    )


def init_producer_id(
    broker: ClusterBroker, ctx: RequestContext, request: InitProducerIdRequest
) -> Answer[InitProducerIdResponse]:
    cls = INIT_PRODUCER_ID.response(ctx.api_version)
    if request.transactional_id is not None:
        return transactions.init_transactional(broker, ctx, request)
    # As Kafka (KIP-679): IDEMPOTENT_WRITE on the cluster, or WRITE on at least one topic.
    security, session = broker.security, ctx.session
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
