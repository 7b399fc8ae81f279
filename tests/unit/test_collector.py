"""The cyclic collector is off while a large request is served, back on after the last one,
and never left off by a pause that did not turn it off."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from broker.collector import CollectorPause


@pytest.fixture(autouse=True)
def _collector_restored() -> Iterator[None]:
    enabled = gc.isenabled()
    yield
    if enabled:
        gc.enable()


def test_the_collector_is_off_from_the_first_large_request_to_the_end_of_the_last() -> None:
    gc.enable()
    pause = CollectorPause()
    with pause.held():
        assert not gc.isenabled()
        with pause.held():
            assert not gc.isenabled()
        assert not gc.isenabled()  # one is still in flight
    assert gc.isenabled()
    assert pause.in_flight == 0


def test_a_collector_someone_else_turned_off_stays_off() -> None:
    gc.disable()
    pause = CollectorPause()
    with pause.held():
        pass
    assert not gc.isenabled()


def test_a_pause_kept_up_too_long_by_overlapping_requests_runs_a_full_collection() -> None:
    gc.enable()
    pause = CollectorPause(max_pause=0.0)
    with pause.held():
        cycle: list[object] = []
        cycle.append(cycle)  # garbage only the collector frees
        del cycle
        before = gc.get_stats()[2]["collections"]
        with pause.held():  # the pause has lasted longer than max_pause
            assert gc.get_stats()[2]["collections"] == before + 1
    assert pause.forced == 1
    assert gc.isenabled()


def test_an_exception_in_the_request_still_turns_the_collector_back_on() -> None:
    gc.enable()
    pause = CollectorPause()
    with pytest.raises(RuntimeError), pause.held():
        raise RuntimeError("the handler failed")
    assert gc.isenabled()
