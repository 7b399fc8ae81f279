"""Where a parallel run's time goes, printed after pytest's slowest durations: each xdist group's
total (setup, call and teardown of its tests, which `--dist loadgroup` runs one after the other on
one worker), each worker's busy time, and the test modules that took most.  The run lasts at
least as long as its longest group and its busiest worker: those are what to shorten, not the
single slowest test.

Reports reach the controller with the group in the node id (``path::test@group``) and the worker
that ran them; in a run without workers everything is one worker and groups are still summed."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

__all__ = ["Timeline"]

SHOWN = 12  # groups (and modules) listed; the rest summed in one line


class Timeline:
    """A pytest plugin: registered by tests/conftest.py on the controller (or a run without xdist)."""

    def __init__(self) -> None:
        self.by_group: defaultdict[str, float] = defaultdict(float)
        self.tests_by_group: Counter[str] = Counter()
        self.by_worker: defaultdict[str, float] = defaultdict(float)
        self.by_module: defaultdict[str, float] = defaultdict(float)
        self.tests_by_module: Counter[str] = Counter()

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        _, at, group = report.nodeid.rpartition("@")
        # A parameter may hold an "@" too (an e-mail address): a group name has no "]" or "::".
        group = group if at and "::" not in group and "]" not in group else "(no group)"
        self.by_group[group] += report.duration
        if report.when == "call":
            self.tests_by_group[group] += 1
        node = getattr(report, "node", None)
        worker = getattr(getattr(node, "gateway", None), "id", None) or "main"
        self.by_worker[str(worker)] += report.duration
        module = report.nodeid.partition("::")[0]
        self.by_module[module] += report.duration
        if report.when == "call":
            self.tests_by_module[module] += 1

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.by_group:
            return
        terminalreporter.write_sep("=", "time by xdist group (each runs on one worker) and by worker")
        _ranked(terminalreporter, self.by_group, self.tests_by_group, "other groups")
        busy = ", ".join(f"{w} {s / 60:.1f} min" for w, s in sorted(self.by_worker.items()))
        terminalreporter.write_line(f"busy: {busy}")
        terminalreporter.write_sep("-", "time by test module")
        _ranked(terminalreporter, self.by_module, self.tests_by_module, "other modules")


def _ranked(reporter: pytest.TerminalReporter, seconds: dict[str, float], tests: Counter[str], others: str) -> None:
    """The SHOWN largest of `seconds` a line each, then the rest summed in one line."""
    ranked = sorted(seconds.items(), key=lambda item: -item[1])
    for name, spent in ranked[:SHOWN]:
        reporter.write_line(f"{spent / 60:7.1f} min  {tests[name]:5d} tests  {name}")
    rest = ranked[SHOWN:]
    if rest:
        spent = sum(s for _, s in rest)
        count = sum(tests[n] for n, _ in rest)
        reporter.write_line(f"{spent / 60:7.1f} min  {count:5d} tests  {len(rest)} {others}")
