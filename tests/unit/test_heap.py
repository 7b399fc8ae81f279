"""The heap trimmer: freed memory is handed back once enough connections have closed."""

from __future__ import annotations

import platform

from broker.heap import HeapTrimmer


def test_trims_once_enough_connections_have_closed_then_counts_afresh() -> None:
    trimmer = HeapTrimmer(closes_per_trim=3)
    for _ in range(2):
        trimmer.connection_closed()
    assert not trimmer.maybe_trim()
    trimmer.connection_closed()
    trimmed = trimmer.maybe_trim()
    if platform.libc_ver()[0] == "glibc":
        assert trimmed
        assert trimmer.trims == 1
        assert trimmer.closed == 0
        assert not trimmer.maybe_trim()  # nothing closed since
    else:
        assert not trimmed  # no malloc_trim to call
