"""A bounded pass of the network fuzzer (`python -m loadtest.fuzz_broker` runs longer): 20,000
mutated requests of every advertised API and version against a broker process, while a
control client's acks=all keyed records must all come back exactly once, in order."""

from __future__ import annotations

import pytest

from loadtest.fuzz_broker import run

pytestmark = pytest.mark.fuzz


def test_20000_mutated_frames_neither_crash_the_broker_nor_cost_an_acknowledged_record() -> None:
    report = run(frames=20_000, seconds=0, connections=8, seed=20261125)  # bounded by frames, not time
    print("\n".join(report.lines()))
    assert report.frames == 20_000
    assert report.apis >= 20
    assert report.recorded_apis >= 25  # every connection of the clients went through the recorder
    assert {68, 69} <= set(report.recorded_keys)  # the consumer group protocol's, from a real member
    assert {76, 77, 78, 79, 90, 91, 92} <= set(report.recorded_keys)  # share groups', a ShareConsumer and by hand
    assert report.broker_exits == 0
    assert report.answers_after
    assert report.acknowledged > 1_000
    assert report.control_problems == []
    assert report.closed_by_broker > 1_000  # the mutations do reach the decoder
    assert report.tracebacks <= 10  # failures are logged once per place, not per frame
    assert report.loop_lag_ms is not None  # read from the broker's lag histogram, printed above
