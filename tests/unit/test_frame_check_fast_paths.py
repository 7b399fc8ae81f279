"""The frame check's inline reads of one-byte lengths and of an empty tag buffer
(broker/protocol/frame_check.py) decide exactly as the general varint reads they shortcut:
the same end position, or the same refusal, for every first byte and every room left."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from broker.protocol.frame_check import (
    Budget,
    FrameError,
    _compact_bytes_check,
    _length,
    _need,
    _tag_buffer_check,
    read_uvarint,
)

WHAT = "T.f"


def _general_compact_bytes(nullable: bool) -> Callable[[Any, int, int, Budget], int]:
    """A flexible string or bytes field checked by the general reads, as before the shortcut."""

    def check(buf: Any, pos: int, end: int, budget: Budget) -> int:
        n, pos = _length(buf, pos, end, flexible=True, wide=False, what=WHAT)
        if n < 0:
            if not nullable:
                raise FrameError(f"{WHAT}: null in a non-nullable field")
            return pos
        return _need(pos, n, end, WHAT)

    return check


def _outcome(check: Callable[[Any, int, int, Budget], int], buf: Any, pos: int, end: int) -> int | str:
    try:
        return check(buf, pos, end, Budget(100))
    except FrameError as e:
        return f"FrameError: {e}"


def _buffers() -> list[tuple[bytes, int, int]]:
    """(buffer, pos, end): every first byte (one-byte lengths, null, varint continuations)
    followed by as many bytes as it declares, fewer and more, read from 0 and from 3, and at
    or past the end."""
    out = []
    for first in range(256):
        for rest in (b"", b"\x01", b"\x80\x01", bytes(first), bytes(max(first - 2, 0)), bytes(first + 200)):
            body = bytes([first]) + rest
            out.append((body, 0, len(body)))
            out.append((b"pad" + body, 3, 3 + len(body)))
            out.append((body, len(body), len(body)))  # nothing left
    out.append((b"\xff\xff\xff\xff\xff\x01", 0, 6))  # a varint longer than 5 bytes
    out.append((b"\xff\xff\xff\xff\x1f", 0, 5))  # out of range
    return out


@pytest.mark.parametrize("nullable", [True, False])
def test_compact_length_shortcut_agrees_with_the_varint_read(nullable: bool) -> None:
    fast = _compact_bytes_check(nullable, WHAT)
    general = _general_compact_bytes(nullable)
    for buf, pos, end in _buffers():
        view = memoryview(buf).toreadonly()  # as the broker hands it a frame
        assert _outcome(fast, view, pos, end) == _outcome(general, view, pos, end), (buf, pos, end)


def test_empty_tag_buffer_shortcut_agrees_with_the_varint_read() -> None:
    inner = _tag_buffer_check({}, "T")

    def count_only(buf: Any, pos: int, end: int, budget: Budget) -> int:
        """The general read of the count, for an empty buffer all the check does."""
        count, pos = read_uvarint(buf, pos, end, "T tagged fields")
        return pos if count == 0 else -1

    for buf, pos, end in _buffers():
        view = memoryview(buf).toreadonly()
        general = _outcome(count_only, view, pos, end)
        if general != -1:  # tags present take the general path, checked by test_frame_check.py
            assert _outcome(inner, view, pos, end) == general, (buf, pos, end)
