"""Fixtures shared by several unit test modules."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.clock import ManualClock
from broker.config import BrokerConfig
from broker.metadata import MetadataStore
from tests.support.consumer_group_harness import Harness


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MetadataStore]:
    s = MetadataStore(BrokerConfig(data_dir=tmp_path), ManualClock(), recover=False)
    yield s
    s.close(clean=True)


@pytest.fixture
def h(store: MetadataStore) -> Harness:
    return Harness(store)
