"""DescribeConfigs, IncrementalAlterConfigs and AlterConfigs for topics (and describe for the broker)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from kio.static.protocol import Entity

from broker.config import BROKER_SETTINGS, TOPIC_CONFIGS, validate_topic_configs
from broker.core import Broker
from broker.handlers.base import Answer, Messages, RequestContext
from broker.protocol.codec import build, nested
from broker.protocol.errors import ErrorCode, KafkaError
from broker.security.acls import Operation
from kit.settings import ConfigError

if TYPE_CHECKING:
    from kio.schema.describe_configs import v3 as describe_configs_v3
    from kio.schema.describe_configs import v4 as describe_configs_v4
    from typing_extensions import TypeIs

    from broker.handlers.kio_types import (
        AlterConfigsRequest,
        AlterConfigsResponse,
        DescribeConfigsRequest,
        DescribeConfigsResponse,
        IncrementalAlterConfigsRequest,
        IncrementalAlterConfigsResponse,
    )

DESCRIBE_CONFIGS: Messages[DescribeConfigsRequest, DescribeConfigsResponse] = Messages(32, 1, 4)
ALTER_CONFIGS: Messages[AlterConfigsRequest, AlterConfigsResponse] = Messages(33, 0, 2)
INCREMENTAL_ALTER_CONFIGS: Messages[IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse] = Messages(
    44, 0, 1
)
TOPIC, BROKER = 2, 4
# ConfigSource values of DescribeConfigs v1+.
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_LIST_CONFIGS = {"cleanup.policy", "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"}
_TYPES = {
    "cleanup.policy": 7,
    "leader.replication.throttled.replicas": 7,
    "follower.replication.throttled.replicas": 7,
    "message.timestamp.type": 2,
    "compression.type": 2,
    "min.cleanable.dirty.ratio": 6,
    "segment.bytes": 3,
    "index.interval.bytes": 3,
    "max.message.bytes": 3,
    "min.insync.replicas": 3,
}


class _Resource(Protocol):
    """A config resource named in any of the three APIs."""

    @property
    def resource_type(self) -> int: ...

    @property
    def resource_name(self) -> str: ...


class _Change(Protocol):
    """One IncrementalAlterConfigs change."""

    @property
    def name(self) -> str: ...

    @property
    def config_operation(self) -> int: ...

    @property
    def value(self) -> str | None: ...


class _Setting(Protocol):
    """One AlterConfigs value."""

    @property
    def name(self) -> str: ...

    @property
    def value(self) -> str | None: ...


class _Changes(_Resource, Protocol):
    """An IncrementalAlterConfigs resource."""

    @property
    def configs(self) -> Sequence[_Change]: ...


class _Settings(_Resource, Protocol):
    """An AlterConfigs resource."""

    @property
    def configs(self) -> Sequence[_Setting]: ...


def _with_documentation(
    request: DescribeConfigsRequest,
) -> TypeIs[describe_configs_v3.DescribeConfigsRequest | describe_configs_v4.DescribeConfigsRequest]:
    return request.__version__ >= 3  # KIP-569


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int
    synonyms: list[tuple[str, str | None, int]]
    doc: str
    config_type: int
    sensitive: bool = False


def topic_config_entries(broker: Broker, values: dict[str, str], overrides: set[str]) -> list[ConfigEntry]:
    entries = []
    for name, definition in TOPIC_CONFIGS.items():
        synonyms: list[tuple[str, str | None, int]] = []
        if name in overrides:
            synonyms.append((name, values[name], DYNAMIC_TOPIC_CONFIG))
        if definition.broker_name in broker.config.settings:
            synonyms.append(
                (definition.broker_name, broker.config.settings[definition.broker_name], STATIC_BROKER_CONFIG)
            )
        synonyms.append((definition.broker_name, definition.default, DEFAULT_CONFIG))
        entries.append(ConfigEntry(name, values[name], synonyms[0][2], synonyms, definition.doc, _TYPES.get(name, 5)))
    return entries


_PASSWORD = 9  # DescribeConfigs' config_type of a password


def _broker_entries(broker: Broker) -> list[ConfigEntry]:
    entries = []
    for name, setting in BROKER_SETTINGS.items():
        value = broker.config.settings.get(name, setting.default)
        if name == "cluster.id":
            value = broker.cluster_id
        source = STATIC_BROKER_CONFIG if name in broker.config.settings else DEFAULT_CONFIG
        if setting.sensitive:  # as Kafka: a password's value is never sent, set or not
            entries.append(ConfigEntry(name, None, source, [(name, None, source)], "", _PASSWORD, sensitive=True))
            continue
        entries.append(ConfigEntry(name, value, source, [(name, value, source)], "", 2))
    for definition in TOPIC_CONFIGS.values():
        name = definition.broker_name
        value = broker.config.settings.get(name, definition.default)
        source = STATIC_BROKER_CONFIG if name in broker.config.settings else DEFAULT_CONFIG
        entries.append(ConfigEntry(name, value, source, [(name, value, source)], definition.doc, 5))
    return entries


def describe_configs(broker: Broker, ctx: RequestContext, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    cls = DESCRIBE_CONFIGS.response(ctx.api_version)
    result_cls = nested(cls, "DescribeConfigsResult")
    entry_cls = nested(cls, "DescribeConfigsResourceResult")
    synonym_cls = nested(cls, "DescribeConfigsSynonym")
    with_synonyms = request.include_synonyms
    with_docs = _with_documentation(request) and request.include_documentation
    results = []
    for resource in request.resources:
        entries: list[ConfigEntry] = []
        error, message = ErrorCode.none, None
        try:
            _authorize(broker, ctx, resource, Operation.DESCRIBE_CONFIGS)
            if resource.resource_type == TOPIC:
                topic = broker.store.get(resource.resource_name)
                if topic is None:
                    raise KafkaError(
                        ErrorCode.unknown_topic_or_partition, f"topic {resource.resource_name!r} does not exist"
                    )
                values = {**broker.config.topic_defaults(), **topic.configs}
                entries = topic_config_entries(broker, values, set(topic.configs))
            elif resource.resource_type == BROKER:
                if resource.resource_name not in ("", str(broker.node_id)):
                    raise KafkaError(ErrorCode.invalid_request, f"unknown broker {resource.resource_name!r}")
                entries = _broker_entries(broker)
            else:
                raise KafkaError(ErrorCode.invalid_request, f"resource type {resource.resource_type} is not supported")
        except KafkaError as e:
            error, message = e.code, e.message
        keys = resource.configuration_keys
        if keys is not None:
            entries = [e for e in entries if e.name in keys]
        results.append(
            build(
                result_cls,
                error_code=error,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=tuple(
                    build(
                        entry_cls,
                        name=e.name,
                        value=e.value,
                        read_only=resource.resource_type == BROKER,
                        config_source=e.source,
                        is_default=e.source == DEFAULT_CONFIG,
                        is_sensitive=e.sensitive,
                        synonyms=tuple(build(synonym_cls, name=n, value=v, source=s) for n, v, s in e.synonyms)
                        if with_synonyms
                        else (),
                        config_type=e.config_type,
                        documentation=e.doc if with_docs else None,
                    )
                    for e in entries
                ),
            )
        )
    return build(cls, throttle_time=0, results=tuple(results))


def _apply(current: dict[str, str], resource: _Changes) -> dict[str, str]:
    """IncrementalAlterConfigs: each change applied to the topic's current configs."""
    ops = resource.configs
    out = dict(current)
    seen = set()
    for op in ops:
        if op.name in seen:
            raise KafkaError(ErrorCode.invalid_request, f"config {op.name!r} appears more than once")
        seen.add(op.name)
        if op.name not in TOPIC_CONFIGS:
            raise KafkaError(ErrorCode.invalid_config, f"unknown topic config {op.name!r}")
        if op.config_operation == SET:
            if op.value is None:
                raise KafkaError(ErrorCode.invalid_config, f"{op.name}: a value is required")
            out[op.name] = op.value
        elif op.config_operation == DELETE:
            out.pop(op.name, None)
        elif op.config_operation in (APPEND, SUBTRACT):
            if op.name not in _LIST_CONFIGS:
                raise KafkaError(ErrorCode.invalid_config, f"{op.name} is not a list; APPEND/SUBTRACT do not apply")
            items = [v for v in out.get(op.name, TOPIC_CONFIGS[op.name].default).split(",") if v]
            change = [v for v in (op.value or "").split(",") if v]
            if op.config_operation == APPEND:
                items += [v for v in change if v not in items]
            else:
                items = [v for v in items if v not in change]
            out[op.name] = ",".join(items)
        else:
            raise KafkaError(ErrorCode.invalid_request, f"unknown config operation {op.config_operation}")
    return out


def _changed_topic(
    broker: Broker, resource: _Res, change: Callable[[dict[str, str], _Res], dict[str, str]], *, validate_only: bool
) -> bool:
    """Apply `change` to the topic's configs (unless `validate_only`); whether it changed them."""
    topic = broker.store.get(resource.resource_name)
    if topic is None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {resource.resource_name!r} does not exist")
    new = change(topic.configs, resource)
    try:
        validate_topic_configs(new)
    except ConfigError as e:
        raise KafkaError(ErrorCode.invalid_config, str(e)) from None
    if validate_only:
        return False
    broker.store.set_configs(topic.name, new)
    return True


def _deletes_only(resource: _Resource) -> bool:
    ops = getattr(resource, "configs", ())
    return all(getattr(op, "config_operation", None) == DELETE for op in ops)


def _replace(_: dict[str, str], resource: _Settings) -> dict[str, str]:
    """AlterConfigs (the legacy API): the request's set is the topic's whole new set."""
    ops = resource.configs
    out: dict[str, str] = {}
    for op in ops:
        if op.name in out:
            raise KafkaError(ErrorCode.invalid_request, f"config {op.name!r} appears more than once")
        if op.name not in TOPIC_CONFIGS:
            raise KafkaError(ErrorCode.invalid_config, f"unknown topic config {op.name!r}")
        if op.value is None:
            raise KafkaError(ErrorCode.invalid_config, f"{op.name}: a value is required")
        out[op.name] = op.value
    return out


def _authorize(broker: Broker, ctx: RequestContext, resource: _Resource, op: Operation) -> None:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, or on the cluster for the broker."""
    security = broker.security
    if resource.resource_type == TOPIC:
        if not security.topic(ctx.session, op, resource.resource_name):
            raise KafkaError(
                ErrorCode.topic_authorization_failed, f"{op.name} on topic {resource.resource_name} denied"
            )
    elif resource.resource_type == BROKER and not security.cluster(ctx.session, op):
        raise KafkaError(ErrorCode.cluster_authorization_failed, f"{op.name} on the cluster denied")


def incremental_alter_configs(
    broker: Broker, ctx: RequestContext, request: IncrementalAlterConfigsRequest
) -> Answer[IncrementalAlterConfigsResponse]:
    cls = INCREMENTAL_ALTER_CONFIGS.response(ctx.api_version)
    resources: Sequence[_Changes] = request.resources
    return _alter(broker, ctx, cls, resources, validate_only=request.validate_only, change=_apply)


def alter_configs(broker: Broker, ctx: RequestContext, request: AlterConfigsRequest) -> Answer[AlterConfigsResponse]:
    cls = ALTER_CONFIGS.response(ctx.api_version)
    resources: Sequence[_Settings] = request.resources
    return _alter(broker, ctx, cls, resources, validate_only=request.validate_only, change=_replace)


_R = TypeVar("_R", bound=Entity)
_Res = TypeVar("_Res", bound=_Resource)


def _alter(
    broker: Broker,
    ctx: RequestContext,
    cls: type[_R],
    resources: Sequence[_Res],
    *,
    validate_only: bool,
    change: Callable[[dict[str, str], _Res], dict[str, str]],
) -> Answer[_R]:
    """AlterConfigs and IncrementalAlterConfigs: `change` makes a topic's new configs from its
    current ones and the resource's entry."""
    result_cls = nested(cls, "AlterConfigsResourceResponse")
    results = []
    changed = False
    for resource in resources:
        error, message = ErrorCode.none, None
        try:
            _authorize(broker, ctx, resource, Operation.ALTER_CONFIGS)
            if resource.resource_type == BROKER and change is _apply and _deletes_only(resource):
                # No dynamic broker config is ever set here, so deleting one finds nothing to
                # delete and succeeds, as on Kafka (`kafka-reassign-partitions --verify` clears
                # the replication throttles of every broker this way).
                pass
            elif resource.resource_type != TOPIC:
                raise KafkaError(
                    ErrorCode.invalid_request,
                    "only topic configs can be altered; broker settings are set at start (--set)",
                )
            elif _changed_topic(broker, resource, change, validate_only=validate_only):
                changed = True
        except KafkaError as e:
            error, message = e.code, e.message
        results.append(
            build(
                result_cls,
                error_code=error,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    response = build(cls, throttle_time=0, responses=tuple(results))
    if not changed:
        return response

    async def durable() -> _R:
        await broker.sync_metadata()
        return response

    return durable()
