"""Group configs without a network: every config Kafka 4.1's GroupConfig has, each checked as
Kafka checks it (with its words), the value a group runs with (its override, else the broker's
setting), share.auto.offset.reset's strategies, the overrides kept in the metadata log across a
reopen (a record that does not decode skipped), and the consumer group protocol's timers
following a group's own session timeout and heartbeat interval."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.clock import ManualClock
from broker.config import BROKER_SETTINGS, BrokerConfig
from broker.coordinator.consumer_group import ConsumerGroup
from broker.coordinator.consumer_groups import ConsumerGroupConfig, ConsumerGroups, Heartbeat, Rec
from broker.group_configs import (
    GROUP_CONFIGS,
    auto_offset_reset,
    group_config,
    parse_value,
    validate,
    validate_overrides,
)
from broker.metadata import METADATA_TOPIC, MetadataStore
from broker.protocol.errors import ErrorCode, KafkaError

KAFKA_41_GROUP_CONFIGS = [
    "consumer.session.timeout.ms",
    "consumer.heartbeat.interval.ms",
    "share.session.timeout.ms",
    "share.heartbeat.interval.ms",
    "share.record.lock.duration.ms",
    "share.auto.offset.reset",
    "share.isolation.level",
    "streams.session.timeout.ms",
    "streams.heartbeat.interval.ms",
    "streams.num.standby.replicas",
]


def refused(fn: object, *args: object) -> str:
    with pytest.raises(KafkaError) as e:
        fn(*args)  # type: ignore[operator]
    assert e.value.code == ErrorCode.invalid_config
    return e.value.message or ""


def test_the_configs_are_kafka_4_1s_each_bounded_by_broker_settings_that_exist() -> None:
    assert list(GROUP_CONFIGS) == KAFKA_41_GROUP_CONFIGS
    for definition in GROUP_CONFIGS.values():
        named = [definition.broker_name, *(definition.bounds or ())]
        assert all(name in BROKER_SETTINGS for name in named if name), definition.name


def test_a_group_without_overrides_runs_with_the_broker_settings() -> None:
    config = BrokerConfig()
    defaults = {name: group_config(config, {}, name) for name in GROUP_CONFIGS}
    assert defaults == {
        "consumer.session.timeout.ms": 45000,
        "consumer.heartbeat.interval.ms": 250,
        "share.session.timeout.ms": 45000,
        "share.heartbeat.interval.ms": 5000,
        "share.record.lock.duration.ms": 30000,
        "share.auto.offset.reset": "latest",
        "share.isolation.level": "read_uncommitted",
        "streams.session.timeout.ms": 45000,
        "streams.heartbeat.interval.ms": 5000,
        "streams.num.standby.replicas": 0,
    }
    tuned = BrokerConfig(
        settings={
            "group.share.record.lock.duration.ms": "20000",
            "group.share.session.timeout.ms": "50000",
            "group.share.heartbeat.interval.ms": "6000",
            "group.consumer.session.timeout.ms": "30000",
            "group.consumer.heartbeat.interval.ms": "1000",
        }
    )
    assert group_config(tuned, {}, "share.record.lock.duration.ms") == 20000
    assert group_config(tuned, {}, "share.session.timeout.ms") == 50000
    assert group_config(tuned, {}, "share.heartbeat.interval.ms") == 6000
    assert group_config(tuned, {}, "consumer.session.timeout.ms") == 30000
    assert group_config(tuned, {}, "consumer.heartbeat.interval.ms") == 1000
    overrides = {"share.record.lock.duration.ms": "45000", "share.auto.offset.reset": "earliest"}
    assert group_config(tuned, overrides, "share.record.lock.duration.ms") == 45000
    assert group_config(tuned, overrides, "share.auto.offset.reset") == "earliest"
    assert group_config(tuned, overrides, "share.session.timeout.ms") == 50000
    with pytest.raises(KeyError):
        group_config(tuned, {}, "share.delivery.count.limit")  # Kafka 4.2's, not 4.1's


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("no.such.config", "1", "Unknown group config name: no.such.config"),
        ("share.delivery.count.limit", "3", "Unknown group config name: share.delivery.count.limit"),
        (
            "share.record.lock.duration.ms",
            "abc",
            "Invalid value abc for configuration share.record.lock.duration.ms: Not a number of type INT",
        ),
        (
            "share.record.lock.duration.ms",
            "2147483648",
            "Invalid value 2147483648 for configuration share.record.lock.duration.ms: Not a number of type INT",
        ),
        (
            "share.record.lock.duration.ms",
            "999",
            "Invalid value 999 for configuration share.record.lock.duration.ms: Value must be at least 1000",
        ),
        (
            "share.record.lock.duration.ms",
            "14999",
            "share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms",
        ),
        (
            "share.record.lock.duration.ms",
            "60001",
            "share.record.lock.duration.ms must be less than or equal to group.share.max.record.lock.duration.ms",
        ),
        (
            "consumer.session.timeout.ms",
            "44999",
            "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms",
        ),
        (
            "consumer.heartbeat.interval.ms",
            "15001",
            "consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms",
        ),
        (
            "share.heartbeat.interval.ms",
            "4999",
            "share.heartbeat.interval.ms must be greater than or equal to group.share.min.heartbeat.interval.ms",
        ),
        (
            "streams.num.standby.replicas",
            "3",
            "streams.num.standby.replicas must be less than or equal to group.streams.max.standby.replicas",
        ),
        (
            "share.isolation.level",
            "read_some",
            "Invalid value read_some for configuration share.isolation.level: "
            "String must be one of: read_committed, read_uncommitted",
        ),
        (
            "share.auto.offset.reset",
            "oldest",
            "Invalid value oldest for configuration share.auto.offset.reset: Invalid value `oldest` for "
            "configuration share.auto.offset.reset. The value must be either 'earliest', 'latest' or of the "
            "format 'by_duration:<PnDTnHnMn.nS>'.",
        ),
    ],
)
def test_a_bad_value_is_refused_with_kafkas_message(name: str, value: str, message: str) -> None:
    assert refused(validate, BrokerConfig(), name, value) == message


def test_good_values_are_stored_as_kafka_parses_them() -> None:
    config = BrokerConfig()
    assert validate(config, "share.record.lock.duration.ms", " 45000 ") == "45000"
    assert validate(config, "share.record.lock.duration.ms", "+15000") == "15000"
    assert validate(config, "share.auto.offset.reset", "by_duration:PT1H") == "by_duration:PT1H"
    assert validate(config, "share.isolation.level", "read_committed") == "read_committed"
    assert parse_value("streams.num.standby.replicas", "2") == 2


def test_the_bounds_follow_the_broker_settings() -> None:
    wide = BrokerConfig(settings={"group.share.min.record.lock.duration.ms": "1000"})
    assert validate(wide, "share.record.lock.duration.ms", "1000") == "1000"
    narrow = BrokerConfig(settings={"group.share.max.record.lock.duration.ms": "40000"})
    assert "less than or equal" in refused(validate, narrow, "share.record.lock.duration.ms", "45000")


def test_a_session_timeout_must_exceed_the_heartbeat_interval_set_or_inherited() -> None:
    config = BrokerConfig()
    both = {"share.session.timeout.ms": "45000", "share.heartbeat.interval.ms": "15000"}
    assert validate_overrides(config, both) == both
    wide = BrokerConfig(settings={"group.share.min.session.timeout.ms": "1000"})
    message = refused(validate_overrides, wide, {"share.session.timeout.ms": "5000"})  # the broker's 5000
    assert message == "share.session.timeout.ms must be greater than share.heartbeat.interval.ms"
    # Unknown names are named first, as Kafka checks names before values.
    assert refused(validate_overrides, config, {"x": "1", "share.isolation.level": "no"}).startswith("Unknown")


def test_the_broker_settings_themselves_are_not_judged_again() -> None:
    """A broker started with a session timeout below the group minimum still lets its
    groups set other configs."""
    config = BrokerConfig(settings={"group.consumer.session.timeout.ms": "1500"})
    assert validate_overrides(config, {"share.auto.offset.reset": "earliest"}) == {
        "share.auto.offset.reset": "earliest"
    }


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("latest", ("latest", None)),
        ("earliest", ("earliest", None)),
        ("by_duration:PT1H", ("by_duration", 3_600_000)),
        ("by_duration:P1DT2M", ("by_duration", 86_400_000 + 120_000)),
        ("by_duration:pt0.5s", ("by_duration", 500)),
        ("by_duration:PT1M-30S", ("by_duration", 30_000)),
        ("by_duration:PT0S", ("by_duration", 0)),
    ],
)
def test_share_auto_offset_reset_strategies(value: str, parsed: tuple[str, int | None]) -> None:
    assert auto_offset_reset(value) == parsed


@pytest.mark.parametrize(
    "value",
    [
        "LATEST",
        "none",
        "by_duration",
        "by_duration:",
        "by_duration:P",
        "by_duration:PT",
        "by_duration:1H",
        "by_duration:-PT1H",
        "by_duration:PT-1S",
        "by_duration:P9999999999999999D",
    ],
)
def test_share_auto_offset_reset_refuses_what_kafka_refuses(value: str) -> None:
    with pytest.raises(ValueError):
        auto_offset_reset(value)
    assert refused(validate, BrokerConfig(), "share.auto.offset.reset", value).startswith("Invalid value")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "broker"


def _open(data_dir: Path) -> MetadataStore:
    return MetadataStore(BrokerConfig(data_dir=data_dir), ManualClock(), recover=False)


def test_overrides_are_kept_in_the_metadata_log(data_dir: Path) -> None:
    store = _open(data_dir)
    store.set_group_configs("g1", {"share.auto.offset.reset": "earliest"})
    store.set_group_configs("g2", {"share.record.lock.duration.ms": "20000"})
    store.set_group_configs("g2", {"share.record.lock.duration.ms": "25000"})
    store.set_group_configs("g3", {"consumer.session.timeout.ms": "50000"})
    store.delete_group_configs("g3")
    store.set_group_configs("g1", {})  # empty: removed
    store.delete_group_configs("never-set")  # writes nothing
    store.close(clean=True)
    again = _open(data_dir)
    try:
        assert again.group_configs == {"g2": {"share.record.lock.duration.ms": "25000"}}
        assert again.skipped.counts[METADATA_TOPIC] == 0
    finally:
        again.close(clean=True)


def test_a_group_config_record_that_does_not_decode_is_skipped(data_dir: Path) -> None:
    store = _open(data_dir)
    store.set_group_configs("kept", {"share.isolation.level": "read_committed"})
    store.write_records(
        [
            (["group_config", "bad-name"], {"no.such.config": "1"}),
            (["group_config", "bad-value"], {"share.record.lock.duration.ms": "soon"}),
            (["group_config", "bad-shape"], ["not", "a", "map"]),
            (["group_config", ""], {"share.auto.offset.reset": "earliest"}),
            (["group_config", "bad-type"], {"share.record.lock.duration.ms": 20000}),
        ]
    )
    store.close(clean=True)
    again = _open(data_dir)
    try:
        assert again.group_configs == {"kept": {"share.isolation.level": "read_committed"}}
        assert again.skipped.counts[METADATA_TOPIC] == 5
    finally:
        again.close(clean=True)


@pytest.fixture
def store(data_dir: Path) -> Iterator[MetadataStore]:
    s = _open(data_dir)
    yield s
    s.close(clean=True)


def _join(groups: ConsumerGroups, group_id: str, now: int) -> None:
    req = Heartbeat(group_id, "m-" + group_id, 0, None, None, 60_000, (), None, None, {}, "client", "/10.0.0.1")
    groups.heartbeat(req, now)


def test_the_consumer_protocol_uses_a_groups_own_session_timeout_and_heartbeat_interval(
    store: MetadataStore,
) -> None:
    groups = ConsumerGroups(store, ConsumerGroupConfig(session_timeout_ms=45_000, heartbeat_interval_ms=250), _none)
    store.set_group_configs("tuned", {"consumer.session.timeout.ms": "50000", "consumer.heartbeat.interval.ms": "500"})
    assert (groups.session_timeout_ms("tuned"), groups.heartbeat_interval_ms("tuned")) == (50_000, 500)
    assert (groups.session_timeout_ms("plain"), groups.heartbeat_interval_ms("plain")) == (45_000, 250)
    _join(groups, "tuned", 1_000)
    _join(groups, "plain", 1_000)
    assert groups.groups["tuned"].members["m-tuned"].session_deadline_ms == 51_000
    assert groups.groups["plain"].members["m-plain"].session_deadline_ms == 46_000
    fenced = {group_id for group_id, _ in groups.expire(47_000)}
    assert fenced == {"plain"}


def _none(group_id: str, now: int) -> tuple[ConsumerGroup | None, list[Rec]]:
    return None, []
