"""The broker's settings as typed values: every setting Kafka names is one field of
`BrokerSettingValues`, named after it, whose default parses into the field's declared type;
a configuration is parsed once, at construction, a set value reaching its attribute and an
unknown name or a mistyped value refused with the setting named."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Literal, get_args, get_origin, get_type_hints

import pytest

from broker.config import BROKER_SETTINGS, BrokerConfig, BrokerSettingValues, _definitions, _setting
from broker.config_values import INT, integer
from kit.settings import ConfigError

HINTS = get_type_hints(BrokerSettingValues)


def conforms(value: object, hint: object) -> bool:
    """`value` is of the declared type `hint` (the few forms the settings use)."""
    origin = get_origin(hint)
    if origin is Literal:
        return value in get_args(hint)
    if origin is tuple:
        (item, _ellipsis) = get_args(hint)
        return isinstance(value, tuple) and all(isinstance(v, item) for v in value)
    if origin is Mapping:
        key, item = get_args(hint)
        return isinstance(value, Mapping) and all(isinstance(k, key) and isinstance(v, item) for k, v in value.items())
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    assert isinstance(hint, type), hint
    return isinstance(value, hint)


def test_every_setting_is_one_field_named_after_it_in_the_same_order() -> None:
    fields = dataclasses.fields(BrokerSettingValues)
    assert [f.name for f in fields] == [name.replace(".", "_").replace("-", "_") for name in BROKER_SETTINGS]
    assert [d.attribute for d in BROKER_SETTINGS.values()] == [f.name for f in fields]
    assert len(BROKER_SETTINGS) == len(fields) == len(HINTS)


@pytest.mark.parametrize("name", list(BROKER_SETTINGS))
def test_each_default_parses_into_its_fields_declared_type(name: str) -> None:
    definition = BROKER_SETTINGS[name]
    attribute = definition.attribute
    parsed = definition.parse(definition.default)
    assert conforms(parsed, HINTS[attribute]), (name, parsed, HINTS[attribute])
    assert getattr(BrokerConfig().values, attribute) == parsed


@pytest.mark.parametrize(
    ("raw", "attribute", "expected"),
    [
        ({"num.partitions": "6"}, "num_partitions", 6),
        ({"log.durability": "page-cache"}, "log_durability", "page-cache"),
        ({"allow.everyone.if.no.acl.found": "TRUE"}, "allow_everyone_if_no_acl_found", True),
        ({"sasl.enabled.mechanisms": "plain, scram-sha-512"}, "sasl_enabled_mechanisms", ("PLAIN", "SCRAM-SHA-512")),
        ({"group.consumer.assignors": "range"}, "group_consumer_assignors", ("range",)),
        (
            {"max.connections.per.ip.overrides": "10.0.0.1:5,::1:0"},
            "max_connections_per_ip_overrides",
            {"10.0.0.1": 5, "::1": 0},
        ),
        ({"cluster.id": "abc"}, "cluster_id", "abc"),
    ],
)
def test_a_set_value_reaches_its_typed_attribute(raw: dict[str, str], attribute: str, expected: object) -> None:
    config = BrokerConfig(settings=raw)
    value = getattr(config.values, attribute)
    assert value == expected
    assert conforms(value, HINTS[attribute])
    assert config.settings == raw  # as given: DescribeConfigs tells set values from defaults by them
    assert getattr(BrokerConfig().values, attribute) != expected


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ({"num.partitions": "abc"}, "num.partitions: 'abc' is not an integer"),
        ({"num.partitions": "0"}, "num.partitions: 0 is outside [1, 100000]"),
        ({"log.durability": "sometimes"}, "log.durability: 'sometimes' is not one of fsync, page-cache"),
        ({"log.cleaner.enable": "yes"}, "log.cleaner.enable: 'yes' is not true or false"),
        ({"sasl.enabled.mechanisms": "GSSAPI"}, "sasl.enabled.mechanisms: unsupported SASL mechanism 'GSSAPI'"),
        (
            {"max.connections.per.ip.overrides": "10.0.0.1"},
            "max.connections.per.ip.overrides: '10.0.0.1' is not host:count",
        ),
        ({"num.partitionz": "3"}, "unknown broker setting 'num.partitionz'"),
    ],
)
def test_an_unknown_name_or_a_mistyped_value_is_refused_naming_the_setting(raw: dict[str, str], words: str) -> None:
    with pytest.raises(ConfigError) as e:
        BrokerConfig(settings=raw)
    assert str(e.value).startswith(words), str(e.value)


def test_a_setting_named_at_runtime_is_read_as_an_integer_or_refused() -> None:
    values = BrokerConfig(settings={"group.consumer.max.session.timeout.ms": "90000"}).values
    assert values.int_setting("group.consumer.max.session.timeout.ms") == 90000
    assert values.int_setting("log.cleaner.backoff.ms") == 15000
    with pytest.raises(TypeError, match=r"log\.cleaner\.enable is not an integer"):
        values.int_setting("log.cleaner.enable")  # a boolean, though Python's bool is an int
    with pytest.raises(TypeError, match=r"super\.users is not an integer"):
        values.int_setting("super.users")
    with pytest.raises(KeyError):
        values.int_setting("segment.bytes")  # a topic config, not a broker setting


def test_the_values_are_frozen() -> None:
    values = BrokerConfig().values
    with pytest.raises(dataclasses.FrozenInstanceError):
        values.num_partitions = 7  # type: ignore[misc]


def test_a_field_named_other_than_its_setting_is_refused() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Drifted(BrokerSettingValues):
        num_partition: int = _setting("num.partitions", "3", integer(1, 100_000), INT)

    with pytest.raises(TypeError, match=r"Drifted\.num_partition holds num\.partitions: name it num_partitions"):
        _definitions(Drifted)
    assert len(_definitions(BrokerSettingValues)) == len(BROKER_SETTINGS)
