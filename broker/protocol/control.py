"""Transaction markers: the control batches that end a transaction in every partition it wrote.

A marker is a batch with the transactional and control attributes set, the producer's id and
epoch, no sequence, and one record: key ``version:int16 type:int16`` (type 0 abort, 1 commit),
value ``version:int16 coordinator_epoch:int32``, as Kafka's ``EndTransactionMarker``.  Readers
never hand control records to applications; they tell a read_committed consumer where an
aborted transaction ends.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from broker.protocol.batch import ATTR_CONTROL, ATTR_TRANSACTIONAL, NO_SEQUENCE, BatchHeader, parse_header
from broker.protocol.records import Record, build_batch, decode_records

__all__ = ["ControlType", "InvalidMarker", "Marker", "build_marker", "read_marker"]

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
CURRENT_VERSION = 0


class ControlType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1


class InvalidMarker(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Marker:
    producer_id: int
    producer_epoch: int
    control: ControlType
    coordinator_epoch: int
    offset: int


def build_marker(
    producer_id: int, producer_epoch: int, control: ControlType, *, coordinator_epoch: int, offset: int, timestamp: int
) -> bytes:
    record = Record(
        offset=offset,
        timestamp=timestamp,
        key=_KEY.pack(CURRENT_VERSION, control),
        value=_VALUE.pack(CURRENT_VERSION, coordinator_epoch),
    )
    return build_batch(
        [record],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        attributes_extra=ATTR_TRANSACTIONAL | ATTR_CONTROL,
    )


def read_marker(batch: bytes | memoryview) -> Marker:
    """The marker a control batch carries; InvalidMarker when it is not one a reader can trust
    (a batch read back from disk may be corrupt like any other input)."""
    try:
        header = parse_header(batch)
    except (ValueError, struct.error) as e:
        raise InvalidMarker(f"undecodable control batch: {e}") from None
    if not (header.is_control and header.is_transactional):
        raise InvalidMarker("not a transactional control batch")
    if header.records_count != 1:
        raise InvalidMarker(f"a control batch holds one record, not {header.records_count}")
    try:
        _, records = decode_records(batch)
    except (ValueError, IndexError, struct.error) as e:  # InvalidBatch is a ValueError
        raise InvalidMarker(f"undecodable control batch: {e}") from None
    return _marker(header, records[0])


def _marker(header: BatchHeader, record: Record) -> Marker:
    if record.key is None or len(record.key) < _KEY.size:
        raise InvalidMarker("control record without a key")
    version, kind = _KEY.unpack_from(record.key)
    if version < 0:
        raise InvalidMarker(f"control record key version {version}")
    try:
        control = ControlType(kind)
    except ValueError:
        raise InvalidMarker(f"control record type {kind} is not a transaction marker") from None
    coordinator_epoch = -1
    if record.value is not None and len(record.value) >= _VALUE.size:
        _, coordinator_epoch = _VALUE.unpack_from(record.value)
    return Marker(header.producer_id, header.producer_epoch, control, coordinator_epoch, record.offset)
