"""The compatibility levels, by Confluent's names: what registering a new version must keep.
Apart from the checks (registry.compatibility) so that settings and the command line read them
without loading the Avro library."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Level"]


class Level(StrEnum):
    """Schema registry compatibility levels (Confluent's names and meanings); a ``str`` enum
    whose values, and ``str()``, are the upper-case names."""

    NONE = "NONE"
    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"
