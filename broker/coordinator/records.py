"""The records of `__consumer_offsets`: a key `[kind, group, ...]` and a map value (None: a
tombstone), both msgpack.  The kind says which manager owns a record: `o` the committed
offsets (broker/coordinator/offsets.py), the others group membership
(broker/coordinator/membership.py); the shard routes each by it on replay, as Kafka's
GroupCoordinatorShard routes by key version."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack

from broker.protocol.records import Record, build_plain_batch
from broker.replay import need

Rec = tuple[list[object], dict[str, object] | None]


def encode_batch(records: Sequence[Rec], now: int, packer: msgpack.Packer | None = None) -> bytes:
    """One batch of `records`, timestamped `now`.  Without a `packer` it makes its own, so a
    worker thread may build a batch while the loop packs others."""
    pack = (packer or msgpack.Packer()).pack
    return build_plain_batch([(pack(key), None if value is None else pack(value)) for key, value in records], now)


def decode(record: Record) -> tuple[list[Any], dict[str, Any] | None]:
    """A record's key and value; raises Malformed on a shape the coordinator never writes."""
    key = msgpack.unpackb(record.key or b"\x90")
    need(isinstance(key, list) and len(key) >= 2 and isinstance(key[1], str), "key is not [kind, group, ...]")
    value = None if record.value is None else msgpack.unpackb(record.value)
    need(value is None or isinstance(value, dict), "value is not a map")
    return key, value
