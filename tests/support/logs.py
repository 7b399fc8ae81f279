"""A PartitionLog of topic "t", partition 0 in a temporary directory, with the broker's
topic defaults plus overrides and a manual clock, for unit tests of the log.

    with environment({"segment.bytes": "600"}) as env:
        log = env.open()
        env.clock.advance(1000)
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from broker.clock import ManualClock
from broker.config import BrokerConfig, LogConfig
from broker.log.partition_log import PartitionLog

START_MS = 1_700_000_000_000


@dataclass
class Env:
    directory: Path
    config: LogConfig
    clock: ManualClock

    def open(self, *, recover: bool = False, directory: Path | None = None) -> PartitionLog:
        """The log in `directory` (default: the environment's own), opened with recovery
        of an unclean shutdown when `recover`."""
        return PartitionLog(directory or self.directory, "t", 0, self.config, self.clock, recover=recover)


@contextmanager
def environment(overrides: dict[str, str]) -> Iterator[Env]:
    """An Env whose config is the broker's topic defaults with `overrides` (config name to
    string value) and whose clock starts at START_MS; the directory is removed afterwards."""
    with tempfile.TemporaryDirectory() as tmp:
        defaults = BrokerConfig(data_dir=Path(tmp) / "broker").topic_defaults()
        config = LogConfig.from_strings({**defaults, **overrides})
        yield Env(Path(tmp) / "t-0", config, ManualClock(START_MS))
