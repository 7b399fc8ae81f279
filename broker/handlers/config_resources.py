"""ListConfigResources (Kafka 4.1, KIP-1142): the resources that have configs, by type, as
`kafka-configs --describe` without a name asks for them.  v0 (ListClientMetricsResources before
it) lists client-metrics resources only; v1 lists the types asked for, every type when none is.

As Kafka: it needs DESCRIBE_CONFIGS on the cluster; groups are those with configs of their own,
brokers (and their loggers) by node id, topics all of them; this broker has no client-metrics
resources.  A type it does not know is UNSUPPORTED_VERSION."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from broker.handlers.base import Messages, RequestContext
from broker.handlers.services import HasNodeId, HasSecurity, HasStore
from broker.protocol.codec import build, nested
from broker.protocol.errors import ErrorCode
from broker.security.acls import Operation

if TYPE_CHECKING:
    from kio.schema.list_config_resources import v1 as list_config_resources_v1
    from typing_extensions import TypeIs

    from broker.handlers.kio_types_share import ListConfigResourcesRequest, ListConfigResourcesResponse

MESSAGES: Messages[ListConfigResourcesRequest, ListConfigResourcesResponse] = Messages(74, 0, 1)
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
SUPPORTED_V1 = (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)


class ConfigResourcesBroker(HasSecurity, HasStore, HasNodeId, Protocol):
    """What ListConfigResources uses of the broker."""


def _typed(request: ListConfigResourcesRequest) -> TypeIs[list_config_resources_v1.ListConfigResourcesRequest]:
    return request.__version__ >= 1


def handle(
    broker: ConfigResourcesBroker, ctx: RequestContext, request: ListConfigResourcesRequest
) -> ListConfigResourcesResponse:
    cls = MESSAGES.response(ctx.api_version)
    entry = nested(cls, "ConfigResource")
    if not broker.security.cluster(ctx.session, Operation.DESCRIBE_CONFIGS):
        return build(cls, throttle_time=0, error_code=ErrorCode.cluster_authorization_failed, config_resources=())
    supported = SUPPORTED_V1 if _typed(request) else (CLIENT_METRICS,)
    asked = tuple(int(t) for t in request.resource_types) if _typed(request) else ()
    types = asked or supported
    if any(t not in supported for t in types):
        return build(cls, throttle_time=0, error_code=ErrorCode.unsupported_version, config_resources=())
    found: list[tuple[str, int]] = []
    if GROUP in types:
        found += [(group_id, GROUP) for group_id in sorted(broker.store.group_configs)]
    if BROKER_LOGGER in types:
        found.append((str(broker.node_id), BROKER_LOGGER))
    if BROKER in types:
        found.append((str(broker.node_id), BROKER))
    if TOPIC in types:
        found += [(name, TOPIC) for name in sorted(broker.store.topics)]
    return build(
        cls,
        throttle_time=0,
        error_code=ErrorCode.none,
        config_resources=tuple(build(entry, resource_name=name, resource_type=kind) for name, kind in found),
    )
