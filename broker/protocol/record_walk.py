"""Produce-time validation walks a batch's records without decoding them: `check_records` reads
an uncompressed batch's records field by field, `frame_records` a compressed payload's lengths.

Both run for every batch produced, once per record, so each first asks the compiled walk
(`_recordwalk`, built from _recordwalk.c when the package is installed), which answers only
whether the Python walk below would accept the records.  When it would not, the Python walk
runs and raises the error with its message, so the messages are worded in one place.  Without
a C compiler at install time the Python walk does all the work, some forty times slower per
record; `COMPILED` says which.  The Python walk is the reference the compiled one is tested
against, input for input.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import TypeAlias

from broker.protocol.batch import InvalidBatch

_compiled: ModuleType | None
try:
    _compiled = importlib.import_module("broker.protocol._recordwalk")
except ImportError:  # built without a C compiler: the Python walk alone
    _compiled = None

COMPILED = _compiled is not None
Buffer: TypeAlias = bytes | bytearray | memoryview  # the compiled walk reads it in place
Walk: TypeAlias = Callable[..., None]  # python_check_records, python_frame_records


def check_records(data: Buffer, count: int, *, need_keys: bool) -> None:
    """Every record's fields must add up to its length, the records must number `count` and
    fill `data` exactly, header keys must be UTF-8, and with `need_keys` each record needs a
    key.  Raises InvalidBatch ("corrupt", or "invalid" for a missing key)."""
    if _compiled is None or not _compiled.check_records(data, count, need_keys):
        python_check_records(bytes(data), count, need_keys=need_keys)


def frame_records(data: Buffer, count: int, *, need_keys: bool) -> None:
    """The records' lengths must frame `data` exactly and number `count`; with `need_keys`,
    each must have a key.  Raises InvalidBatch.  (What a compressed batch's payload gets.)"""
    if _compiled is None or not _compiled.frame_records(data, count, need_keys):
        python_frame_records(bytes(data), count, need_keys=need_keys)


# --- the Python walk ----------------------------------------------------------------------
#
# It indexes a `bytes` copy of the records (several times cheaper than a memoryview) and
# decodes the one- and two-byte varints inline.  A read past the end raises IndexError, which
# means a truncated record.


_FAR = 1 << 62  # a position past any batch: the record goes to the general reader


def _keyless() -> InvalidBatch:
    return InvalidBatch("invalid", "a compacted topic cannot accept a record without a key")


def _walk_varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint of at most 10 bytes; IndexError when it runs past the data."""
    raw = shift = 0
    while True:
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise InvalidBatch("corrupt", "varint too long in a record: the batch is corrupt")


def _check_record(data: bytes, pos: int, index: int, need_keys: bool) -> int:
    """Read one record field by field, as a consumer does; returns where the next starts.

    Record: length, attributes (one byte), timestamp delta, offset delta, key, value (each
    a varint length, negative for null, then the bytes), header count, and per header a key
    (never null, UTF-8) and a value."""
    try:
        length, start = _walk_varint(data, pos)
        if data[start] & 0x80:
            # One byte, unused in v2, that Kafka reads as an int8; Python clients read it as a
            # varint, and would read the rest of such a record wrong.
            raise InvalidBatch("corrupt", f"record {index} has attributes {data[start]:#x}: the batch is corrupt")
        p = start + 1
        _, p = _walk_varint(data, p)  # timestamp delta
        _, p = _walk_varint(data, p)  # offset delta
        key_length, p = _walk_varint(data, p)
        p += max(key_length, 0)
        value_length, p = _walk_varint(data, p)
        p += max(value_length, 0)
        count, p = _walk_varint(data, p)
        if count < 0:
            raise InvalidBatch("corrupt", f"record {index} has {count} headers: the batch is corrupt")
        for _ in range(count):
            size, p = _walk_varint(data, p)
            if size < 0:
                raise InvalidBatch("corrupt", f"record {index} has a header key of size {size}: the batch is corrupt")
            if p + size > len(data):
                raise IndexError
            data[p : p + size].decode()  # a consumer decodes header keys: they must be UTF-8
            p += size
            size, p = _walk_varint(data, p)
            p += max(size, 0)
        if p > len(data):
            raise IndexError
    except IndexError:
        raise InvalidBatch("corrupt", f"record {index} runs past the end of the batch") from None
    except UnicodeDecodeError:
        raise InvalidBatch("corrupt", f"record {index} has a header key that is not UTF-8") from None
    if p - start != length:
        raise InvalidBatch(
            "corrupt", f"record {index} claims {length} bytes but its fields take {p - start}: the batch is corrupt"
        )
    if need_keys and key_length < 0:
        raise _keyless()
    return p


def python_check_records(data: bytes, count: int, *, need_keys: bool) -> None:
    """`check_records` in Python.

    The loop reads the common shape of a record inline: every varint of one or two bytes,
    a key under 64 bytes.  Any other record, a malformed one included, is read again by
    `_check_record`, which reads every shape and says what is wrong.  (A read past the end,
    IndexError, sends the record there too; so does a position set past any batch, `_FAR`.)"""
    pos, end = 0, len(data)
    null_key = -1 if need_keys else 1  # the key length byte of a null key, when that is fine
    for index in range(count):
        try:
            b = data[pos]  # record length
            if b < 0x80:
                p = pos + 1
                stop = p + (b >> 1)
            else:
                c = data[pos + 1]
                p = pos + 2
                stop = p + ((c << 6) | ((b & 0x7F) >> 1))
                if c >= 0x80:
                    b = 1  # three bytes or more
            if not b & 1:  # (a negative length has the low bit set)
                # attributes (one byte, below 0x80: see `_check_record`) and the timestamp
                # delta, then the offset delta
                if data[p] & 0x80:
                    p = _FAR
                p += 2 if data[p + 1] < 0x80 else 3 if data[p + 2] < 0x80 else _FAR
                p += 1 if data[p] < 0x80 else 2 if data[p + 1] < 0x80 else _FAR
                b = data[p]  # key length
                if b < 0x80 and not b & 1:
                    p += 1 + (b >> 1)
                else:
                    p += 1 if b == null_key else _FAR
                b = data[p]  # value length
                if b < 0x80:
                    p += 1 if b & 1 else 1 + (b >> 1)
                else:
                    c = data[p + 1]
                    p += (2 if b & 1 else 2 + ((c << 6) | ((b & 0x7F) >> 1))) if c < 0x80 else _FAR
                b = data[p]  # header count
                if not b:
                    if p + 1 == stop:
                        pos = stop
                        continue
                elif b < 0x80 and not b & 1 and _headers(data, p + 1, b >> 1) == stop <= end:
                    pos = stop
                    continue
        except (IndexError, UnicodeDecodeError):
            pass
        pos = _check_record(data, pos, index, need_keys)
    if pos != end:
        raise InvalidBatch("corrupt", f"{end - pos} bytes follow the batch's {count} records")


def _headers(data: bytes, p: int, count: int) -> int:
    """`python_check_records`' inline reading of `count` headers whose keys are under 64 bytes and
    values under 8 KiB; where they end, or _FAR for any other shape."""
    for _ in range(count):
        b = data[p]  # key length: never null
        if b & 0x81:
            return _FAR
        p += 1 + (b >> 1)
        data[p - (b >> 1) : p].decode()  # UnicodeDecodeError: the general reader says so
        b = data[p]  # value length
        if b < 0x80:
            p += 1 if b & 1 else 1 + (b >> 1)
        else:
            c = data[p + 1]
            if c >= 0x80:
                return _FAR
            p += 2 if b & 1 else 2 + ((c << 6) | ((b & 0x7F) >> 1))
    return p


def python_frame_records(data: bytes, count: int, *, need_keys: bool) -> None:
    """`frame_records` in Python."""
    pos, end, seen = 0, len(data), 0
    while pos < end:
        b = data[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        elif pos + 1 < end and data[pos + 1] < 0x80:
            raw = (b & 0x7F) | (data[pos + 1] << 7)
            length = (raw >> 1) ^ -(raw & 1)
            pos += 2
        else:
            length, pos = _bounded_varint(data, pos, end)
        if length <= 0 or length > end - pos:
            raise InvalidBatch("corrupt", f"record {seen} has length {length}: the batch is corrupt")
        if need_keys:
            field = pos + 1  # attributes
            _, field = _bounded_varint(data, field, pos + length)  # timestamp delta
            _, field = _bounded_varint(data, field, pos + length)  # offset delta
            key_length, _ = _bounded_varint(data, field, pos + length)
            if key_length < 0:
                raise _keyless()
        pos += length
        seen += 1
    if seen != count:
        raise InvalidBatch("corrupt", f"the batch holds {seen} records, its header says {count}")


def _bounded_varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """A zigzag varint of at most 10 bytes that must end before `end`."""
    raw = shift = 0
    while True:
        if pos >= end:
            raise InvalidBatch("corrupt", "truncated varint in a record: the batch is corrupt")
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise InvalidBatch("corrupt", "varint too long in a record: the batch is corrupt")
