"""Fixtures shared by several unit test modules: a real MetadataStore in a temporary directory
and the consumer group Harness over it (the consumer group protocol's tests), and the share
coordinator's Env (the share groups' tests)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.clock import ManualClock
from broker.config import BrokerConfig
from broker.metadata import MetadataStore
from tests.support.consumer_group_harness import Harness
from tests.support.share_coordinator import Env


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MetadataStore]:
    s = MetadataStore(BrokerConfig(data_dir=tmp_path), ManualClock(), recover=False)
    yield s
    s.close(clean=True)


@pytest.fixture
def h(store: MetadataStore) -> Harness:
    return Harness(store)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    e.store.close(clean=True)
