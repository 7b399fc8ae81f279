"""DescribeConfigs, IncrementalAlterConfigs and AlterConfigs for topics and groups (and describe
for the broker).

Described as Kafka's ConfigHelper describes them: a topic's configs are never read-only, their
source is the first of their synonyms (the topic's override, the broker's static setting,
the default); a broker setting is read-only unless Kafka can change it at runtime.  This
broker has no dynamic broker configs, so no source is ever DYNAMIC_BROKER_CONFIG, and the one
cluster-wide default (the broker resource "") is the one a Kafka 4.1 cluster starts with:
`min.insync.replicas`, which its controller sets cluster-wide when it first starts with eligible
leader replicas (KIP-966), to its own static value.  So that setting is DYNAMIC_DEFAULT_BROKER_CONFIG
for the broker and for every topic that does not override it, as on Kafka 4.1.
A group's configs (broker.group_configs) are never read-only either, and each has one synonym
under its own name: GROUP_CONFIG for the group's override, else DEFAULT_CONFIG with the value
the group runs with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from kio.static.protocol import Entity

from broker.config import BROKER_SETTINGS, TOPIC_CONFIGS, check_combination, validate_topic_configs
from broker.config_values import LIST
from broker.cooperative import WorkSteps, each
from broker.group_configs import GROUP_CONFIGS, group_config, validate_overrides
from broker.handlers.base import Messages, RequestContext
from broker.handlers.services import HasConfig, HasNodeId, HasSecurity, HasStore, MetadataDurability
from broker.protocol.codec import build, encode_body, encode_count, nested
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.fetch_codec import Part, RawResponse
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
TOPIC, BROKER, GROUP = 2, 4, 32
# ConfigSource values of DescribeConfigs v1+ (Kafka's DYNAMIC_BROKER_CONFIG, 2, never applies:
# no broker config is dynamic here).
DYNAMIC_TOPIC_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG, GROUP_CONFIG = 1, 3, 4, 5, 8
# Set cluster-wide by a Kafka 4.1 controller at its first start (ELR, KIP-966).
CLUSTER_DEFAULTS = ("min.insync.replicas",)
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_LIST_CONFIGS = {name for name, d in TOPIC_CONFIGS.items() if d.config_type == LIST}


class ConfigSettings(HasConfig, Protocol):
    """What a topic's config entries need of the broker: its settings, by Kafka's names."""

    @property
    def first_listener(self) -> str: ...


class ConfigsBroker(ConfigSettings, HasSecurity, HasStore, HasConfig, HasNodeId, MetadataDurability, Protocol):
    """What the config requests use of the broker."""

    @property
    def cluster_id(self) -> str: ...


class _Resource(Protocol):
    """A config resource named in any of the three APIs."""

    @property
    def resource_type(self) -> int: ...

    @property
    def resource_name(self) -> str: ...


class _Described(_Resource, Protocol):
    """A DescribeConfigs resource."""

    @property
    def configuration_keys(self) -> Sequence[str] | None: ...


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


Synonym = tuple[str, str | None, int]  # name, value, source


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    synonyms: list[Synonym]  # Kafka's order: the topic's, static, default
    doc: str
    config_type: int
    read_only: bool = False
    sensitive: bool = False

    @property
    def source(self) -> int:
        return self.synonyms[0][2] if self.synonyms else DEFAULT_CONFIG


def static_settings(broker: ConfigSettings) -> dict[str, str]:
    """The settings given at start, by Kafka's names: `--advertise HOST:PORT` is the first
    listener's `advertised.listeners`, as a server.properties line would give it."""
    settings = dict(broker.config.settings)
    if "advertised.listeners" not in settings and broker.config.advertise is not None:
        host, port = broker.config.advertise
        host = f"[{host}]" if ":" in host else host
        settings["advertised.listeners"] = f"{broker.first_listener}://{host}:{port}"
    return settings


def _broker_synonyms(settings: dict[str, str], name: str, default: str, *, with_default: bool) -> list[Synonym]:
    """A broker setting's synonyms (`settings` are the static ones): its static value when set,
    then its default (which Kafka leaves out when it has none, or derives it from another
    setting)."""
    synonyms: list[Synonym] = []
    if name in CLUSTER_DEFAULTS:
        synonyms.append((name, settings.get(name, default), DYNAMIC_DEFAULT_BROKER_CONFIG))
    if name in settings:
        synonyms.append((name, settings[name], STATIC_BROKER_CONFIG))
    if with_default:
        synonyms.append((name, default, DEFAULT_CONFIG))
    return synonyms


def topic_config_entries(broker: ConfigSettings, values: dict[str, str], overrides: set[str]) -> list[ConfigEntry]:
    entries = []
    settings = static_settings(broker)
    for name, definition in TOPIC_CONFIGS.items():
        synonyms: list[Synonym] = []
        if name in overrides:
            synonyms.append((name, values[name], DYNAMIC_TOPIC_CONFIG))
        if definition.broker_name is not None:
            synonyms += _broker_synonyms(
                settings, definition.broker_name, definition.default, with_default=definition.default_synonym
            )
        entries.append(ConfigEntry(name, values[name], synonyms, definition.doc, definition.config_type))
    return entries


def _broker_entries(broker: ConfigsBroker) -> list[ConfigEntry]:
    """The broker's settings and its defaults of the topic configs (every one of which Kafka
    can change at runtime), as Kafka describes its own resource."""
    entries = []
    settings = static_settings(broker)
    for name, setting in BROKER_SETTINGS.items():
        given = name in settings
        value: str | None = settings.get(name, setting.default)
        synonyms = _broker_synonyms(settings, name, setting.default, with_default=not setting.null_default)
        if name == "cluster.id":
            value, synonyms = broker.cluster_id, synonyms if given else []
        elif setting.null_default and not given:
            value = None
        if setting.sensitive:  # as Kafka: a password's value is never sent, set or not
            value, synonyms = None, [(n, None, s) for n, _, s in synonyms]
        kind, read_only = setting.config_type, not setting.dynamic
        entries.append(ConfigEntry(name, value, synonyms, "", kind, read_only=read_only, sensitive=setting.sensitive))
    for definition in TOPIC_CONFIGS.values():
        default_name = definition.broker_name
        if default_name is None:
            continue
        synonyms = _broker_synonyms(settings, default_name, definition.default, with_default=definition.default_synonym)
        default = broker.config.settings.get(default_name, definition.default)
        entries.append(ConfigEntry(default_name, default, synonyms, definition.doc, definition.config_type))
    return entries


def _broker_resource(broker: ConfigsBroker, name: str) -> list[ConfigEntry]:
    """Kafka's answers: "" is the cluster-wide dynamic defaults, an id this broker."""
    if name == "":
        # The cluster-wide value alone: its one synonym is itself.
        return [
            ConfigEntry(e.name, e.value, e.synonyms[:1], e.doc, e.config_type)
            for e in _broker_entries(broker)
            if e.name in CLUSTER_DEFAULTS
        ]
    try:
        node = int(name)
    except ValueError:
        raise KafkaError(ErrorCode.invalid_request, f"Broker id must be an integer, but it is: {name}") from None
    if node != broker.node_id:
        raise KafkaError(
            ErrorCode.invalid_request,
            f"Unexpected broker id, expected {broker.node_id} or empty string, but received {name}",
        )
    return _broker_entries(broker)


def _group_entries(broker: ConfigsBroker, group_id: str) -> list[ConfigEntry]:
    """Every group config Kafka has, set for this group or not (a group need not exist)."""
    if group_id == "":
        raise KafkaError(ErrorCode.invalid_request, "Group name must not be empty")
    overrides = broker.store.group_configs.get(group_id, {})
    entries = []
    for name, definition in GROUP_CONFIGS.items():
        value = str(group_config(broker.config, overrides, name))
        synonym = (name, value, GROUP_CONFIG if name in overrides else DEFAULT_CONFIG)
        entries.append(ConfigEntry(name, value, [synonym], definition.doc, definition.config_type))
    return entries


async def describe_configs(broker: ConfigsBroker, ctx: RequestContext, request: DescribeConfigsRequest) -> RawResponse:
    """As Kafka, every resource named is answered, a repeated one as often as it is named;
    but each distinct resource is described and encoded once and its bytes repeated, so a
    small request naming one resource thousands of times costs one description, not
    thousands.  The distinct resources are found first, in one pass over the request, then
    described a step at a time, the loop free between steps (a resource changed meanwhile
    is described as it is then, as Kafka describes each resource on its own)."""
    cls = DESCRIBE_CONFIGS.response(ctx.api_version)
    resources: Sequence[_Described] = request.resources
    named: list[_DescribeKey] = []
    distinct: dict[_DescribeKey, _Described] = {}
    async for resource in each(resources):
        named.append(key := _key(resource))
        distinct.setdefault(key, resource)
    encoded: dict[_DescribeKey, bytes] = {}
    steps = WorkSteps()
    for key, resource in distinct.items():
        described = _describe(broker, ctx, request, cls, resource)
        encoded[key] = encode_body(described)
        # A resource costs about four configs' worth of work of its own (described and encoded
        # apart); a topic has some 35 configs, the broker over 200, a failed resource none.
        await steps.done(4 + len(getattr(described, "configs", ())))
    parts: list[Part] = [encoded[key] for key in named]
    # The envelope is the response without results, the results spliced in where its
    # empty array is (just before the tagged fields of v4).
    flexible = bool(cls.__flexible__)
    envelope = encode_body(build(cls, throttle_time=0, results=()))
    head = envelope[:4]  # throttle_time_ms
    tail = envelope[4 + len(encode_count(0, flexible)) :]
    return RawResponse([head, encode_count(len(parts), flexible), *parts, tail], flexible, throttled=True)


_DescribeKey = tuple[int, str, tuple[str, ...] | None]


def _key(resource: _Described) -> _DescribeKey:
    """What makes two DescribeConfigs resources the same question."""
    keys = resource.configuration_keys
    return resource.resource_type, resource.resource_name, tuple(keys) if keys is not None else None


def _describe(
    broker: ConfigsBroker, ctx: RequestContext, request: DescribeConfigsRequest, cls: type[Entity], resource: _Described
) -> Entity:
    """One resource's DescribeConfigsResult."""
    result_cls = nested(cls, "DescribeConfigsResult")
    entry_cls = nested(cls, "DescribeConfigsResourceResult")
    synonym_cls = nested(cls, "DescribeConfigsSynonym")
    with_synonyms = request.include_synonyms
    with_docs = _with_documentation(request) and request.include_documentation
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
            entries = _broker_resource(broker, resource.resource_name)
        elif resource.resource_type == GROUP:
            entries = _group_entries(broker, resource.resource_name)
        else:
            raise KafkaError(ErrorCode.invalid_request, f"resource type {resource.resource_type} is not supported")
    except KafkaError as e:
        error, message = e.code, e.message
    keys = resource.configuration_keys
    if keys:  # as Kafka, an empty list asks for every config, as null does
        entries = [e for e in entries if e.name in keys]
    return build(
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
                read_only=e.read_only,
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
    broker: ConfigsBroker,
    resource: _Res,
    change: Callable[[dict[str, str], _Res], dict[str, str]],
    *,
    validate_only: bool,
) -> bool:
    """Apply `change` to the topic's configs (unless `validate_only`); whether it changed them."""
    topic = broker.store.get(resource.resource_name)
    if topic is None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {resource.resource_name!r} does not exist")
    new = change(topic.configs, resource)
    try:
        validate_topic_configs(new)
        check_combination({**broker.config.topic_defaults(), **new})
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


def _apply_group(current: dict[str, str], resource: _Changes) -> dict[str, str]:
    """IncrementalAlterConfigs on a group, with Kafka's words: no group config is a list."""
    out = dict(current)
    seen = set()
    for op in resource.configs:
        if op.name in seen:
            raise KafkaError(ErrorCode.invalid_request, "Error due to duplicate config keys")
        seen.add(op.name)
        if op.config_operation == SET:
            if op.value is None:
                raise KafkaError(ErrorCode.invalid_config, f"Null value not supported for group configs: {op.name}")
            out[op.name] = op.value
        elif op.config_operation == DELETE:
            out.pop(op.name, None)  # as Kafka: deleting what is not set (even unknown) succeeds
        elif op.config_operation in (APPEND, SUBTRACT):
            verb = "APPEND" if op.config_operation == APPEND else "SUBTRACT"
            raise KafkaError(ErrorCode.invalid_config, f"Can't {verb} to key {op.name} because its type is not LIST.")
        else:
            raise KafkaError(ErrorCode.invalid_request, f"Unknown operations type {op.config_operation}")
    return out


def _replace_group(_: dict[str, str], resource: _Settings) -> dict[str, str]:
    """AlterConfigs on a group: the request's set is the group's whole new set."""
    out: dict[str, str] = {}
    for op in resource.configs:
        if op.name in out:
            raise KafkaError(ErrorCode.invalid_request, "Error due to duplicate config keys")
        if op.value is None:
            raise KafkaError(ErrorCode.invalid_config, f"Null value not supported for group configs: {op.name}")
        out[op.name] = op.value
    return out


def _changed_group(
    broker: ConfigsBroker,
    resource: _Res,
    change: Callable[[dict[str, str], _Res], dict[str, str]],
    *,
    validate_only: bool,
) -> bool:
    """Check the group's whole new set before storing any of it (the group need not exist)."""
    group_id = resource.resource_name
    if group_id == "":
        raise KafkaError(ErrorCode.invalid_request, "Default group resources are not allowed.")
    current = broker.store.group_configs.get(group_id, {})
    new = validate_overrides(broker.config, change(current, resource))
    if validate_only or new == current:
        return False
    broker.store.set_group_configs(group_id, new)
    return True


def _authorize(broker: ConfigsBroker, ctx: RequestContext, resource: _Resource, op: Operation) -> None:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic or group, or on the cluster for the broker."""
    security = broker.security
    if resource.resource_type == TOPIC:
        if not security.topic(ctx.session, op, resource.resource_name):
            raise KafkaError(
                ErrorCode.topic_authorization_failed, f"{op.name} on topic {resource.resource_name} denied"
            )
    elif resource.resource_type == GROUP:
        if not security.group(ctx.session, op, resource.resource_name):
            raise KafkaError(
                ErrorCode.group_authorization_failed, f"{op.name} on group {resource.resource_name} denied"
            )
    elif resource.resource_type == BROKER and not security.cluster(ctx.session, op):
        raise KafkaError(ErrorCode.cluster_authorization_failed, f"{op.name} on the cluster denied")


async def incremental_alter_configs(
    broker: ConfigsBroker, ctx: RequestContext, request: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    cls = INCREMENTAL_ALTER_CONFIGS.response(ctx.api_version)
    resources: Sequence[_Changes] = request.resources
    return await _alter(
        broker, ctx, cls, resources, validate_only=request.validate_only, change=_apply, group_change=_apply_group
    )


async def alter_configs(
    broker: ConfigsBroker, ctx: RequestContext, request: AlterConfigsRequest
) -> AlterConfigsResponse:
    cls = ALTER_CONFIGS.response(ctx.api_version)
    resources: Sequence[_Settings] = request.resources
    return await _alter(
        broker, ctx, cls, resources, validate_only=request.validate_only, change=_replace, group_change=_replace_group
    )


_R = TypeVar("_R", bound=Entity)
_Res = TypeVar("_Res", bound=_Resource)


async def _alter(
    broker: ConfigsBroker,
    ctx: RequestContext,
    cls: type[_R],
    resources: Sequence[_Res],
    *,
    validate_only: bool,
    change: Callable[[dict[str, str], _Res], dict[str, str]],
    group_change: Callable[[dict[str, str], _Res], dict[str, str]],
) -> _R:
    """AlterConfigs and IncrementalAlterConfigs: `change` makes a topic's new configs from its
    current ones and the resource's entry, `group_change` a group's.  Each resource is read,
    checked and written in one go, as Kafka checks each on its own; the loop is free between
    steps of resources, and the answer waits until every change is durable."""
    result_cls = nested(cls, "AlterConfigsResourceResponse")
    results = []
    changed = False
    async for resource in each(resources):
        error, message = ErrorCode.none, None
        try:
            changed |= _altered(broker, ctx, resource, validate_only=validate_only, change=change, group=group_change)
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
    if changed:
        await broker.sync_metadata()
    return build(cls, throttle_time=0, responses=tuple(results))


def _altered(
    broker: ConfigsBroker,
    ctx: RequestContext,
    resource: _Res,
    *,
    validate_only: bool,
    change: Callable[[dict[str, str], _Res], dict[str, str]],
    group: Callable[[dict[str, str], _Res], dict[str, str]],
) -> bool:
    """One resource altered (unless `validate_only`); whether it changed what is stored."""
    _authorize(broker, ctx, resource, Operation.ALTER_CONFIGS)
    if resource.resource_type == BROKER and change is _apply and _deletes_only(resource):
        # No dynamic broker config is ever set here, so deleting one finds nothing to
        # delete and succeeds, as on Kafka (`kafka-reassign-partitions --verify` clears
        # the replication throttles of every broker this way).
        return False
    if resource.resource_type == GROUP:
        return _changed_group(broker, resource, group, validate_only=validate_only)
    if resource.resource_type != TOPIC:
        raise KafkaError(
            ErrorCode.invalid_request,
            "only topic and group configs can be altered; broker settings are set at start (--set)",
        )
    return _changed_topic(broker, resource, change, validate_only=validate_only)
