"""The analytics job's start line (kit.start_phases): what the job prints before its ready line
and what `loadtest.bench_demo_start` reads back from the job's log, through one parser."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from analytics.runner import START_LINE
from kit.start_phases import StartPhases, format_line, last_line, parse_line, process_age
from streamshop.stack.plan import CHILDREN

ANALYTICS = next(c for c in CHILDREN if c.name == "analytics")
READY = "streamshop analytics ready: jobs orders,otp,logs, group analytics, data d, results topic r, trigger 5 s"


def _clock() -> StartPhases:
    clock = StartPhases(100.0, process_start=False)
    clock.mark("imports", at=101.2)
    clock.mark("settings", at=101.3)
    clock.mark("topics", at=102.0)
    clock.mark("spark launch", at=104.0)
    clock.mark("jvm start", at=106.5)
    clock.mark("spark context", at=110.0)
    clock.mark("query orders started", at=113.0)
    clock.mark("query orders first batch", at=121.8)
    return clock


def test_the_job_prints_each_phase_from_the_end_of_the_one_before_and_the_bench_reads_them_back() -> None:
    line = _clock().line(START_LINE)
    assert line == (
        "streamshop analytics start: imports 1.2 s, settings 0.1 s, topics 0.7 s, spark launch 2.0 s, "
        "jvm start 2.5 s, spark context 3.5 s, query orders started 3.0 s, query orders first batch 8.8 s, "
        "total 21.8 s"
    )
    assert list((parse_line(START_LINE, line) or {}).items()) == [
        ("imports", 1.2),
        ("settings", 0.1),
        ("topics", 0.7),
        ("spark launch", 2.0),
        ("jvm start", 2.5),
        ("spark context", 3.5),
        ("query orders started", 3.0),
        ("query orders first batch", 8.8),
        ("total", 21.8),
    ]


def test_a_phase_marked_again_adds_up_and_time_never_runs_backwards() -> None:
    clock = StartPhases(0.0, process_start=False)
    clock.mark("query orders failed starts", at=12.0)
    clock.mark("query orders started", at=13.0)
    clock.mark("query orders failed starts", at=20.0)
    clock.mark("spark launch", at=19.0)  # a time before the last phase's end: an empty phase
    assert clock.phases == {"query orders failed starts": 19.0, "query orders started": 1.0, "spark launch": 0.0}
    assert clock.total == 20.0


def test_the_bench_takes_the_last_start_of_a_job_started_again() -> None:
    first = format_line(START_LINE, {"imports": 2.0, "total": 40.0})
    again = _clock().line(START_LINE)
    batch = "analytics orders batch 0: 20 records, 8 metric values, 0 quarantined, 0 late, lag 0 (1.00 s)"
    stopped = "analytics orders: stopped after 1 batch(es), generation 1, lag 0"
    log = "\n".join([first, READY, batch, stopped, again, READY, ""])
    assert last_line(START_LINE, log) == parse_line(START_LINE, again)
    assert last_line(START_LINE, READY + "\n") is None


def test_no_other_line_is_a_start_line_and_the_start_line_is_no_ready_line() -> None:
    start = _clock().line(START_LINE)
    assert parse_line(START_LINE, READY) is None
    assert parse_line(START_LINE, "streamshop analytics start: imports fast") is None
    assert parse_line(START_LINE, "streamshop analytics start: imports 1.2 s; topics 0.3 s") is None
    assert parse_line("streamshop broker start", start) is None
    with pytest.raises(ValueError, match="words of letters"):
        format_line(START_LINE, {"query orders,otp started": 1.0})
    # `streamshop up` takes the job as ready on its ready line only.
    assert ANALYTICS.parse_ready(start) is None
    assert ANALYTICS.parse_ready(READY) is not None


def test_python_is_the_time_from_the_process_start_to_the_stamp(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    ticks = os.sysconf("SC_CLK_TCK")
    started = int((time.clock_gettime(time.CLOCK_BOOTTIME) - 5) * ticks)
    # The command name may hold spaces and parentheses: the fields are counted after its end.
    stat.write_text(f"42 (a) b (c) S 1 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 {started} 1 1\n")
    assert process_age(stat) == pytest.approx(5.0, abs=0.5)
    stat.write_text("42 (a) S 1")
    assert process_age(stat) is None
    assert process_age(tmp_path / "absent") is None

    stamp = time.monotonic()
    clock = StartPhases(stamp)
    age = process_age()
    assert age is not None
    python = clock.phases["python"]
    assert 0 < python <= age
    clock.mark("imports")
    assert clock.total == pytest.approx(python + clock.phases["imports"])
