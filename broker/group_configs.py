"""Group configs (the GROUP config resource, 32): the per-group overrides Kafka 4.1's
`GroupConfig` accepts, how each is checked, and the value a group runs with.

An operator sets them with `kafka-configs --entity-type groups`; a group without an override
runs with the broker-level setting its config falls back to (`consumer.session.timeout.ms`
with `group.consumer.session.timeout.ms`, and so on), or with Kafka's default where there is
none (`share.auto.offset.reset`, `share.isolation.level`).

Checked as Kafka checks them: the type and lower bound of each value (its `ConfigDef`), then
the broker-level bounds (`group.share.min.record.lock.duration.ms` and the like), then that a
session timeout exceeds its heartbeat interval, each with Kafka's message.  The broker's own
settings are not judged again here: only what a group overrides is held to the bounds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from broker.config import BrokerConfig
from broker.config_values import INT, INT_MAX, LONG_MAX, STRING
from broker.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "GROUP_CONFIGS",
    "GroupConfigDef",
    "auto_offset_reset",
    "group_config",
    "parse_value",
    "validate",
    "validate_overrides",
]

CONSUMER_SESSION_TIMEOUT = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
SHARE_SESSION_TIMEOUT = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL = "share.heartbeat.interval.ms"
SHARE_RECORD_LOCK_DURATION = "share.record.lock.duration.ms"
SHARE_AUTO_OFFSET_RESET = "share.auto.offset.reset"
SHARE_ISOLATION_LEVEL = "share.isolation.level"
STREAMS_SESSION_TIMEOUT = "streams.session.timeout.ms"
STREAMS_HEARTBEAT_INTERVAL = "streams.heartbeat.interval.ms"
STREAMS_NUM_STANDBY_REPLICAS = "streams.num.standby.replicas"

_RESET_DOC = (
    "The strategy to initialize the share-partition start offset. <ul><li>earliest: automatically reset the "
    "offset to the earliest offset</li><li>latest: automatically reset the offset to the latest offset</li>"
    "<li>by_duration:&lt;duration&gt;: automatically reset the offset to a configured duration from the current "
    "timestamp. &lt;duration&gt; must be specified in ISO8601 format (PnDTnHnMn.nS). Negative duration is not "
    "allowed.</li><li>anything else: throw exception to the share consumer.</li></ul>"
)
_ISOLATION_DOC = (
    'Controls how to read records written transactionally. If set to "read_committed", the share group will only '
    'deliver transactional records which have been committed. If set to "read_uncommitted", the share group will '
    "return all messages, even transactional messages which have been aborted. Non-transactional records will be "
    "returned unconditionally in either mode."
)
_ISOLATION_LEVELS = ("read_committed", "read_uncommitted")


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    name: str
    config_type: int  # DescribeConfigs' type: INT or STRING, as Kafka's
    broker_name: str | None  # the broker-level setting a group without an override runs with
    default: str  # Kafka's, where there is no broker-level setting
    doc: str
    at_least: int = 0  # INT: Kafka's ConfigDef lower bound
    bounds: tuple[str, str] | None = None  # INT: the broker-level min and max settings
    check: Callable[[str], None] | None = None  # STRING: raises ValueError with Kafka's detail


def _isolation_level(value: str) -> None:
    if value not in _ISOLATION_LEVELS:
        raise ValueError(f"String must be one of: {', '.join(_ISOLATION_LEVELS)}")


def _reset_strategy(value: str) -> None:
    try:
        auto_offset_reset(value)
    except ValueError:
        raise ValueError(
            f"Invalid value `{value}` for configuration {SHARE_AUTO_OFFSET_RESET}. The value must be either "
            "'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'."
        ) from None


def _int(
    name: str, broker_name: str, doc: str, *, at_least: int = 1, bounds: tuple[str, str] | None = None
) -> GroupConfigDef:
    return GroupConfigDef(name, INT, broker_name, "", doc, at_least=at_least, bounds=bounds)


# Kafka 4.1's GroupConfig, in its order.
GROUP_CONFIGS: dict[str, GroupConfigDef] = {
    d.name: d
    for d in [
        _int(
            CONSUMER_SESSION_TIMEOUT,
            "group.consumer.session.timeout.ms",
            "The timeout to detect client failures when using the consumer group protocol.",
            bounds=("group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
        ),
        _int(
            CONSUMER_HEARTBEAT_INTERVAL,
            "group.consumer.heartbeat.interval.ms",
            "The heartbeat interval given to the members of a consumer group.",
            bounds=("group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms"),
        ),
        _int(
            SHARE_SESSION_TIMEOUT,
            "group.share.session.timeout.ms",
            "The timeout to detect client failures when using the share group protocol.",
            bounds=("group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
        ),
        _int(
            SHARE_HEARTBEAT_INTERVAL,
            "group.share.heartbeat.interval.ms",
            "The heartbeat interval given to the members of a share group.",
            bounds=("group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
        ),
        _int(
            SHARE_RECORD_LOCK_DURATION,
            "group.share.record.lock.duration.ms",
            "The record acquisition lock duration in milliseconds for share groups.",
            at_least=1000,
            bounds=("group.share.min.record.lock.duration.ms", "group.share.max.record.lock.duration.ms"),
        ),
        GroupConfigDef(SHARE_AUTO_OFFSET_RESET, STRING, None, "latest", _RESET_DOC, check=_reset_strategy),
        GroupConfigDef(SHARE_ISOLATION_LEVEL, STRING, None, "read_uncommitted", _ISOLATION_DOC, check=_isolation_level),
        _int(
            STREAMS_SESSION_TIMEOUT,
            "group.streams.session.timeout.ms",
            "The timeout to detect client failures when using the streams group protocol.",
            bounds=("group.streams.min.session.timeout.ms", "group.streams.max.session.timeout.ms"),
        ),
        _int(
            STREAMS_HEARTBEAT_INTERVAL,
            "group.streams.heartbeat.interval.ms",
            "The heartbeat interval given to the members.",
            bounds=("group.streams.min.heartbeat.interval.ms", "group.streams.max.heartbeat.interval.ms"),
        ),
        _int(
            STREAMS_NUM_STANDBY_REPLICAS,
            "group.streams.num.standby.replicas",
            "The number of standby replicas for each task.",
            at_least=0,
            bounds=("", "group.streams.max.standby.replicas"),  # Kafka sets no broker-level minimum
        ),
    ]
}

# A session timeout must exceed the heartbeat interval of the same protocol (Kafka's last checks).
_PAIRS = (
    (CONSUMER_SESSION_TIMEOUT, CONSUMER_HEARTBEAT_INTERVAL),
    (SHARE_SESSION_TIMEOUT, SHARE_HEARTBEAT_INTERVAL),
    (STREAMS_SESSION_TIMEOUT, STREAMS_HEARTBEAT_INTERVAL),
)
_JAVA_INT = re.compile(r"[+-]?[0-9]+")


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_config, message)


def _definition(name: str) -> GroupConfigDef:
    definition = GROUP_CONFIGS.get(name)
    if definition is None:
        raise _invalid(f"Unknown group config name: {name}")
    return definition


def parse_value(name: str, value: str) -> int | str:
    """The value of one group config, checked as Kafka's ConfigDef checks it (type, lower
    bound, allowed strings; surrounding spaces ignored): what a stored override must pass."""
    definition = _definition(name)
    trimmed = value.strip()
    if definition.config_type == INT:
        if not _JAVA_INT.fullmatch(trimmed) or not -INT_MAX - 1 <= int(trimmed) <= INT_MAX:
            raise _invalid(f"Invalid value {value} for configuration {name}: Not a number of type INT")
        number = int(trimmed)
        if number < definition.at_least:
            least = definition.at_least
            raise _invalid(f"Invalid value {number} for configuration {name}: Value must be at least {least}")
        return number
    if definition.check is not None:
        try:
            definition.check(trimmed)
        except ValueError as e:
            raise _invalid(f"Invalid value {trimmed} for configuration {name}: {e}") from None
    return trimmed


def _within_bounds(config: BrokerConfig, name: str, number: int) -> None:
    bounds = GROUP_CONFIGS[name].bounds
    if bounds is None:
        return
    low, high = bounds
    if low and number < config.values.int_setting(low):
        raise _invalid(f"{name} must be greater than or equal to {low}")
    if number > config.values.int_setting(high):
        raise _invalid(f"{name} must be less than or equal to {high}")


def validate(config: BrokerConfig, name: str, value: str) -> str:
    """One override checked alone (its name, its value, the broker's bounds on it); the value
    as it is stored.  Raises KafkaError(INVALID_CONFIG) with Kafka's message."""
    parsed = parse_value(name, value)
    if isinstance(parsed, int):
        _within_bounds(config, name, parsed)
    return str(parsed)


def validate_overrides(config: BrokerConfig, overrides: Mapping[str, str]) -> dict[str, str]:
    """A group's whole set of overrides, as Kafka checks a group's new configs: every name
    and value, then every bound, then each session timeout against its heartbeat interval
    (where the group overrides either).  The overrides as they are stored."""
    for name in overrides:
        _definition(name)
    parsed = {name: parse_value(name, overrides[name]) for name in GROUP_CONFIGS if name in overrides}
    for name in GROUP_CONFIGS:
        number = parsed.get(name)
        if isinstance(number, int):
            _within_bounds(config, name, number)
    for session, heartbeat in _PAIRS:
        if (session in overrides or heartbeat in overrides) and not int(group_config(config, overrides, session)) > int(
            group_config(config, overrides, heartbeat)
        ):
            raise _invalid(f"{session} must be greater than {heartbeat}")
    return {name: str(value) for name, value in parsed.items()}


def group_config(config: BrokerConfig, overrides: Mapping[str, str], name: str) -> int | str:
    """The value a group runs with: its override, else the broker-level setting, else Kafka's
    default.  KeyError for a name Kafka's GroupConfig does not have."""
    definition = GROUP_CONFIGS[name]
    if name in overrides:
        return parse_value(name, overrides[name])
    if definition.broker_name is not None:
        return config.values.int_setting(definition.broker_name)
    return definition.default


def default_value(config: BrokerConfig, name: str) -> str:
    """What a group without an override of `name` runs with, as DescribeConfigs shows it."""
    return str(group_config(config, {}, name))


# --- share.auto.offset.reset -------------------------------------------------------------

# java.time.Duration.parse's grammar: PnDTnHnMn.nS, letters in either case, signs allowed.
_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE,
)


def _duration_ms(text: str) -> int:
    """An ISO-8601 duration (java.time.Duration.parse) in milliseconds; ValueError if it does
    not parse, overflows Java's long seconds, or is negative."""
    match = _DURATION.fullmatch(text)
    if match is None:
        raise ValueError("Unable to parse duration string in by_duration offset reset strategy.")
    sign, days, time_part, hours, minutes, seconds, fraction = match.groups()
    if (days, hours, minutes, seconds) == (None, None, None, None) or time_part in {"T", "t"}:
        raise ValueError("Unable to parse duration string in by_duration offset reset strategy.")
    total_s = int(days or 0) * 86_400 + int(hours or 0) * 3_600 + int(minutes or 0) * 60 + int(seconds or 0)
    nanos = int((fraction or "").ljust(9, "0")) * (-1 if (seconds or "").startswith("-") else 1)
    total_ns = total_s * 1_000_000_000 + nanos
    if sign == "-":
        total_ns = -total_ns
    if not -LONG_MAX - 1 <= total_ns // 1_000_000_000 <= LONG_MAX:
        raise ValueError("Unable to parse duration string in by_duration offset reset strategy.")
    if total_ns < 0:
        raise ValueError("Negative duration is not supported in by_duration offset reset strategy.")
    return total_ns // 1_000_000


def auto_offset_reset(value: str) -> tuple[str, int | None]:
    """share.auto.offset.reset parsed: ("latest", None), ("earliest", None) or ("by_duration",
    milliseconds back from now).  ValueError for anything else, as Kafka (case-sensitive;
    `none` is a consumer's strategy, not a share group's)."""
    if value in ("latest", "earliest"):
        return value, None
    if value == "by_duration":
        raise ValueError("<:duration> part is missing in by_duration auto offset reset strategy.")
    if value == "none":
        raise ValueError("Unsupported strategy for ShareGroup: none")
    if value.startswith("by_duration:"):
        return "by_duration", _duration_ms(value[len("by_duration:") :])
    raise ValueError(f"Unknown auto offset reset strategy: {value}")
