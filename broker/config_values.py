"""Value parsers shared by the broker settings (`broker.config`) and the topic configs
(`broker.topic_configs`), and DescribeConfigs' config types.

A parser takes the string a client or `--set` gives and returns the value, or raises
ConfigError saying what is wrong with it.
"""

from __future__ import annotations

from collections.abc import Callable

from kit.settings import ConfigError

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1

# DescribeConfigs' config_type (v3+), as Kafka's ConfigDef types map to it.
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = range(1, 10)


def integer(lo: int, hi: int = LONG_MAX) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(f"{raw!r} is not an integer") from None
        if not lo <= value <= hi:
            raise ConfigError(f"{value} is outside [{lo}, {hi}]")
        return value

    return parse


def integer_or(special: int, lo: int, hi: int) -> Callable[[str], int]:
    """Kafka's `[lo,...,hi] or special` (compression.gzip.level: 1-9 or -1)."""
    within = integer(lo, hi)

    def parse(raw: str) -> int:
        try:
            return within(raw)
        except ConfigError:
            if raw.strip() == str(special):
                return special
            raise ConfigError(f"{raw!r} is not in [{lo}, {hi}] nor {special}") from None

    return parse


def number(lo: float, hi: float) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"{raw!r} is not a number") from None
        if not lo <= value <= hi:
            raise ConfigError(f"{value} is outside [{lo}, {hi}]")
        return value

    return parse


def choice(*options: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw not in options:
            raise ConfigError(f"{raw!r} is not one of {', '.join(options)}")
        return raw

    return parse


def boolean(raw: str) -> bool:
    """As Kafka's BOOLEAN: true or false in any case."""
    if raw.strip().lower() not in ("true", "false"):
        raise ConfigError(f"{raw!r} is not true or false")
    return raw.strip().lower() == "true"
