"""Option values of `streamshop analytics`, checked the same way for flags and `ANALYTICS_*`
variables.  Standard library only: the CLI's parsers import this without loading Spark."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

__all__ = [
    "JOB_NAMES",
    "STARTS",
    "argument",
    "boolean",
    "job_list",
    "non_negative_float",
    "positive_float",
    "positive_int",
    "start",
]

JOB_NAMES = ("orders", "otp", "logs")
STARTS = ("group", "earliest", "latest")
_T = TypeVar("_T")


def positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise ValueError(f"expected a positive number, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise ValueError(f"expected 0 or more, got {text!r}")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError(f"expected a positive integer, got {text!r}")
    return value


def start(text: str) -> str:
    if text.lower() not in STARTS:
        raise ValueError(f"expected one of {', '.join(STARTS)}, got {text!r}")
    return text.lower()


def job_list(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names or any(n not in JOB_NAMES for n in names):
        raise ValueError(f"expected a comma list of {', '.join(JOB_NAMES)}, got {text!r}")
    return names


def boolean(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def argument(parse: Callable[[str], _T]) -> Callable[[str], _T]:
    """`parse` as an argparse `type=`: its ValueError becomes argparse's usage error."""

    def parse_argument(text: str) -> _T:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse_argument.__name__ = parse.__name__
    return parse_argument
