"""The log-side pieces of transactions: markers (control batches), open transactions in the
producer state (which bound the last stable offset) and the aborted-transaction index."""

from __future__ import annotations

import tempfile
from pathlib import Path

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log.producer_state import ProducerStateManager
from broker.log.txn_index import ENTRY_SIZE, AbortedTxn, TxnIndex
from broker.protocol.batch import ATTR_CONTROL, ATTR_TRANSACTIONAL, parse_header
from broker.protocol.control import ControlType, InvalidMarker, build_marker, read_marker
from broker.protocol.records import Record, build_batch
from tests.support.examples import examples


def txn_batch(pid: int, epoch: int, seq: int, offset: int, count: int = 2) -> bytes:
    records = [Record(offset + i, 1_000 + i, b"k", b"v") for i in range(count)]
    return build_batch(
        records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, attributes_extra=ATTR_TRANSACTIONAL
    )


# -- markers -------------------------------------------------------------------------------------


@pytest.mark.parametrize("control", list(ControlType))
def test_a_marker_round_trips_and_is_a_transactional_control_batch(control: ControlType) -> None:
    batch = build_marker(7, 3, control, coordinator_epoch=5, offset=42, timestamp=1_000)
    header = parse_header(batch)
    assert header.is_control
    assert header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, -1)
    assert read_marker(batch) == read_marker(memoryview(batch))
    marker = read_marker(batch)
    assert (marker.producer_id, marker.producer_epoch, marker.control) == (7, 3, control)
    assert (marker.coordinator_epoch, marker.offset) == (5, 42)


def test_a_data_batch_or_a_control_batch_of_another_kind_is_not_a_marker() -> None:
    with pytest.raises(InvalidMarker, match="not a transactional control batch"):
        read_marker(txn_batch(1, 0, 0, 0))
    # Control type 2 is LEADER_CHANGE in Kafka: a control record, not a transaction marker.
    record = Record(0, 0, b"\x00\x00\x00\x02", b"\x00\x00\x00\x00\x00\x00")
    other = build_batch([record], producer_id=1, attributes_extra=ATTR_TRANSACTIONAL | ATTR_CONTROL)
    with pytest.raises(InvalidMarker, match="type 2"):
        read_marker(other)


@settings(max_examples=examples(400), deadline=None)
@given(st.binary(max_size=200), st.integers(0, 120))
def test_any_corruption_of_a_marker_is_read_or_refused_with_invalidmarker(noise: bytes, at: int) -> None:
    batch = bytearray(build_marker(9, 1, ControlType.ABORT, coordinator_epoch=2, offset=100, timestamp=5))
    batch[at : at + len(noise)] = noise
    try:
        marker = read_marker(bytes(batch))
    except InvalidMarker:
        return
    assert marker.control in (ControlType.ABORT, ControlType.COMMIT)


# -- open transactions and the last stable offset ---------------------------------------------------


def test_an_open_transaction_bounds_the_lso_until_its_marker(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    assert state.first_unstable_offset() is None
    state.update(parse_header(txn_batch(1, 0, 0, 10)))
    state.update(parse_header(txn_batch(2, 0, 0, 12)))
    state.update(parse_header(txn_batch(1, 0, 2, 14)))  # a later batch of the same transaction
    assert state.first_unstable_offset() == 10
    assert state.end_transaction(1) == 10
    assert state.first_unstable_offset() == 12
    assert state.end_transaction(2) == 12
    assert state.first_unstable_offset() is None
    assert state.end_transaction(2) is None  # a marker for a partition the transaction never wrote


def test_a_bumped_epoch_keeps_the_open_transaction_for_the_coordinators_abort(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    state.update(parse_header(txn_batch(1, 0, 0, 10)))
    state.update(
        parse_header(build_marker(1, 1, ControlType.ABORT, coordinator_epoch=0, offset=12, timestamp=0))
    )  # fenced: epoch 1
    assert state.first_unstable_offset() == 10
    assert state.end_transaction(1) == 10


def test_a_producer_with_an_open_transaction_never_expires(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    state.update(parse_header(txn_batch(1, 0, 0, 10)))
    state.update(parse_header(build_batch([Record(20, 1_000, None, b"x")], producer_id=2, base_sequence=0)))
    state.expire(now_ms=10**12, expiration_ms=1)
    assert set(state.producers) == {1}


def test_open_transactions_survive_a_snapshot_and_old_snapshots_still_load(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    state.update(parse_header(txn_batch(1, 0, 0, 10)))
    state.write_snapshot(12)
    again = ProducerStateManager(tmp_path)
    assert again.load_snapshot(12) == 12
    assert again.first_unstable_offset() == 10

    (tmp_path / f"{20:020d}.snapshot").write_bytes(msgpack.packb([[3, 0, 5, [[0, 1, 15, 16, 5]]]]))
    old = ProducerStateManager(tmp_path)
    assert old.load_snapshot(20) == 20
    assert old.producers[3].txn_first_offset is None
    assert old.producers[3].last_seq == 1


# -- the aborted-transaction index ----------------------------------------------------------------------


def test_the_index_returns_the_aborts_a_fetch_range_overlaps_and_survives_a_reopen(tmp_path: Path) -> None:
    index = TxnIndex(tmp_path / "aborted.txnindex")
    index.append(AbortedTxn(1, 10, 20, 10))
    index.append(AbortedTxn(2, 15, 30, 15))
    index.append(AbortedTxn(3, 40, 41, 41))
    assert (tmp_path / "aborted.txnindex").stat().st_size == 3 * ENTRY_SIZE
    assert [e.producer_id for e in index.overlapping(0, 10)] == []
    assert [e.producer_id for e in index.overlapping(0, 11)] == [1]
    assert [e.producer_id for e in index.overlapping(21, 40)] == [2]
    assert [e.producer_id for e in index.overlapping(31, 100)] == [3]
    assert TxnIndex(tmp_path / "aborted.txnindex").entries == index.entries
    with pytest.raises(ValueError, match="not after"):
        index.append(AbortedTxn(4, 35, 41, 41))


def test_truncation_and_retention_drop_entries_durably(tmp_path: Path) -> None:
    path = tmp_path / "aborted.txnindex"
    index = TxnIndex(path)
    for i in range(5):
        index.append(AbortedTxn(i, i * 10, i * 10 + 5, i * 10))
    index.truncate_to(35)  # the log was cut at 35: the abort marked at 35 is gone
    assert index.last_offset == 25
    index.drop_before(16)
    assert [e.producer_id for e in TxnIndex(path).entries] == [2]


def test_a_torn_or_corrupt_tail_is_cut_off_on_open(tmp_path: Path) -> None:
    path = tmp_path / "aborted.txnindex"
    index = TxnIndex(path)
    index.append(AbortedTxn(1, 10, 20, 10))
    index.append(AbortedTxn(2, 25, 30, 25))
    with path.open("ab") as f:
        f.write(b"\x00\x00\x01")  # SIGKILL mid-write
    assert [e.producer_id for e in TxnIndex(path).entries] == [1, 2]
    assert path.stat().st_size == 2 * ENTRY_SIZE
    data = bytearray(path.read_bytes())
    data[ENTRY_SIZE] = 0x7F  # the second entry's version: garbage
    path.write_bytes(bytes(data))
    assert [e.producer_id for e in TxnIndex(path).entries] == [1]
    assert path.stat().st_size == ENTRY_SIZE


@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=6 * ENTRY_SIZE))
def test_any_index_file_opens_to_ordered_trusted_entries(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "aborted.txnindex"
        path.write_bytes(data)
        entries = TxnIndex(path).entries
        assert all(0 <= e.first_offset <= e.last_offset for e in entries)
        assert [e.last_offset for e in entries] == sorted({e.last_offset for e in entries})
        assert path.stat().st_size == len(entries) * ENTRY_SIZE
