"""Transactions in a partition's log: markers end transactions, the last stable offset follows
the oldest open one, aborts are indexed, reads stop at the LSO; all of it comes back after an
unclean stop (even with the index's tail lost), and compaction keeps markers and drops aborted
records without letting them win over committed values."""

from __future__ import annotations

import pytest

from broker.log.cleaner import clean
from broker.log.partition_log import TXN_INDEX, PartitionLog
from broker.protocol.batch import ATTR_CONTROL, ATTR_TRANSACTIONAL, iter_headers
from broker.protocol.control import ControlType, build_marker
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import Record, build_batch, decode_records
from tests.support.logs import START_MS, environment


def txn(pid: int, seq: int, *values: bytes, key: bytes = b"k", epoch: int = 0) -> bytes:
    records = [Record(i, START_MS, key, v) for i, v in enumerate(values)]
    return build_batch(
        records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, attributes_extra=ATTR_TRANSACTIONAL
    )


def plain(*values: bytes, key: bytes = b"k") -> bytes:
    return build_batch([Record(i, START_MS, key, v) for i, v in enumerate(values)])


def values(data: bytes) -> list[bytes | None]:
    out: list[bytes | None] = []
    for pos, header in iter_headers(data):
        if not header.is_control:
            out.extend(r.value for r in decode_records(data[pos : pos + header.size])[1])
    return out


def test_markers_move_the_last_stable_offset_and_index_aborts() -> None:
    with environment({}) as env:
        log = env.open()
        log.append(txn(1, 0, b"a0", b"a1"))  # 0-1, producer 1 opens
        log.append(plain(b"p"))  # 2
        log.append(txn(2, 0, b"b0"))  # 3, producer 2 opens
        assert log.last_stable_offset == 0
        assert log.read(0, 1 << 20, upper=log.last_stable_offset) == b""
        log.append_marker(1, 0, ControlType.ABORT, coordinator_epoch=0)  # 4
        assert log.last_stable_offset == 3  # producer 2's transaction is still open
        assert values(log.read(0, 1 << 20, upper=log.last_stable_offset)) == [b"a0", b"a1", b"p"]
        [aborted] = log.txn_index.entries
        assert (aborted.producer_id, aborted.first_offset, aborted.last_offset, aborted.last_stable_offset) == (
            1,
            0,
            4,
            3,
        )
        log.append_marker(2, 0, ControlType.COMMIT, coordinator_epoch=0)  # 5
        assert log.last_stable_offset == log.high_watermark == 6
        assert len(log.txn_index.entries) == 1  # commits are not indexed
        assert [(a.producer_id, a.first_offset) for a in log.aborted_transactions(2, 6)] == [(1, 0)]
        assert log.aborted_transactions(5, 6) == []
        # A marker with an older epoch than the partition knows is refused, as in Kafka.
        log.append(txn(3, 0, b"c", epoch=4))
        with pytest.raises(KafkaError) as refused:
            log.append_marker(3, 3, ControlType.ABORT, coordinator_epoch=0)
        assert refused.value.code == ErrorCode.invalid_producer_epoch


def test_clients_cannot_write_control_batches_or_transactional_batches_without_a_producer() -> None:
    with environment({}) as env:
        log = env.open()
        marker = build_marker(1, 0, ControlType.COMMIT, coordinator_epoch=0, offset=0, timestamp=START_MS)
        no_producer = build_batch([Record(0, START_MS, b"k", b"v")], attributes_extra=ATTR_TRANSACTIONAL)
        control = build_batch(
            [Record(0, START_MS, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],
            producer_id=1,
            attributes_extra=ATTR_TRANSACTIONAL | ATTR_CONTROL,
        )
        for batch in (marker, no_producer, control):
            with pytest.raises(KafkaError) as refused:
                log.append(batch)
            assert refused.value.code == ErrorCode.invalid_record
        assert log.next_offset == 0


@pytest.mark.parametrize("lose_index_tail", [False, True])
def test_open_and_aborted_transactions_survive_an_unclean_stop(lose_index_tail: bool) -> None:
    with environment({}) as env:
        log = env.open()
        log.append(txn(1, 0, b"a"))  # 0
        log.roll()  # a snapshot at 1 holds producer 1's open transaction
        log.append(txn(2, 0, b"b"))  # 1
        log.append_marker(1, 0, ControlType.ABORT, coordinator_epoch=0)  # 2
        log.append(txn(3, 0, b"c"))  # 3, left open
        before = (log.last_stable_offset, list(log.txn_index.entries))
        for segment in log.segments:
            segment.close()  # no clean close: no snapshot at the end
        if lose_index_tail:
            index = env.directory / TXN_INDEX
            index.write_bytes(index.read_bytes()[:-5])  # a torn last entry
        again = env.open(recover=True)
        assert (again.last_stable_offset, list(again.txn_index.entries)) == before
        assert again.last_stable_offset == 1
        again.append_marker(2, 0, ControlType.COMMIT, coordinator_epoch=0)  # 4
        again.append_marker(3, 0, ControlType.ABORT, coordinator_epoch=0)  # 5
        assert again.last_stable_offset == again.high_watermark == 6
        assert [(a.producer_id, a.first_offset) for a in again.txn_index.entries] == [(1, 0), (3, 3)]
        again.close(clean=True)


def test_retention_forgets_aborts_before_the_log_start() -> None:
    with environment({}) as env:
        log = env.open()
        log.append(txn(1, 0, b"a"))
        log.append_marker(1, 0, ControlType.ABORT, coordinator_epoch=0)
        log.append(plain(b"p"))
        log.delete_records(2)
        assert log.txn_index.entries == []
        assert PartitionLog(env.directory, "t", 0, env.config, env.clock, recover=True).txn_index.entries == []


def test_compaction_keeps_markers_and_never_lets_an_aborted_value_win() -> None:
    with environment({"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}) as env:
        log = env.open()
        log.append(plain(b"committed"))  # 0: k = committed
        log.append(txn(7, 0, b"aborted"))  # 1: k = aborted, in a transaction that aborts
        log.append_marker(7, 0, ControlType.ABORT, coordinator_epoch=0)  # 2
        log.roll()
        log.append(txn(8, 0, b"open", key=b"other"))  # 3: undecided, so its segment is not cleaned
        log.roll()
        log.append(plain(b"x", key=b"z"))
        stats = clean(log)
        assert stats is not None
        assert stats.records_removed == 1  # the aborted record, and nothing of the open segment
        kept = log.read(0, 1 << 20)
        headers = [h for _, h in iter_headers(kept)]
        assert any(h.is_control for h in headers)  # the marker stays
        assert b"aborted" not in values(kept)
        assert values(log.read(0, 1 << 20, upper=log.last_stable_offset)) == [b"committed"]
        log.append_marker(8, 0, ControlType.COMMIT, coordinator_epoch=0)
        assert values(log.read(3, 1 << 20, upper=log.last_stable_offset)) == [b"open"]
