"""Differential fuzz target (atheris, libFuzzer) for produce-time validation's record walk: the
compiled walk (broker/protocol/_recordwalk.c) must accept exactly the records the Python walk
accepts, for an uncompressed batch (`check_records`) and a compressed payload's framing
(`frame_records`), with and without keys required.  A disagreement is a finding.

    python -m loadtest.fuzz_record_walk [libFuzzer flags, e.g. -runs=1000000 CORPUS_DIR]

An input is one byte of options (bit 0: keys required), one signed byte of record count, and
the records section of a batch.  Without a corpus directory it starts from valid batches of
the shapes the walk reads differently (varints of one, two and more bytes; null keys and values;
headers, one with a key that is not UTF-8).
"""

from __future__ import annotations

import os
import sys
import tempfile

import atheris

with atheris.instrument_imports(include=["broker"]):
    from broker.protocol import record_walk
    from broker.protocol.batch import HEADER_SIZE, InvalidBatch
    from broker.protocol.records import Record, build_batch

_compiled = record_walk._compiled


def _python_accepts(walk: record_walk.Walk, data: bytes, count: int, need_keys: bool) -> bool:
    try:
        walk(data, count, need_keys=need_keys)
    except InvalidBatch:
        return False
    return True


def one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    need_keys = bool(data[0] & 1)
    count = int.from_bytes(data[1:2], "big", signed=True)
    records = data[2:]
    for name, walk in (
        ("check_records", record_walk.python_check_records),
        ("frame_records", record_walk.python_frame_records),
    ):
        expected = _python_accepts(walk, records, count, need_keys)
        if getattr(_compiled, name)(records, count, need_keys) != expected:
            raise AssertionError(f"{name}: the compiled walk says {not expected}, the Python walk {expected}")


def seeds() -> list[bytes]:
    """Valid records sections, each as an input: options byte, count byte, records."""
    big = bytes(range(256)) * 40  # a value over 8 KiB: three-byte length varints
    shapes = [
        [Record(0, 0, b"k", b"v")],
        [Record(0, 0, None, None), Record(1, 1 << 40, b"", b"x" * 70)],
        [Record(i, i, b"key-%d" % i, big[: 64 * i]) for i in range(5)],
        [Record(0, 0, b"k" * 200, big, (("trace-id", b"1"), ("é", None), ("h" * 70, b"v" * 9000)))],
        [Record(0, -5, b"k", b"v", (("a", b"b"),)), Record(70, 0, b"k", None)],
    ]
    out = []
    for records in shapes:
        body = build_batch(records)[HEADER_SIZE:]
        out += [bytes([keys, len(records)]) + body for keys in (0, 1)]
    bad_key = bytearray(build_batch([Record(0, 0, b"k", b"v", (("ab", b"v"),))])[HEADER_SIZE:])
    bad_key[bad_key.index(b"ab")] = 0xFF  # a header key that is not UTF-8
    out.append(bytes([0, 1]) + bytes(bad_key))
    return out


def _seed_corpus() -> str:
    directory = tempfile.mkdtemp(prefix="fuzz-record-walk-corpus-")
    for i, seed in enumerate(seeds()):
        with open(os.path.join(directory, f"seed-{i}"), "wb") as f:
            f.write(seed)
    return directory


def main() -> None:
    if _compiled is None:
        sys.exit("the compiled record walk is not built: reinstall the package with a C compiler")
    argv = list(sys.argv)
    if not any(not a.startswith("-") for a in argv[1:]):
        argv.append(_seed_corpus())
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
