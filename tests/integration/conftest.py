"""Fixtures shared by several integration test modules: a broker with a topic of seeded records
and a bystander connection (the bad-input tests)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.bad_input import Stored, seed
from tests.support.harness import ThreadBroker


@pytest.fixture
def stored(broker: ThreadBroker) -> Iterator[Stored]:
    s = seed(broker)
    try:
        yield s
    finally:
        s.bystander.close()
