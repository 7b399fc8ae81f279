from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from registry.app import RunningRegistry
from tests.support.harness import BrokerProcess, ThreadBroker
from tests.support.registry import registry


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
async def running_registry(broker: ThreadBroker) -> AsyncIterator[RunningRegistry]:
    """A real schema registry, in-process on the test's loop, storing in `broker`."""
    async with registry(broker.bootstrap) as running:
        yield running


@pytest.fixture
def broker_process_factory(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """Start `streamshop broker` child processes (killed at teardown)."""
    started: list[BrokerProcess] = []

    def make(settings: dict[str, str] | None = None, name: str = "broker", nofile: int | None = None) -> BrokerProcess:
        b = BrokerProcess(tmp_path / name, settings, nofile=nofile)
        started.append(b)
        return b.start()

    yield make
    for b in started:
        b.kill()
