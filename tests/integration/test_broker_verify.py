"""`streamshop broker verify` checks a data directory as kafka-dump-log's
--verify-index-only and --deep-iteration do: clean data passes, each kind of damage is
reported with where it is, and the exit status says which."""

from __future__ import annotations

import struct
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from tests.integration.test_cli import cli
from tests.support.harness import BrokerProcess
from tests.support.kafka_wire import batch, connect


def test_verify_passes_clean_data_and_reports_a_flipped_byte_and_a_shifted_index_entry(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    proc = broker_process_factory({"log.segment.bytes": "20000", "log.index.interval.bytes": "512"})
    with connect(proc.bootstrap) as c:
        assert c.create_topic("audit", 2).error_code == ErrorCode.none
        for i in range(150):
            values = [f"{i}-{j}".encode() * 20 for j in range(4)]
            assert c.produce("audit", i % 2, batch(values, compression=1 if i % 3 == 0 else 0)).error_code == 0
    assert proc.stop() == 0

    clean = cli("broker", "verify", "--data-dir", str(proc.data_dir), "--deep")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert clean.stdout.strip().endswith("(records decoded): 0 problems")
    assert "3 partitions" in clean.stdout  # and the metadata log
    assert "601 records" in clean.stdout  # 600 and the topic's metadata record

    partition = proc.data_dir / "audit-0"
    first = partition / f"{0:020d}.log"
    data = bytearray(first.read_bytes())
    data[400] ^= 0x01  # inside the records of an early batch
    first.write_bytes(bytes(data))
    index = partition / f"{0:020d}.index"
    entries = bytearray(index.read_bytes())
    rel, pos = struct.unpack_from(">II", entries, 8)
    struct.pack_into(">II", entries, 8, rel, pos + 5)
    index.write_bytes(bytes(entries))

    damaged = cli("broker", "verify", "--data-dir", str(proc.data_dir))
    assert damaged.returncode == 1
    lines = damaged.stdout.splitlines()
    assert any(line.startswith(f"audit-0/{first.name}: position ") and "CRC mismatch" in line for line in lines)
    assert any(f"audit-0/{index.name}: offset {rel} -> position {pos + 5}" in line for line in lines)
    assert not any(line.startswith("audit-1/") for line in lines)
    assert lines[-1].endswith("2 problems")

    assert cli("broker", "verify", "--data-dir", str(proc.data_dir / "missing")).returncode == 2


def test_a_clean_stop_verifies_clean_with_empty_segments_that_have_no_index_files(
    broker_process_factory: Callable[..., BrokerProcess],
) -> None:
    """Partitions never written to (and a segment rolled but not yet written) hold empty
    segments without index files: that is how the writer leaves them, not damage.  A segment
    with records whose index is gone is still reported."""
    proc = broker_process_factory()
    with connect(proc.bootstrap) as c:
        assert c.create_topic("sparse", 4).error_code == ErrorCode.none
        assert c.produce("sparse", 0, batch([b"only partition 0"])).error_code == 0
    assert proc.stop() == 0
    empty = [p for p in (proc.data_dir / f"sparse-{i}" for i in range(1, 4)) if (p / f"{0:020d}.log").exists()]
    assert empty
    assert not any((p / f"{0:020d}.index").exists() for p in empty)

    clean = cli("broker", "verify", "--data-dir", str(proc.data_dir))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert clean.stdout.strip().endswith(": 0 problems")

    (proc.data_dir / "sparse-0" / f"{0:020d}.index").unlink()
    damaged = cli("broker", "verify", "--data-dir", str(proc.data_dir))
    assert damaged.returncode == 1
    assert f"sparse-0/{0:020d}.index: missing" in damaged.stdout
