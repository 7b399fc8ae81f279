from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.harness import BrokerProcess, ThreadBroker


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., ThreadBroker]]:
    """Start in-thread brokers: `broker_factory(settings={...}, clock=...)`."""
    started: list[ThreadBroker] = []

    def make(settings: dict[str, str] | None = None, clock: object = None, name: str = "broker") -> ThreadBroker:
        b = ThreadBroker(tmp_path / name, settings, clock)  # type: ignore[arg-type]
        started.append(b)
        return b.start()

    yield make
    for b in started:
        b.close()


@pytest.fixture
def broker(broker_factory: Callable[..., ThreadBroker]) -> ThreadBroker:
    """A fresh broker with default settings."""
    return broker_factory()


@pytest.fixture
def broker_process_factory(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """Start `streamshop broker` child processes (killed at teardown)."""
    started: list[BrokerProcess] = []

    def make(settings: dict[str, str] | None = None, name: str = "broker") -> BrokerProcess:
        b = BrokerProcess(tmp_path / name, settings)
        started.append(b)
        return b.start()

    yield make
    for b in started:
        b.kill()
